package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// Property runs: sequences per family and steps per sequence.
const (
	propertySeed      = 20260101
	propertySequences = 100
	propertySteps     = 60
)

// RunPropertySuite compares the stores h builds with the reference models of
// reference.go on random sequences of Takes: time steps forwards, zero and
// backwards, costs from 0 to one above the largest burst, and tier sets of
// one to three buckets of different algorithms, rates and bursts, at scales
// from a second to months (limits longer than 100 days, which decide in
// whole microseconds). Each bucket's limit changes as the sequence goes: a
// take carries one of two or three limits of its algorithm, of the same
// span and of another, as a reloaded policy or a per-tenant limit would.
// Every bucket's answer (Allowed, Reason, Remaining, ResetAfter, RetryAfter,
// Delay) must be identical to the model's. The random source is seeded with
// a fixed, logged seed, and each sequence uses a new store, so a failure
// replays; its message lists the sequence's steps.
func RunPropertySuite(t *testing.T, h StoreHarness) {
	if h.New == nil {
		t.Fatal("conformance: StoreHarness.New is nil")
	}
	t.Logf("seed %d, %d sequences of %d steps per family", propertySeed, propertySequences, propertySteps)
	all := []core.Algorithm{core.AlgTokenBucket, core.AlgShaping, core.AlgFixedWindow, core.AlgSlidingWindow, core.AlgSlidingLog}
	families := []struct {
		name      string
		algs      []core.Algorithm
		backwards bool // whether time steps may go backwards
	}{
		{"token_bucket", all[:2], true},
		{"fixed_window", all[2:3], true},
		{"sliding_window", all[3:4], true},
		{"sliding_log", all[4:], true},
		{"mixed_forwards", all, false},
		{"mixed", all, true},
	}
	for fi, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			for seq := range propertySequences {
				r := rand.New(rand.NewPCG(propertySeed, uint64(fi*propertySequences+seq)))
				if !runSequence(t, h, r, seq, fam.algs, fam.backwards) {
					return // one replayable failure per family is enough
				}
			}
		})
	}
}

// Time scales of the sequences: a sequence's intervals and windows lie
// within a small factor of one of them, with random nanoseconds throughout.
// The last, propertyLongScale, draws limits longer than 100 days only (up
// to 400), which decide in whole microseconds.
//
// The scales are long beside the milliseconds of real time a sequence takes,
// because a Redis store sets its keys' TTLs from the suite's clock but Redis
// expires them on its own: on a scale of microseconds, keys would vanish in
// real time while the suite's clock has barely moved. The bucket math at
// every scale is fuzzed in core.
//
// Limits stay under 13, and windows under 100 minutes or, at microsecond
// resolution, 400 days, so the sliding window's float64 estimate decides
// exactly as the rational one: its rounding errors (below 1e-14) are far
// below one unit of time over the window (above 1e-13 in ns over 100
// minutes, 2.9e-14 in µs over 400 days).
var propertyScales = []int64{int64(time.Second), int64(time.Minute), int64(10 * time.Minute), propertyLongScale}

const (
	propertyDay       = int64(24 * time.Hour)
	propertyLongScale = 40 * propertyDay
)

// randomLimit returns a limit of alg near scale. Token bucket rates are N
// per Per with Per a multiple of N below 100 days: core rounds the interval
// between tokens, Per/N, up to whole nanoseconds, and with these rates there
// is nothing to round, so the exact model applies as DESIGN states it. At
// propertyLongScale the interval is any number of nanoseconds, which core
// and the model round up to the microsecond.
func randomLimit(r *rand.Rand, alg core.Algorithm, scale int64) core.Limit {
	if scale == propertyLongScale {
		return randomLongLimit(r, alg)
	}
	switch alg {
	case core.AlgTokenBucket, core.AlgShaping:
		interval := scale/2 + 1 + r.Int64N(scale*3/2)
		n := 1 + r.Int64N(5)
		rate := core.Rate{N: n, Per: time.Duration(n * interval)}
		burst := 1 + r.Int64N(12)
		if alg == core.AlgShaping {
			return core.Shaping(rate, burst, time.Duration(1+r.Int64N(4*interval)))
		}
		return core.TokenBucket(rate, burst)
	}
	// Windows are whole milliseconds, as core requires.
	ms := int64(time.Millisecond)
	window := time.Duration(max(ms, (scale+r.Int64N(9*scale))/ms*ms))
	return randomWindow(r, alg, window)
}

