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
// burst+1, time stepping forwards by up to half a second, now and then by
// hours, days or months, not at all and backwards, explicit times at any
// nanosecond, and takes repeated so that local denials happen. Some rules
// keep one limit; others take turns among several limits of their
// algorithm, as a reloaded policy or a per-tenant limit would: of other
// bursts, rates, fill times and windows, some equal, some longer than 100
// days (decided in whole microseconds, up to 400 days), so that buckets
// change limits mid-run across both resolutions. It requires identical
// states, field by field, and the same Take.At. In Cluster the tiers of a
// take lie in several slots: refunds happen, with time moving backwards too.
func RunSameDecisionsAsMemory(t *testing.T, sequences int, cases ...MemoryCase) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	day := 24 * time.Hour
	// One family of limits per rule: the rule's bucket takes each take
	// under one of them.
	fams := [][]core.Limit{
		{core.TokenBucket(core.PerSecond(2), 4)},
		{core.TokenBucket(core.Rate{N: 3, Per: time.Second}, 5)}, // interval rounded up to the ns
		{core.TokenBucket(core.PerMinute(100), 7)},
		{core.Shaping(core.PerSecond(10), 2, 300*time.Millisecond)},
		{core.FixedWindow(5, time.Second)},
		{core.FixedWindow(3, 7*time.Second)},
		{core.SlidingWindow(6, time.Second)},
		{core.SlidingWindow(4, 3*time.Second)},
		{core.SlidingLog(5, time.Second)},
		// Changing limits. Token buckets: fill times of 2s, 4s (twice,
		// one with another rate and burst), 8s, 100 days (the longest at
		// nanosecond resolution), 200 days, and 300 days whose interval
		// (100 days and 1ns) rounds up to the microsecond.
		{
			core.TokenBucket(core.PerSecond(2), 4),
			core.TokenBucket(core.PerSecond(1), 4),
			core.TokenBucket(core.PerSecond(4), 8),
			core.TokenBucket(core.PerSecond(1), 8),
			core.TokenBucket(core.Every(day), 100),
			core.TokenBucket(core.PerDay(1), 200),
			core.TokenBucket(core.Rate{N: 3, Per: 300*day + 1}, 3),
		},
		// Shaping: two of 3 days' fill time, waiting up to 2 days or 150
		// days and 1234ns (rounded down to the microsecond), so that a
		// nanosecond limit reads what a microsecond one queued.
		{
			core.Shaping(core.PerSecond(10), 2, 300*time.Millisecond),
			core.Shaping(core.PerSecond(5), 4, time.Second),
			core.Shaping(core.PerDay(1), 3, 2*day),
			core.Shaping(core.PerDay(1), 3, 150*day+1234),
			core.Shaping(core.Rate{N: 7, Per: 700 * day}, 2, 100*day+1),
		},
		{
			core.FixedWindow(5, time.Second),
			core.FixedWindow(2, time.Second),
			core.FixedWindow(4, 7*time.Second),
			core.FixedWindow(3, 200*day),
		},
		{
			core.SlidingWindow(6, time.Second),
			core.SlidingWindow(3, time.Second),
			core.SlidingWindow(4, 150*day+7*time.Millisecond),
			core.SlidingWindow(2, 150*day+7*time.Millisecond),
		},
		{
			core.SlidingLog(5, time.Second),
			core.SlidingLog(2, time.Second),
			core.SlidingLog(3, 120*day),
			core.SlidingLog(1, 120*day),
		},
	}
	var all []core.Limit
	for _, f := range fams {
		all = append(all, f...)
	}
	validated := Limits(t, all...)
	ls := make([][]*core.Limit, len(fams))
	for i, f := range fams {
		ls[i], validated = validated[:len(f)], validated[len(f):]
	}
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
						switch k := rng.IntN(40); {
						case k < 4:
						case k < 8:
							now = now.Add(-time.Duration(rng.IntN(300)) * time.Millisecond)
						case k < 10:
							now = now.Add(time.Duration(rng.Int64N(int64(3 * day))))
						case k < 11:
							now = now.Add(time.Duration(rng.Int64N(int64(200 * day))))
						default:
							now = now.Add(time.Duration(rng.IntN(500))*time.Millisecond + time.Duration(rng.IntN(1000)))
						}
						n := 1 + rng.IntN(3)
						perm := rng.Perm(len(ls))[:n]
						var buckets []core.Bucket
						for _, i := range perm {
							l := ls[i][rng.IntN(len(ls[i]))]
							buckets = append(buckets, core.Bucket{Rule: "r" + strconv.Itoa(i), Key: "k" + strconv.Itoa(rng.IntN(2)), Limit: l})
						}
						cost := int64(rng.IntN(int(min(buckets[0].Limit.Burst(), 12)) + 2))
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
