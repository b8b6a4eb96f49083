package redisstore

import (
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// TestRecordSlotsAllocs: telling the local denial cache what a take over
// three hash slots saw allocates nothing for the keys it does not track,
// as for a take in one slot; and a denial still makes it track them.
func TestRecordSlotsAllocs(t *testing.T) {
	lim := core.TokenBucket(core.Rate{N: 10, Per: time.Second}, 10)
	s := &Store{local: newLocal(1<<14, 100)}
	var groups []*group
	for i, key := range []string{"{a}user", "{b}endpoint", "{c}global"} {
		g := &group{slot: i, idx: []int{i}, at: base, sent: base, recv: base.Add(time.Millisecond)}
		g.call.Buckets = []core.Bucket{{Rule: "r", Key: key, Limit: &lim}}
		g.call.Keys = []string{key}
		g.call.States = []core.BucketState{{Allowed: true, Remaining: 5, ResetAfter: 500 * time.Millisecond}}
		groups = append(groups, g)
	}
	take := &core.Take{Cost: 1}
	if n := testing.AllocsPerRun(100, func() { s.recordSlots(groups, take, nil) }); n != 0 {
		t.Errorf("an allowed take over three slots: %v allocations, want 0", n)
	}
	if len(s.local.m) != 0 {
		t.Fatalf("an allowed take made %d entries, want none", len(s.local.m))
	}
	groups[2].call.States[0] = core.BucketState{Reason: core.ReasonLimited, ResetAfter: time.Second, RetryAfter: 100 * time.Millisecond}
	s.recordSlots(groups, take, nil)
	if len(s.local.m) != 3 {
		t.Errorf("a take denied in one slot tracks %d keys, want its 3", len(s.local.m))
	}
}