// randomLongLimit returns a limit of alg whose span is above 100 days and
// at most 400, rounding included.
func randomLongLimit(r *rand.Rand, alg core.Algorithm) core.Limit {
	day := propertyDay
	switch alg {
	case core.AlgTokenBucket, core.AlgShaping:
		interval := 10*day + r.Int64N(90*day)
		least, most := 100*day/interval+1, 399*day/(interval+1000)
		burst := least + r.Int64N(most-least+1)
		rate := core.Every(time.Duration(interval))
		if alg == core.AlgShaping {
			room := 400*day - burst*(interval+1000) // the rounded fill time fits beside it
			return core.Shaping(rate, burst, time.Duration(1000+r.Int64N(room-1000)))
		}
		return core.TokenBucket(rate, burst)
	}
	ms := int64(time.Millisecond)
	return randomWindow(r, alg, time.Duration(100*day+ms+r.Int64N(300*day)/ms*ms))
}

func randomWindow(r *rand.Rand, alg core.Algorithm, window time.Duration) core.Limit {
	limit := 1 + r.Int64N(12)
	switch alg {
	case core.AlgFixedWindow:
		return core.FixedWindow(limit, window)
	case core.AlgSlidingWindow:
		return core.SlidingWindow(limit, window)
	}
	return core.SlidingLog(limit, window)
}

// sameSpan returns a limit of l's algorithm meant to have its span (fill
// time or window) with other numbers: a token bucket with twice the rate
// and twice the burst (the same fill time if the interval halves exactly),
// a shaping limit with another wait, a window with another limit.
func sameSpan(r *rand.Rand, l core.Limit) core.Limit {
	switch l.Algorithm() {
	case core.AlgTokenBucket:
		rate := l.Rate()
		return core.TokenBucket(core.Rate{N: 2 * rate.N, Per: rate.Per}, 2*l.Burst())
	case core.AlgShaping:
		return core.Shaping(l.Rate(), l.Burst(), max(l.MaxWait()/2, time.Microsecond))
	}
	return randomWindow(r, l.Algorithm(), l.Window())
}

// validatedOrNil is validated for one limit, or nil if NewPolicy rejects it.
func validatedOrNil(l core.Limit) *core.Limit {
	p, err := core.NewPolicy(core.Rule{Name: "r", Scope: core.ScopeUser, Limit: l})
	if err != nil {
		return nil
	}
	return &p.Rules()[0].Limit
}

