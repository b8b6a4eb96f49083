package redistests

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// MemoryCase is a store configuration that RunSameDecisionsAsMemory
// compares with the memory store.
type MemoryCase struct {
	Name string
	// New returns a new, empty store with the options o.
	New func(t testing.TB, o Options) core.Store
	// LocalDenials sets WithLocalDenials; Local then returns how many takes
	// st decided locally, and some must be.
	LocalDenials bool
	Local        func(st core.Store) int64
}

// RunSameDecisionsAsMemory drives the memory store and each case's store
// through the same random timelines, sequences of them, each on a new
// store: every algorithm, one to three buckets per take, costs up to
// burst+1, time stepping forwards, not at all and backwards, and takes
// repeated so that local denials happen. It requires identical states,
// field by field, and the same Take.At. In Cluster the tiers of a take lie
// in several slots: refunds happen, with time moving backwards too.
func RunSameDecisionsAsMemory(t *testing.T, sequences int, cases ...MemoryCase) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ls := Limits(t,
		core.TokenBucket(core.PerSecond(2), 4),
		core.TokenBucket(core.Rate{N: 3, Per: time.Second}, 5), // interval rounded up to the ns
		core.TokenBucket(core.PerMinute(100), 7),
		core.Shaping(core.PerSecond(10), 2, 300*time.Millisecond),
		core.FixedWindow(5, time.Second),
		core.FixedWindow(3, 7*time.Second),
		core.SlidingWindow(6, time.Second),
		core.SlidingWindow(4, 3*time.Second),
		core.SlidingLog(5, time.Second),
	)
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			var local int64
			for seq := range sequences {
				// Time steps back: keep reclaimed buckets for it (see WithReclaimDelay).
				mem, err := core.NewMemoryStore(core.WithReclaimDelay(time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				red := tc.New(t, Options{MinTTL: time.Hour, LocalDenials: tc.LocalDenials})
				now := T0.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
				var tm, tr *core.Take
				for step := range 60 {
					if step == 0 || rng.IntN(3) > 0 {
						// A new take; otherwise the last one again.
						switch rng.IntN(10) {
						case 0:
						case 1:
							now = now.Add(-time.Duration(rng.IntN(300)) * time.Millisecond)
						default:
							now = now.Add(time.Duration(rng.IntN(500))*time.Millisecond + time.Duration(rng.IntN(1000)))
						}
						n := 1 + rng.IntN(3)
						perm := rng.Perm(len(ls))[:n]
						var buckets []core.Bucket
						for _, i := range perm {
							buckets = append(buckets, core.Bucket{Rule: "r" + strconv.Itoa(i), Key: "k" + strconv.Itoa(rng.IntN(2)), Limit: ls[i]})
						}
						cost := int64(rng.IntN(int(ls[perm[0]].Burst()) + 2))
						tm = &core.Take{Now: now, Cost: cost, Buckets: buckets, States: make([]core.BucketState, n)}
						tr = &core.Take{Now: now, Cost: cost, Buckets: buckets, States: make([]core.BucketState, n)}
					}
					if err := mem.Take(context.Background(), tm); err != nil {
						t.Fatal(err)
					}
					if err := red.Take(context.Background(), tr); err != nil {
						t.Fatal(err)
					}
					for i := range tm.States {
						if tm.States[i] != tr.States[i] {
							t.Fatalf("sequence %d step %d at %v cost %d bucket %s (%v): redis %+v, memory %+v\nall buckets %v\nredis  %+v\nmemory %+v",
								seq, step, now.Sub(T0), tm.Cost, tm.Buckets[i].Rule, tm.Buckets[i].Limit, tr.States[i], tm.States[i],
								tm.Buckets, tr.States, tm.States)
						}
					}
					if !tr.At.Equal(now) {
						t.Fatalf("Take.At = %v, want %v", tr.At, now)
					}
				}
				if tc.Local != nil {
					local += tc.Local(red)
				}
			}
			if tc.LocalDenials && local == 0 {
				t.Fatal("no take was denied locally: the timelines do not exercise local denials")
			}
			t.Logf("%d local denials", local)
		})
	}
}
