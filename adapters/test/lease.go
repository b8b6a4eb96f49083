package redistests

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// NewClosableStore returns a store as NewStore does, on a client of its
// own, and a function that closes that client, as a crash would: the
// store's later calls fail.
type NewClosableStore func(t testing.TB, cluster bool, o Options) (core.Store, func())

// leaser returns s as a core.Leaser, failing t if it is not one.
func leaser(t testing.TB, s core.Store) core.Leaser {
	t.Helper()
	ls, ok := s.(core.Leaser)
	if !ok {
		t.Fatalf("%T is not a core.Leaser", s)
	}
	return ls
}

// RunLeaseMath checks a store's TakeLease and ReturnLease against the
// bucket math, at frozen instants of the client clock, standalone and in
// Cluster: a lease takes as many tokens as the bucket holds up to its
// size, or none when it holds fewer than needed (with the RetryAfter of
// the shortfall); a return moves the bucket back, never beyond full; and
// Take sees the same bucket, on the same key.
func RunLeaseMath(t *testing.T, newStore NewStore) {
	for _, cluster := range []bool{false, true} {
		name := "standalone"
		if cluster {
			name = "cluster"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clock := core.NewManualClock(T0)
			s := newStore(t, cluster, Options{Clock: clock})
			ls := leaser(t, s)
			// 10 per second: one token every 100ms; full from empty in 10s.
			lim := Limits(t, core.TokenBucket(core.PerSecond(10), 100))[0]
			b := core.Bucket{Rule: "r0", Key: "*", Limit: lim}
			read := func() core.BucketState { return Take(t, s, time.Time{}, 0, b).States[0] }
			type step struct {
				name      string
				advance   time.Duration
				need      int64 // TakeLease(need, size); 0: ReturnLease(back)
				size      int64
				back      int64
				granted   int64
				want      core.BucketState // after the step, as TakeLease reports it or a read sees it
				takeAfter int64            // when > 0: a Take of this cost after the step, allowed
			}
			for _, st := range []step{
				{name: "lease_30_of_100", need: 1, size: 30, granted: 30,
					want: core.BucketState{Allowed: true, Remaining: 70, ResetAfter: 3 * time.Second}, takeAfter: 1},
				{name: "short_by_11", need: 80, size: 90,
					want: core.BucketState{Reason: core.ReasonLimited, Remaining: 69, ResetAfter: 3100 * time.Millisecond, RetryAfter: 1100 * time.Millisecond}},
				{name: "all_it_holds", need: 10, size: 1000, granted: 69,
					want: core.BucketState{Allowed: true, ResetAfter: 10 * time.Second}},
				{name: "refill_half_a_second", advance: 500 * time.Millisecond, need: 5, size: 5, granted: 5,
					want: core.BucketState{Allowed: true, ResetAfter: 10 * time.Second}},
				{name: "give_back_50", back: 50,
					want: core.BucketState{Allowed: true, Remaining: 50, ResetAfter: 5 * time.Second}},
				{name: "give_back_beyond_full", back: 1000,
					want: core.BucketState{Allowed: true, Remaining: 100}},
				{name: "above_burst", need: 101, size: 101,
					want: core.BucketState{Reason: core.ReasonCostExceedsLimit, Remaining: 100}},
				{name: "give_back_to_a_full_bucket", back: 3,
					want: core.BucketState{Allowed: true, Remaining: 100}},
			} {
				clock.Advance(st.advance)
				var got core.BucketState
				if st.need > 0 {
					g, err := ls.TakeLease(ctx, b, st.need, st.size, time.Time{})
					if err != nil {
						t.Fatalf("%s: TakeLease(%d, %d): %v", st.name, st.need, st.size, err)
					}
					if g.Granted != st.granted || !g.At.Equal(clock.Now()) {
						t.Fatalf("%s: TakeLease(%d, %d) granted %d at %v, want %d at %v", st.name, st.need, st.size, g.Granted, g.At, st.granted, clock.Now())
					}
					got = g.State
				} else {
					if err := ls.ReturnLease(ctx, b, st.back, time.Time{}); err != nil {
						t.Fatalf("%s: ReturnLease(%d): %v", st.name, st.back, err)
					}
					got = read()
				}
				if got != st.want {
					t.Fatalf("%s: state %+v, want %+v", st.name, got, st.want)
				}
				if st.takeAfter > 0 {
					tk := Take(t, s, time.Time{}, st.takeAfter, b)
					if want := st.want.Remaining - st.takeAfter; !tk.States[0].Allowed || tk.States[0].Remaining != want {
						t.Fatalf("%s: Take(%d) after it = %+v, want allowed with %d left: one bucket", st.name, st.takeAfter, tk.States[0], want)
					}
				}
			}
			window := Limits(t, core.SlidingWindow(100, time.Second))[0]
			if _, err := ls.TakeLease(ctx, core.Bucket{Rule: "r0", Key: "*", Limit: window}, 1, 1, time.Time{}); !errors.Is(err, core.ErrInvalidRule) {
				t.Fatalf("TakeLease on a sliding window = %v, want ErrInvalidRule", err)
			}
		})
	}
}

