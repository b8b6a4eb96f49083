package conformance

import (
	"context"
	"sync"
	"testing"

	"github.com/bucketry/ratelimit/core"
)

// refStore is a store made of the reference models, one per bucket, behind
// one lock. It exists to check the models against the hand-computed cases
// of RunStoreSuite, so that RunPropertySuite compares stores with models
// that are right on every worked example, not merely with each other. A
// bucket keeps its model whatever limit a take carries for it, as stores
// keep their state (the suite changes limits, never algorithms).
type refStore struct {
	mu     sync.Mutex
	clock  core.Clock
	models map[core.Bucket]refModel
}

func (s *refStore) Take(_ context.Context, t *core.Take) error {
	if err := core.CheckTake(t); err != nil {
		return err
	}
	now := s.clock.Now().UnixNano()
	if !t.Now.IsZero() {
		now = t.Now.UnixNano()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := make([]refModel, len(t.Buckets))
	ls := make([]*core.Limit, len(t.Buckets))
	for i, b := range t.Buckets {
		k := core.Bucket{Rule: b.Rule, Key: b.Key}
		if s.models[k] == nil {
			s.models[k] = newRefModel(b.Limit)
		}
		ms[i], ls[i] = s.models[k], b.Limit
	}
	copy(t.States, refTake(ms, ls, now, t.Cost))
	return nil
}

// TestReferenceModels runs the store suite on the reference models.
func TestReferenceModels(t *testing.T) {
	RunStoreSuite(t, StoreHarness{New: func(_ testing.TB, clock core.Clock) core.Store {
		return &refStore{clock: clock, models: map[core.Bucket]refModel{}}
	}})
}
