package conformance_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
)

// memoryHarness builds MemoryStores on the suite's clock and counts their
// buckets after Reclaim.
func memoryHarness(opts ...core.MemoryOption) conformance.StoreHarness {
	return conformance.StoreHarness{
		New: func(t testing.TB, clock core.Clock) core.Store {
			s, err := core.NewMemoryStore(append([]core.MemoryOption{core.WithClock(clock)}, opts...)...)
			if err != nil {
				t.Fatalf("NewMemoryStore: %v", err)
			}
			return s
		},
		Keys: func(t testing.TB, s core.Store) int {
			m, ok := s.(*core.MemoryStore)
			if !ok {
				t.Fatalf("Keys: store is a %T, want *core.MemoryStore", s)
			}
			m.Reclaim()
			return m.Stats().Keys
		},
	}
}

func TestMemoryStore(t *testing.T) {
	conformance.RunStoreSuite(t, memoryHarness())
}

// TestMemoryStoreOneShard runs the suite with every bucket in one shard, so
// that multi-bucket takes lock one shard and sweeps meet every bucket.
func TestMemoryStoreOneShard(t *testing.T) {
	conformance.RunStoreSuite(t, memoryHarness(core.WithShards(1)))
}

func TestMemoryStoreProperties(t *testing.T) {
	// The property suite steps time back: keep reclaimed buckets for it.
	conformance.RunPropertySuite(t, memoryHarness(core.WithReclaimDelay(time.Hour)))
}

// TestMemoryStoreBounded: a store of at most 8 keys holds at most 8 under 20
// unexpired buckets and counts each one it had to evict; Reclaim drops the
// expired ones, and the counts of held, evicted and reclaimed buckets always
// add up to those inserted.
func TestMemoryStoreBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name     string
		shards   int
		maxKeys  int
		wantKeys int // exactly, or at most when inexact
		exact    bool
	}{
		// One shard: the bound is exact.
		{"one_shard", 1, 8, 8, true},
		// Eight shards of one key each: keys land by hash, so at most 8.
		{"eight_shards", 8, 8, 8, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := core.NewManualClock(t0)
			s, err := core.NewMemoryStore(core.WithClock(clock), core.WithMaxKeys(tc.maxKeys), core.WithShards(tc.shards))
			if err != nil {
				t.Fatal(err)
			}
			p, err := core.NewPolicy(core.Rule{Name: "r", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(1), 5)})
			if err != nil {
				t.Fatal(err)
			}
			rules := p.Rules()
			take := func(key string) {
				t.Helper()
				tk := &core.Take{Cost: 1, Buckets: []core.Bucket{{Rule: "r", Key: key, Limit: &rules[0].Limit}}, States: make([]core.BucketState, 1)}
				if err := s.Take(context.Background(), tk); err != nil {
					t.Fatal(err)
				}
				if !tk.States[0].Allowed {
					t.Fatalf("Take(t0, cost 1) on new key %q = denied, want allowed", key)
				}
			}
			checkKeys := func(when string, keys int) {
				t.Helper()
				switch {
				case tc.exact && keys != tc.wantKeys:
					t.Errorf("%s: Stats().Keys = %d, want %d", when, keys, tc.wantKeys)
				case keys > tc.wantKeys:
					t.Errorf("%s: Stats().Keys = %d, want at most %d", when, keys, tc.wantKeys)
				}
			}
			const n = 20
			for i := range n {
				take(fmt.Sprintf("user-%d", i))
			}
			st := s.Stats()
			checkKeys("after 20 keys", st.Keys)
			if st.Evictions != int64(n-st.Keys) || st.Reclaimed != 0 {
				t.Errorf("after %d keys: Stats() = %+v, want %d evictions and none reclaimed", n, st, n-st.Keys)
			}
			// Each bucket owes 1 token, refilled after a minute: then all have
			// expired, Reclaim drops them, and new keys fill the store again.
			clock.Advance(time.Minute)
			s.Reclaim()
			if got := s.Stats(); got.Keys != 0 || got.Reclaimed != int64(st.Keys) || got.Evictions != st.Evictions {
				t.Errorf("after Reclaim past expiry: Stats() = %+v, want no keys, the %d expired buckets reclaimed and no more evictions", got, st.Keys)
			}
			for i := range n {
				take(fmt.Sprintf("late-%d", i))
			}
			late := s.Stats()
			checkKeys("after the late keys", late.Keys)
			// Every bucket ever inserted is held, evicted or reclaimed.
			if sum := int64(late.Keys) + late.Evictions + late.Reclaimed; sum != 2*n {
				t.Errorf("after the late keys: Stats() = %+v: held + evicted + reclaimed = %d, want %d", late, sum, 2*n)
			}
		})
	}
}