// The leased fleet: a global token bucket leased by up to Max tokens for
// 500ms, hammered for 3s by 64 goroutines on each of 8 instances: 6 from
// the start, 2 joining after 1s, 2 of the first dying after 2s. Demand
// is far above the rate: 5,000 per second (burst 5,000, Max 200) alone,
// 400 (burst 400, Max 20) beside the per-user tier, whose store call on
// every request caps what a -race binary on a busy machine decides in
// Cluster (about 1,400 a second).
const (
	fleetLeaseTTL   = 500 * time.Millisecond
	fleetRun        = 3 * time.Second
	fleetInstances  = 8
	fleetGoroutines = 64
	// FleetSlack is the time whose refill the fleet test lets go unused
	// besides the leases: the bucket is full when the run starts, so the
	// refill of the time before the first decisions is lost to its burst,
	// and at the end the bucket keeps what refilled since each instance's
	// last refill (a round trip, and a denied instance waits for the
	// shortfall to refill), and while a round trip takes longer than
	// living instances x Max / rate (240ms alone here), the refills fall
	// behind and the bucket keeps the difference. All are scheduling
	// delays of a -race binary running 512 goroutines on a shared machine
	// (load averages of 13 on 2 cores seen).
	FleetSlack = 500 * time.Millisecond
)

// RunLeaseFleet checks the bounds that core.Lease states, on one leased
// global bucket shared through Redis (see the numbers above), standalone and in Cluster, alone and
// beside an unleased per-user tier: 8 instances (each its own client,
// store and limiter, failing closed) of 64 goroutines each; 6 start, 2
// join a third into the run, 2 of the first die two thirds in (they stop
// deciding and their client is closed, so their leases are never
// returned). Over the run, from before the first decision to after the
// last, the fleet admits at most burst + rate*elapsed (no over-admission)
// and at least that less 8*Max (the leases held at the end or lost with
// the dead instances) less the refill of FleetSlack.
func RunLeaseFleet(t *testing.T, newStore NewClosableStore) {
	for _, tc := range []struct {
		name             string
		cluster, perUser bool
		rate, max        int64 // the burst is the rate
	}{
		{"standalone", false, false, 5000, 200},
		{"standalone_with_per_user", false, true, 400, 20},
		{"cluster", true, false, 5000, 200},
		{"cluster_with_per_user", true, true, 400, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			burst := tc.rate
			rules := []core.Rule{{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerSecond(tc.rate), burst), Lease: core.Lease{Max: tc.max, TTL: fleetLeaseTTL}}}
			if tc.perUser {
				// Roomy enough that the global tier decides, and decided in
				// Redis on every request, leased tier allowing or not.
				rules = append(rules, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1000), 1000)})
			}
			p := Policy(t, rules...)
			o := Options{Prefix: NewPrefix()}
			type instance struct {
				l        *core.Limiter
				kill     func()
				stop     atomic.Bool
				admitted atomic.Int64
				decided  atomic.Int64
				failed   atomic.Int64
			}
			fleet := make([]*instance, fleetInstances)
			global := p.Rules()[0]
			for i := range fleet {
				s, kill := newStore(t, tc.cluster, o)
				fleet[i] = &instance{l: Limiter(t, p, core.WithStore(s), core.WithFailureMode(core.FailClosed)), kill: kill}
				// Each client learns its Cluster's slots, and every node
				// the script, before the run: reads, which take nothing.
				Take(t, s, time.Time{}, 0, core.Bucket{Rule: "global", Key: "*", Limit: &global.Limit})
				if i == 0 && tc.perUser {
					perUser := p.Rules()[1]
					for g := range fleetGoroutines {
						Take(t, s, time.Time{}, 0, core.Bucket{Rule: "per-user", Key: "u" + strconv.Itoa(g), Limit: &perUser.Limit})
					}
				}
			}
			var wg sync.WaitGroup
			run := func(in *instance) {
				for g := range fleetGoroutines {
					req := core.Request{User: "u" + strconv.Itoa(g)}
					wg.Go(func() {
						ctx := context.Background()
						for !in.stop.Load() {
							d, err := in.l.Allow(ctx, req)
							in.decided.Add(1)
							switch {
							case err != nil:
								in.failed.Add(1)
							case d.Allowed:
								in.admitted.Add(1)
							}
						}
					})
				}
			}
			begin := time.Now()
			for _, in := range fleet[:6] {
				run(in)
			}
			time.Sleep(fleetRun / 3)
			for _, in := range fleet[6:] {
				run(in) // joining
			}
			time.Sleep(fleetRun / 3)
			for _, in := range fleet[:2] {
				in.stop.Store(true) // dying: no more decisions, and no return
				in.kill()
			}
			time.Sleep(fleetRun / 3)
			for _, in := range fleet {
				in.stop.Store(true)
			}
			wg.Wait()
			elapsed := time.Since(begin)
			var admitted, decided, failed int64
			for i, in := range fleet {
				admitted += in.admitted.Load()
				decided += in.decided.Load()
				if i >= 2 {
					failed += in.failed.Load()
				}
			}
			upper := burst + int64(float64(tc.rate)*elapsed.Seconds())
			underBound := fleetInstances * tc.max
			slack := int64(float64(tc.rate) * FleetSlack.Seconds())
			lower := upper - underBound - slack
			t.Logf("admitted %d of %d decisions in %v: bound %d (burst + rate x elapsed), %d below it; allowed below: %d (8 x Max) + %d (slack)",
				admitted, decided, elapsed.Round(time.Millisecond), upper, upper-admitted, underBound, slack)
			if failed > 0 {
				t.Errorf("%d decisions of living instances failed", failed)
			}
			if admitted > upper {
				t.Errorf("admitted %d, above burst + rate x elapsed = %d: over-admission", admitted, upper)
			}
			if admitted < lower {
				t.Errorf("admitted %d, below %d = %d - 8 x Max (%d) - the refill of %v (%d)", admitted, lower, upper, underBound, FleetSlack, slack)
			}
			// The living instances' leases end within their TTL, their
			// timers giving the tokens back while the clients are open.
			time.Sleep(fleetLeaseTTL + 100*time.Millisecond)
		})
	}
}
