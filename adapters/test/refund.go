package redistests

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// refundCaller is how long RunRefundWhenCallerEnds's caller waits for a
// take whose second node does not answer: well under FaultBound, so that
// the caller's deadline, not the store's, ends the take.
const refundCaller = 300 * time.Millisecond

// RunRefundWhenCallerEnds takes one token from two buckets on two masters
// of cl while the second master is paused, under a caller's context that
// ends first, and asserts that the take fails and that the first bucket,
// whose master answered, has its token back: a request that fails consumes
// nothing where the store knows it did, even when its caller has gone
// before the give-back. f.NewStore
// makes the store (its WithTimeout, FaultBound, bounds the give-back).
func RunRefundWhenCallerEnds(t *testing.T, cl *redistest.ClusterServer, f ClusterFault) {
	fs := f.NewStore(t, cl.Addrs(), NewPrefix())
	lim := Limits(t, core.TokenBucket(core.PerHour(1), 10), core.TokenBucket(core.PerHour(1), 10))
	var id string
	for i := 0; id == ""; i++ {
		c := "caller" + strconv.Itoa(i)
		if cl.SlotOwner(redisscript.Slot(fs.Key("r0", c))) != cl.SlotOwner(redisscript.Slot(fs.Key("r1", c))) {
			id = c
		}
	}
	buckets := []core.Bucket{{Rule: "r0", Key: id, Limit: lim[0]}, {Rule: "r1", Key: id, Limit: lim[1]}}
	// Connections and the slot map first: the take below is the only one
	// whose second node does not answer.
	Take(t, fs.Store, time.Time{}, 0, buckets...)

	slow := cl.SlotOwner(redisscript.Slot(fs.Key("r1", id)))
	slow.Pause()
	t.Cleanup(slow.Resume)
	ctx, cancel := context.WithTimeout(context.Background(), refundCaller)
	tk := &core.Take{Cost: 1, Buckets: buckets, States: make([]core.BucketState, 2)}
	start := time.Now()
	err := fs.Store.Take(ctx, tk)
	took := time.Since(start)
	cancel()
	slow.Resume()
	if err == nil {
		t.Fatalf("Take with the second master paused = nil, want an error")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Take with the second master paused = %v, want the caller's deadline", err)
	}
	t.Logf("%s: the take failed after %v: %v", f.Name, took, err)
	if took > refundCaller+FaultBound+time.Second {
		t.Errorf("the take took %v, want at most the caller's %v and the give-back's bound %v, and slack", took, refundCaller, FaultBound)
	}
	// The paused master runs the script when it resumes, after the store
	// gave up on it: what its bucket holds is not known to the take, and
	// may be a token less (the safe side). The other master's is.
	if got := Take(t, fs.Store, time.Time{}, 0, buckets[0]).States[0].Remaining; got != 10 {
		t.Errorf("after the failed take, bucket r0, on the master that answered, holds %d tokens, want all 10 back", got)
	}
}
