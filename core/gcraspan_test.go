package core

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// stale is a bucket state no decision makes: what a caller's reused state
// may hold before a decision writes into it.
var stale = BucketState{Allowed: true, Reason: ReasonLimited, Remaining: -7, ResetAfter: -1, RetryAfter: 12345, Delay: 999}

// TestGcraSpanWritesEveryField checks that gcraSpan, which writes into its
// caller's state rather than returning a new one, writes every field on
// every path: into a stale state it answers what it answers into a zero one.
func TestGcraSpanWritesEveryField(t *testing.T) {
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, def := range []Limit{
		TokenBucket(PerSecond(10), 5),
		Shaping(PerSecond(10), 5, 300*time.Millisecond),
		TokenBucket(Rate{N: 3, Per: 200 * 24 * time.Hour}, 3), // decided in whole microseconds
	} {
		l, err := NewLimit(def)
		if err != nil {
			t.Fatal(err)
		}
		for _, tat := range []int64{0, now - 1e9, now, now + l.tau/2, now + l.tau, now + 2*l.tau} {
			for _, span := range []int64{0, l.tau, l.tau / 2, 2 * l.tau} {
				for _, cost := range []int64{0, 1, 3, l.burst, l.burst + 1} {
					var fresh BucketState
					st := stale
					left1, next1 := l.gcraSpan(&fresh, tat, span, now, cost)
					left2, next2 := l.gcraSpan(&st, tat, span, now, cost)
					if st != fresh || left1 != left2 || next1 != next2 {
						t.Errorf("%v, tat %d, span %d, cost %d: into a stale state %+v, %d, %d; into a zero one %+v, %d, %d",
							def, tat-now, span, cost, st, left2, next2, fresh, left1, next1)
					}
				}
			}
		}
	}
}

// TestMemoryTakeOverwritesStates checks that the memory store answers a
// Take whose States hold a previous take's answers (a Take reused) as it
// answers a fresh one, on its one-bucket and several-bucket paths, allowed
// and denied.
func TestMemoryTakeOverwritesStates(t *testing.T) {
	lim, err := NewLimit(TokenBucket(PerSecond(1), 2))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("buckets=%d", n), func(t *testing.T) {
			clean, reused := mustMemory(t), mustMemory(t)
			buckets := make([]Bucket, n)
			for i := range buckets {
				buckets[i] = Bucket{Rule: fmt.Sprintf("r%d", i), Key: "k", Limit: lim}
			}
			for i := range 4 { // allowed twice, then denied
				want := Take{Now: at, Cost: 1, Buckets: buckets, States: make([]BucketState, n)}
				got := Take{Now: at, Cost: 1, Buckets: buckets, States: make([]BucketState, n)}
				for j := range got.States {
					got.States[j] = stale
				}
				if err := clean.Take(context.Background(), &want); err != nil {
					t.Fatal(err)
				}
				if err := reused.Take(context.Background(), &got); err != nil {
					t.Fatal(err)
				}
				for j := range want.States {
					if got.States[j] != want.States[j] {
						t.Errorf("take %d, bucket %d: %+v over stale states, %+v over zero ones", i, j, got.States[j], want.States[j])
					}
				}
			}
		})
	}
}