// runSequence runs one random sequence on a new store and reports whether
// the store agreed with the models throughout.
func runSequence(t *testing.T, h StoreHarness, r *rand.Rand, seq int, algs []core.Algorithm, backwards bool) bool {
	t.Helper()
	scale := propertyScales[r.IntN(len(propertyScales))]
	limits := make([]core.Limit, 3)
	for i := range limits {
		limits[i] = randomLimit(r, algs[r.IntN(len(algs))], scale)
	}
	ptrs := validated(t, limits...)
	// Each rule's limits: its own, another of its algorithm and scale, and
	// one of the same span when that validates with the same span.
	variants := make([][]*core.Limit, len(ptrs))
	for i, l := range ptrs {
		variants[i] = []*core.Limit{l, validated(t, randomLimit(r, l.Algorithm(), scale))[0]}
		if v := validatedOrNil(sameSpan(r, *l)); v != nil && v.Window() == l.Window() && v.Resolution() == l.Resolution() {
			variants[i] = append(variants[i], v)
		}
	}
	f := newFixture(t, h)
	store, clock := f.store, f.clock
	key := f.key(fmt.Sprintf("seq-%d", seq))
	buckets := make([]core.Bucket, len(ptrs))
	models := make([]refModel, len(ptrs))
	for i, l := range ptrs {
		buckets[i] = core.Bucket{Rule: fmt.Sprintf("r%d", i), Key: key, Limit: l}
		models[i] = newRefModel(l)
	}
	// The steps so far, formatted only when a step fails.
	type record struct {
		now, cost int64
		how       string
		pick      []int
		variant   []int
		got       []core.BucketState
	}
	var records []record
	history := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "seed %d, sequence %d:", propertySeed, seq)
		for i, vs := range variants {
			for v, l := range vs {
				fmt.Fprintf(&b, " r%d.%d = %v;", i, v, l)
			}
		}
		for i, rc := range records {
			fmt.Fprintf(&b, "\n  step %d: %s via %s on %v:", i, call(time.Duration(rc.now-t0.UnixNano()), rc.cost), rc.how, rc.pick)
			for j, k := range rc.pick {
				if j < len(rc.got) {
					fmt.Fprintf(&b, " r%d.%d %s", k, rc.variant[j], describe(rc.got[j]))
				}
			}
		}
		return b.String()
	}

	base := t0.UnixNano()
	now := base + r.Int64N(10*scale)
	var retryAt int64 // the last denial's now+RetryAfter; 0: none yet
	latest := now     // the latest time so far
	for step := range propertySteps {
		prev := now
		switch k := r.IntN(20); {
		case k < 4: // the same instant
		case k < 9:
			now += r.Int64N(scale)
		case k < 12:
			now += scale + r.Int64N(20*scale)
		case k < 14 && retryAt > 0:
			now = retryAt // exactly when the last denial said to retry
		case k < 15 && retryAt > 0:
			now = retryAt - 1
		case k < 16:
			now++
		default:
			now -= 1 + r.Int64N(5*scale)
		}
		if now < prev && !backwards {
			now = prev + r.Int64N(scale)
		}
		if scale == propertyLongScale {
			// Months back in a row would take a bucket's durations beyond
			// 2^56ns, where they are rounded to a double (not modelled).
			latest = max(latest, now)
			now = max(now, latest-30*propertyDay)
		}
		pick := r.Perm(len(buckets))[:1+r.IntN(len(buckets))]
		// The limit each picked bucket is decided under: its own half the
		// time, else one of its variants.
		variant := make([]int, len(pick))
		for j, i := range pick {
			if r.IntN(2) == 0 {
				variant[j] = r.IntN(len(variants[i]))
			}
		}
		var maxBurst int64
		for j, i := range pick {
			maxBurst = max(maxBurst, variants[i][variant[j]].Burst())
		}
		var cost int64
		switch k := r.IntN(10); {
		case k == 0:
		case k < 7:
			cost = 1
		case k < 9:
			cost = 1 + r.Int64N(maxBurst)
		default:
			cost = maxBurst + 1
		}

		tk := &core.Take{Cost: cost, Buckets: make([]core.Bucket, len(pick)), States: make([]core.BucketState, len(pick))}
		sub := make([]refModel, len(pick))
		subLimits := make([]*core.Limit, len(pick))
		for j, i := range pick {
			tk.Buckets[j], sub[j] = buckets[i], models[i]
			tk.Buckets[j].Limit = variants[i][variant[j]]
			subLimits[j] = tk.Buckets[j].Limit
		}
		how := "clock"
		if r.IntN(2) == 0 {
			tk.Now = time.Unix(0, now)
			how = "Now"
		} else {
			clock.Set(time.Unix(0, now))
		}
		err := store.Take(context.Background(), tk)
		records = append(records, record{now, cost, how, pick, variant, nil})
		if err != nil {
			t.Errorf("%s: unexpected error: %v\n%s", call(time.Duration(now-base), cost), err, history())
			return false
		}
		records[step].got = tk.States
		want := refTake(sub, subLimits, now, cost)
		if !slices.Equal(tk.States, want) {
			for j, i := range pick {
				check(t, fmt.Sprintf("sequence %d step %d: %s bucket r%d (%v)", seq, step, call(time.Duration(now-base), cost), i, subLimits[j]), tk.States[j], want[j])
			}
			t.Log(history())
			return false
		}
		for _, st := range want {
			if st.Reason == core.ReasonLimited {
				// From the microsecond at that resolution, or when changed.
				retryAt = now + int64(st.RetryAfter)
				if scale == propertyLongScale {
					retryAt = now - now%1000 + int64(st.RetryAfter)
				}
			}
		}
	}
	return true
}
