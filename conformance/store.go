package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// StoreHarness tells the suite how to build and inspect one kind of store.
// The suite calls New once per case, so each case starts from an empty store
// with its own clock.
type StoreHarness struct {
	// New returns a new, empty store that reads time from clock when a Take
	// has no explicit Now. It fails t (t.Fatal) if the store cannot be built,
	// and registers its own cleanup with t.Cleanup. Required.
	//
	// A store that expires keys on a clock of its own, as Redis does in real
	// time, must keep them for the whole run (the Redis stores'
	// WithMinTTL(time.Hour)): the suite's clock jumps minutes ahead and back
	// in microseconds of real time.
	New func(t testing.TB, clock core.Clock) core.Store
	// Keys, if set, returns how many buckets the store holds after
	// reclaiming the expired ones, as of the clock given to New (the suite
	// moves that clock before calling Keys). The expiry and bad-input cases
	// use it to check that expired buckets are dropped and that reads,
	// denials and rejected input store nothing. Optional.
	Keys func(t testing.TB, s core.Store) int
}

// t0 is the first named instant of every timeline. It is a whole number of
// days after the Unix epoch, so windows of a second, a minute or an hour (and
// of 3s or 7s) start on it; a 13s window does not (see the fixed-window case).
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	ns  = time.Nanosecond
	ms  = time.Millisecond
	sec = time.Second
)

// RunStoreSuite runs every case of the store contract against the stores h
// builds, each case and algorithm in its own subtest with its own store and
// clock.
func RunStoreSuite(t *testing.T, h StoreHarness) {
	if h.New == nil {
		t.Fatal("conformance: StoreHarness.New is nil")
	}
	t.Run("NewBucketHoldsBurst", func(t *testing.T) { testBurst(t, h) })
	t.Run("SeedTimeline", func(t *testing.T) { testSeedTimeline(t, h) })
	t.Run("Refill", func(t *testing.T) { testRefill(t, h) })
	t.Run("Cost", func(t *testing.T) { testCost(t, h) })
	t.Run("ReadsStoreNothing", func(t *testing.T) { testReadsStoreNothing(t, h) })
	t.Run("MultiTier", func(t *testing.T) { testMultiTier(t, h) })
	t.Run("MultiTierDenierPosition", func(t *testing.T) { testDenierPosition(t, h) })
	t.Run("TimeBackwards", func(t *testing.T) { testBackwards(t, h) })
	t.Run("FixedWindowEdge", func(t *testing.T) { testFixedWindowEdge(t, h) })
	t.Run("SlidingWindowWeighting", func(t *testing.T) { testSlidingWeighting(t, h) })
	t.Run("SlidingLogExact", func(t *testing.T) { testSlidingLog(t, h) })
	t.Run("ShapingQueue", func(t *testing.T) { testShaping(t, h) })
	t.Run("RetryAfterExact", func(t *testing.T) { testRetryAfterExact(t, h) })
	t.Run("Expiry", func(t *testing.T) { testExpiry(t, h) })
	t.Run("KeyIsolation", func(t *testing.T) { testKeyIsolation(t, h) })
	t.Run("Concurrency", func(t *testing.T) { testConcurrency(t, h) })
	t.Run("ConcurrencyMultiTier", func(t *testing.T) { testConcurrencyMultiTier(t, h) })
	t.Run("BadInput", func(t *testing.T) { testBadInput(t, h) })
	t.Run("ExplicitNow", func(t *testing.T) { testExplicitNow(t, h) })
	t.Run("LimitChange", func(t *testing.T) { testLimitChange(t, h) })
	t.Run("LongLimits", func(t *testing.T) { testLongLimits(t, h) })
}

// instant names t0+d the way the suite's messages do: "t0", "t0+500ms",
// "t0-1ns".
func instant(d time.Duration) string {
	switch {
	case d == 0:
		return "t0"
	case d < 0:
		return "t0" + d.String()
	}
	return "t0+" + d.String()
}

// call names one Take in a failure message.
func call(at time.Duration, cost int64) string {
	return fmt.Sprintf("Take(%s, cost %d)", instant(at), cost)
}

// validated builds the limits through core.NewPolicy, which checks them and
// fills their derived fields, and returns pointers into the validated copies.
// Rule i is named "r<i>". Policy.Rules returns a copy, and the returned
// pointers keep that copy alive.
func validated(t testing.TB, ls ...core.Limit) []*core.Limit {
	t.Helper()
	rules := make([]core.Rule, len(ls))
	for i, l := range ls {
		rules[i] = core.Rule{Name: fmt.Sprintf("r%d", i), Scope: core.ScopeUser, Limit: l}
	}
	p, err := core.NewPolicy(rules...)
	if err != nil {
		t.Fatalf("conformance: NewPolicy: %v", err)
	}
	kept := p.Rules()
	out := make([]*core.Limit, len(kept))
	for i := range kept {
		out[i] = &kept[i].Limit
	}
	return out
}

// bucket returns the bucket (rule, key) of limit l, validated.
func bucket(t testing.TB, rule, key string, l core.Limit) core.Bucket {
	t.Helper()
	return core.Bucket{Rule: rule, Key: key, Limit: validated(t, l)[0]}
}

// algName names a subtest after its limit's algorithm.
func algName(l core.Limit) string { return l.Algorithm().String() }

// fixture is one case's store and clock.
type fixture struct {
	t     *testing.T
	h     StoreHarness
	store core.Store
	clock *core.ManualClock
	id    int64 // makes the case's keys its own
}

// fixtures counts the fixtures made, to give each its own keys.
var fixtures atomic.Int64

func newFixture(t *testing.T, h StoreHarness) *fixture {
	t.Helper()
	clock := core.NewManualClock(t0)
	s := h.New(t, clock)
	if s == nil {
		t.Fatal("conformance: StoreHarness.New returned a nil store")
	}
	return &fixture{t: t, h: h, store: s, clock: clock, id: fixtures.Add(1)}
}

// key returns the case's own version of key k: no two cases share a key,
// even if a harness gave them one key space.
func (f *fixture) key(k string) string { return fmt.Sprintf("%s~%d", k, f.id) }

// longKey returns a key of the case that is exactly MaxKeyLen bytes long.
func (f *fixture) longKey() string {
	k := f.key("")
	return k + strings.Repeat("k", core.MaxKeyLen-len(k))
}

// take moves the clock to t0+at and takes cost from bs with no explicit Now,
// so that the store reads its clock. It fails the test on error.
func (f *fixture) take(at time.Duration, cost int64, bs ...core.Bucket) []core.BucketState {
	f.t.Helper()
	f.clock.Set(t0.Add(at))
	tk := &core.Take{Cost: cost, Buckets: bs, States: make([]core.BucketState, len(bs))}
	if err := f.store.Take(context.Background(), tk); err != nil {
		f.t.Fatalf("%s: unexpected error: %v", call(at, cost), err)
	}
	return tk.States
}

// takeOne is take on a single bucket.
func (f *fixture) takeOne(at time.Duration, cost int64, b core.Bucket) core.BucketState {
	f.t.Helper()
	return f.take(at, cost, b)[0]
}

// keys returns h.Keys with the clock at t0+at, and false when the harness
// cannot count keys.
func (f *fixture) keys(at time.Duration) (int, bool) {
	f.t.Helper()
	if f.h.Keys == nil {
		return 0, false
	}
	f.clock.Set(t0.Add(at))
	return f.h.Keys(f.t, f.store), true
}

// expectKeys checks the store's key count at t0+at, if the harness can count.
func (f *fixture) expectKeys(at time.Duration, want int) {
	f.t.Helper()
	if n, ok := f.keys(at); ok && n != want {
		f.t.Errorf("Keys() at %s = %d, want %d", instant(at), n, want)
	}
}

// verdict reads a state's Allowed as the failure messages spell it.
func verdict(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

// check reports every field of got that differs from want, and whether all
// matched.
func check(t testing.TB, what string, got, want core.BucketState) bool {
	t.Helper()
	ok := true
	if got.Allowed != want.Allowed {
		t.Errorf("%s = %s, want %s (got %s)", what, verdict(got.Allowed), verdict(want.Allowed), describe(got))
		ok = false
	}
	fields := []struct {
		name      string
		got, want any
	}{
		{"Reason", got.Reason, want.Reason},
		{"Remaining", got.Remaining, want.Remaining},
		{"ResetAfter", got.ResetAfter, want.ResetAfter},
		{"RetryAfter", got.RetryAfter, want.RetryAfter},
		{"Delay", got.Delay, want.Delay},
	}
	for _, fd := range fields {
		if fd.got != fd.want {
			t.Errorf("%s: %s = %v, want %v", what, fd.name, fd.got, fd.want)
			ok = false
		}
	}
	return ok
}

// describe formats a bucket state compactly for failure messages.
func describe(st core.BucketState) string {
	return fmt.Sprintf("{%s %v remaining %d reset %v retry %v delay %v}",
		verdict(st.Allowed), st.Reason, st.Remaining, st.ResetAfter, st.RetryAfter, st.Delay)
}

// allowed is an admitting state with no delay.
func allowed(remaining int64, reset time.Duration) core.BucketState {
	return core.BucketState{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

// delayed is a shaping bucket's admission into a later slot: nothing remains.
func delayed(reset, delay time.Duration) core.BucketState {
	return core.BucketState{Allowed: true, ResetAfter: reset, Delay: delay}
}

// limited is a denial that can pass after retry.
func limited(remaining int64, reset, retry time.Duration) core.BucketState {
	return core.BucketState{Reason: core.ReasonLimited, Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

// exceeds is the denial of a cost above the burst: no retry time.
func exceeds(remaining int64, reset time.Duration) core.BucketState {
	return core.BucketState{Reason: core.ReasonCostExceedsLimit, Remaining: remaining, ResetAfter: reset}
}

// step is one Take of a single-bucket timeline and its expected answer.
type step struct {
	at   time.Duration // offset from t0
	cost int64
	want core.BucketState
}

// timeline is a named sequence of steps on one fresh bucket.
type timeline struct {
	name  string
	limit core.Limit
	steps []step
}

// runTimelines runs each timeline in its own subtest, on its own store.
func runTimelines(t *testing.T, h StoreHarness, tls []timeline) {
	for _, tl := range tls {
		name := tl.name
		if name == "" {
			name = algName(tl.limit)
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, h)
			b := bucket(t, "r", f.key("alice"), tl.limit)
			for _, s := range tl.steps {
				check(t, call(s.at, s.cost), f.takeOne(s.at, s.cost, b), s.want)
			}
		})
	}
}

// repeat returns n steps of cost 1 at the same instant, with the wants
// produced by want(i) for the i-th (from 0).
func repeat(n int, at time.Duration, want func(i int) core.BucketState) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = step{at, 1, want(i)}
	}
	return out
}

// testBurst: a new bucket is full. It holds exactly burst: burst takes of
// cost 1 pass with exact Remaining and ResetAfter, the next is denied with an
// exact RetryAfter.
func testBurst(t *testing.T, h StoreHarness) {
	const q = 250 * ms // window cases start a quarter into a one-second window
	runTimelines(t, h, []timeline{
		{limit: core.TokenBucket(core.PerSecond(2), 4), steps: slices.Concat(
			[]step{{0, 0, allowed(4, 0)}},
			repeat(4, 0, func(i int) core.BucketState {
				return allowed(int64(3-i), time.Duration(i+1)*500*ms)
			}),
			[]step{{0, 1, limited(0, 2*sec, 500*ms)}, {0, 0, allowed(0, 2*sec)}},
		)},
		{limit: core.Shaping(core.PerSecond(2), 4, 200*ms), steps: slices.Concat(
			[]step{{0, 0, allowed(4, 0)}},
			repeat(4, 0, func(i int) core.BucketState {
				return allowed(int64(3-i), time.Duration(i+1)*500*ms)
			}),
			// The fifth token is 500ms away, 300ms more than MaxWait.
			[]step{{0, 1, limited(0, 2*sec, 300*ms)}},
		)},
		{limit: core.FixedWindow(4, sec), steps: slices.Concat(
			[]step{{q, 0, allowed(4, 0)}},
			repeat(4, q, func(i int) core.BucketState { return allowed(int64(3-i), 750*ms) }),
			[]step{{q, 1, limited(0, 750*ms, 750*ms)}},
		)},
		{limit: core.SlidingWindow(4, sec), steps: slices.Concat(
			[]step{{q, 0, allowed(4, 0)}},
			// ResetAfter: the current window's count weighs until the end of
			// the next window, t0+2s.
			repeat(4, q, func(i int) core.BucketState { return allowed(int64(3-i), 1750*ms) }),
			// Next window, 4 as previous: 4*(1-x)+1 <= 4 from x = 25%, t0+1.25s.
			[]step{{q, 1, limited(0, 1750*ms, sec)}},
		)},
		{limit: core.SlidingLog(4, sec), steps: slices.Concat(
			[]step{{q, 0, allowed(4, 0)}},
			repeat(4, q, func(i int) core.BucketState { return allowed(int64(3-i), sec) }),
			[]step{{q, 1, limited(0, sec, sec)}},
		)},
	})
}

// testSeedTimeline is the corrected timeline of the seed notes: capacity 4,
// rate 2/s, starting full. t=0 four pass; t=0.5 one passes; t=1 one passes;
// t=2 of three, two pass and the third is denied with RetryAfter 500ms.
func testSeedTimeline(t *testing.T, h StoreHarness) {
	runTimelines(t, h, []timeline{{name: "capacity4_rate2", limit: core.TokenBucket(core.PerSecond(2), 4), steps: slices.Concat(
		repeat(4, 0, func(i int) core.BucketState { return allowed(int64(3-i), time.Duration(i+1)*500*ms) }),
		[]step{
			{500 * ms, 1, allowed(0, 2*sec)},
			{sec, 1, allowed(0, 2*sec)},
			{2 * sec, 1, allowed(1, 1500*ms)},
			{2 * sec, 1, allowed(0, 2*sec)},
			{2 * sec, 1, limited(0, 2*sec, 500*ms)},
			{2500*ms - ns, 1, limited(0, 1500*ms+ns, ns)},
			{2500 * ms, 1, allowed(0, 2*sec)},
		},
	)}})
}

// testRefill: an emptied token bucket refills one token per interval,
// exactly at the interval's end, and never beyond burst.
func testRefill(t *testing.T, h StoreHarness) {
	runTimelines(t, h, []timeline{
		{name: "rate2_burst4", limit: core.TokenBucket(core.PerSecond(2), 4), steps: []step{
			{0, 4, allowed(0, 2*sec)},
			{499 * ms, 0, allowed(0, 1501*ms)},
			{500*ms - ns, 0, allowed(0, 1500*ms+ns)},
			{500 * ms, 0, allowed(1, 1500*ms)},
			{999 * ms, 0, allowed(1, 1001*ms)},
			{sec, 0, allowed(2, sec)},
			{1750 * ms, 0, allowed(3, 250*ms)},
			{2*sec - ns, 0, allowed(3, ns)},
			{2 * sec, 0, allowed(4, 0)},
			{time.Hour, 0, allowed(4, 0)},
			{time.Hour, 4, allowed(0, 2*sec)},
		}},
		// One token every 7ms: partial refills of a slow bucket.
		{name: "every7ms_burst3", limit: core.TokenBucket(core.Every(7*ms), 3), steps: []step{
			{0, 3, allowed(0, 21*ms)},
			{6 * ms, 1, limited(0, 15*ms, ms)},
			{7 * ms, 1, allowed(0, 21*ms)},
			{20 * ms, 0, allowed(1, 8*ms)},
			{28 * ms, 0, allowed(3, 0)},
		}},
	})
}

// testCost: cost 0 reads without consuming (even from an empty bucket), cost
// n takes n, a cost above the burst is denied at once with
// ReasonCostExceedsLimit and no retry time, and changes nothing.
func testCost(t *testing.T, h StoreHarness) {
	const q = 250 * ms
	runTimelines(t, h, []timeline{
		{limit: core.TokenBucket(core.PerSecond(2), 4), steps: []step{
			{0, 0, allowed(4, 0)},
			{0, 5, exceeds(4, 0)},
			{0, 3, allowed(1, 1500*ms)},
			{0, 2, limited(1, 1500*ms, 500*ms)},
			{0, 0, allowed(1, 1500*ms)},
			{0, 0, allowed(1, 1500*ms)},
			{0, 1, allowed(0, 2*sec)},
			{0, 0, allowed(0, 2*sec)},
			{0, 5, exceeds(0, 2*sec)},
			{2 * sec, 4, allowed(0, 2*sec)},
		}},
		{limit: core.Shaping(core.PerSecond(2), 4, sec), steps: []step{
			{0, 0, allowed(4, 0)},
			{0, 5, exceeds(4, 0)},
			{0, 3, allowed(1, 1500*ms)},
			// One token left: the second is 500ms away, within MaxWait.
			{0, 2, delayed(2500*ms, 500*ms)},
			// Two more would be 1.5s away, 500ms past MaxWait.
			{0, 2, limited(0, 2500*ms, 500*ms)},
			{0, 0, allowed(0, 2500*ms)},
			{0, 5, exceeds(0, 2500*ms)},
		}},
		{limit: core.FixedWindow(4, sec), steps: []step{
			{q, 0, allowed(4, 0)},
			{q, 5, exceeds(4, 0)},
			{q, 3, allowed(1, 750*ms)},
			{q, 2, limited(1, 750*ms, 750*ms)},
			{q, 0, allowed(1, 750*ms)},
			{q, 1, allowed(0, 750*ms)},
			{q, 0, allowed(0, 750*ms)},
			{q, 5, exceeds(0, 750*ms)},
			{sec, 4, allowed(0, sec)},
		}},
		{limit: core.SlidingWindow(4, sec), steps: []step{
			{q, 0, allowed(4, 0)},
			{q, 5, exceeds(4, 0)},
			{q, 3, allowed(1, 1750*ms)},
			// 3+2 > 4 in this window; in the next, 3*(1-x)+2 <= 4 from
			// x = 1/3 of a second, rounded up to the nanosecond: t0+1.333333334s.
			{q, 2, limited(1, 1750*ms, 1083333334*ns)},
			{q, 0, allowed(1, 1750*ms)},
			{q, 1, allowed(0, 1750*ms)},
			{q, 5, exceeds(0, 1750*ms)},
		}},
		{limit: core.SlidingLog(4, sec), steps: []step{
			{q, 0, allowed(4, 0)},
			{q, 5, exceeds(4, 0)},
			{q, 3, allowed(1, sec)},
			{q, 2, limited(1, sec, sec)},
			{q, 0, allowed(1, sec)},
			{q, 1, allowed(0, sec)},
			{q, 5, exceeds(0, sec)},
			{1250 * ms, 4, allowed(0, sec)},
		}},
	})
}

// allLimits is one limit of each algorithm, each with burst (or window
// limit) 4.
func allLimits() []core.Limit {
	return []core.Limit{
		core.TokenBucket(core.PerSecond(2), 4),
		core.Shaping(core.PerSecond(2), 4, 200*ms),
		core.FixedWindow(4, sec),
		core.SlidingWindow(4, sec),
		core.SlidingLog(4, sec),
	}
}

// testReadsStoreNothing: reads and denials of a new bucket leave it new, and
// (when the harness counts keys) store nothing.
func testReadsStoreNothing(t *testing.T, h StoreHarness) {
	for _, l := range allLimits() {
		t.Run(algName(l), func(t *testing.T) {
			f := newFixture(t, h)
			b := bucket(t, "r", f.key("alice"), l)
			check(t, call(0, 0), f.takeOne(0, 0, b), allowed(4, 0))
			check(t, call(0, 5), f.takeOne(0, 5, b), exceeds(4, 0))
			f.expectKeys(0, 0)
			if st := f.takeOne(0, 4, b); !st.Allowed {
				t.Errorf("%s = denied, want allowed: reads consumed tokens (got %s)", call(0, 4), describe(st))
			}
		})
	}
}

// multiStep is one Take of a multi-tier timeline and each bucket's answer.
type multiStep struct {
	at   time.Duration
	cost int64
	want []core.BucketState
}

// runMulti runs steps against bs on f, naming each bucket in failures.
func (f *fixture) runMulti(bs []core.Bucket, steps []multiStep) {
	f.t.Helper()
	for _, s := range steps {
		got := f.take(s.at, s.cost, bs...)
		for i := range bs {
			check(f.t, fmt.Sprintf("%s bucket %s/%s", call(s.at, s.cost), bs[i].Rule, bs[i].Key), got[i], s.want[i])
		}
	}
}

// readEach reads every bucket alone (cost 0) at t0+at and checks its
// Remaining.
func (f *fixture) readEach(at time.Duration, bs []core.Bucket, remaining []int64) {
	f.t.Helper()
	for i, b := range bs {
		st := f.takeOne(at, 0, b)
		if st.Remaining != remaining[i] {
			f.t.Errorf("%s bucket %s/%s: Remaining = %d, want %d", call(at, 0), b.Rule, b.Key, st.Remaining, remaining[i])
		}
	}
}

// testMultiTier: a Take on several buckets is all or nothing. When one
// bucket denies, no bucket consumes; every bucket reports its own view: the
// denying ones why, the others that they would allow and their balance as it
// stands.
func testMultiTier(t *testing.T, h StoreHarness) {
	f := newFixture(t, h)
	ls := validated(t,
		core.TokenBucket(core.PerSecond(1), 10),
		core.FixedWindow(2, time.Minute),
		core.SlidingLog(5, time.Minute),
	)
	bs := []core.Bucket{
		{Rule: "per-user", Key: f.key("alice"), Limit: ls[0]},
		{Rule: "per-endpoint", Key: f.key("GET /items"), Limit: ls[1]},
		{Rule: "global", Key: f.key("*"), Limit: ls[2]},
	}
	const at = 10 * sec
	f.runMulti(bs, []multiStep{
		{at, 1, []core.BucketState{allowed(9, sec), allowed(1, 50*sec), allowed(4, time.Minute)}},
		{at, 1, []core.BucketState{allowed(8, 2*sec), allowed(0, 50*sec), allowed(3, time.Minute)}},
		// per-endpoint is spent: nothing is taken, the others report their
		// balance as it stands.
		{at, 1, []core.BucketState{allowed(8, 2*sec), limited(0, 50*sec, 50*sec), allowed(3, time.Minute)}},
		// 3 exceeds per-endpoint's limit of 2: it can never pass.
		{at, 3, []core.BucketState{allowed(8, 2*sec), exceeds(0, 50*sec), allowed(3, time.Minute)}},
	})
	f.readEach(at, bs, []int64{8, 0, 3})
	f.runMulti(bs, []multiStep{
		// A new minute: per-endpoint starts over; per-user is full again.
		{time.Minute, 2, []core.BucketState{allowed(8, 2*sec), allowed(0, time.Minute), allowed(1, time.Minute)}},
		// Two deny at once, each with its own RetryAfter: per-endpoint at
		// the next minute, global when the two requests of t0+10s leave.
		{time.Minute, 2, []core.BucketState{allowed(8, 2*sec), limited(0, time.Minute, time.Minute), limited(1, time.Minute, 10*sec)}},
	})
	f.readEach(time.Minute, bs, []int64{8, 0, 1})
}

// testDenierPosition: whether the denying bucket comes first, in the middle
// or last, the buckets before and after it stay untouched.
func testDenierPosition(t *testing.T, h StoreHarness) {
	for pos := range 3 {
		t.Run(fmt.Sprintf("denier_at_%d", pos), func(t *testing.T) {
			f := newFixture(t, h)
			big := validated(t, core.TokenBucket(core.PerHour(1), 10), core.SlidingLog(10, time.Hour))
			small := bucket(t, "small", f.key("k"), core.TokenBucket(core.PerHour(1), 1))
			bs := []core.Bucket{
				{Rule: "big-a", Key: f.key("k"), Limit: big[0]},
				{Rule: "big-b", Key: f.key("k"), Limit: big[1]},
			}
			bs = slices.Insert(bs, pos, small)
			f.take(0, 1, bs...) // everyone has 1 taken; small is now empty
			for range 3 {
				got := f.take(0, 1, bs...)
				for i := range bs {
					if got[i].Allowed == (i == pos) {
						t.Errorf("%s bucket %s: %s, want the small bucket alone to deny", call(0, 1), bs[i].Rule, describe(got[i]))
					}
				}
			}
			remaining := []int64{9, 9}
			remaining = slices.Insert(remaining, pos, 0)
			f.readEach(0, bs, remaining)
		})
	}
}

// testBackwards: when time moves backwards nothing refills. A token bucket
// owes the difference; a window keeps its latest window's count, and a
// RetryAfter given then is still exact.
func testBackwards(t *testing.T, h StoreHarness) {
	runTimelines(t, h, []timeline{
		{limit: core.TokenBucket(core.PerSecond(2), 4), steps: []step{
			{10 * sec, 4, allowed(0, 2*sec)},
			{5 * sec, 0, allowed(0, 7*sec)},
			{5 * sec, 1, limited(0, 7*sec, 5500*ms)},
			{9 * sec, 1, limited(0, 3*sec, 1500*ms)},
			{10500*ms - ns, 1, limited(0, 1500*ms+ns, ns)},
			{10500 * ms, 1, allowed(0, 2*sec)},
		}},
		{limit: core.Shaping(core.PerSecond(2), 4, sec), steps: []step{
			{10 * sec, 4, allowed(0, 2*sec)},
			{5 * sec, 1, limited(0, 7*sec, 4500*ms)},
			{9500 * ms, 1, delayed(3*sec, sec)},
		}},
		{limit: core.FixedWindow(4, sec), steps: []step{
			{1500 * ms, 4, allowed(0, 500*ms)},
			// Back in the window before: t0+1s's count still holds.
			{500 * ms, 0, allowed(0, 1500*ms)},
			{500 * ms, 1, limited(0, 1500*ms, 1500*ms)},
			{2 * sec, 4, allowed(0, sec)},
		}},
		{limit: core.SlidingWindow(4, sec), steps: []step{
			{1500 * ms, 4, allowed(0, 1500*ms)},
			// Back before the window: its count still weighs in full. In
			// the next window, 4*(1-x)+1 <= 4 from x = 25%: t0+2.25s.
			{500 * ms, 1, limited(0, 2500*ms, 1750*ms)},
			{2250 * ms, 1, allowed(0, 1750*ms)},
		}},
		{limit: core.SlidingLog(4, sec), steps: []step{
			{1500 * ms, 4, allowed(0, sec)},
			{500 * ms, 1, limited(0, 2*sec, 2*sec)},
			{2500*ms - ns, 1, limited(0, ns, ns)},
			{2500 * ms, 1, allowed(3, sec)},
		}},
	})
}

// testFixedWindowEdge: a fixed window's count resets exactly at the window
// boundary aligned to the Unix epoch, not before and not one window after the
// first request.
func testFixedWindowEdge(t *testing.T, h StoreHarness) {
	// t0 is 10s into an epoch-aligned 13s window, so the next window starts
	// at t0+3s, not at t0+13s.
	const w = 13 * sec
	edge := w - time.Duration(t0.UnixNano()%int64(w))
	if edge != 3*sec {
		t.Fatalf("conformance: t0 is %v into a 13s window, the case assumes 10s", w-edge)
	}
	runTimelines(t, h, []timeline{
		{name: "13s_window", limit: core.FixedWindow(3, w), steps: []step{
			{0, 3, allowed(0, edge)},
			{0, 1, limited(0, edge, edge)},
			{edge - ns, 1, limited(0, ns, ns)},
			{edge, 1, allowed(2, w)},
			{edge, 2, allowed(0, w)},
			{edge + w - ns, 1, limited(0, ns, ns)},
			{edge + w, 3, allowed(0, w)},
		}},
		{name: "1m_window", limit: core.FixedWindow(2, time.Minute), steps: []step{
			{59 * sec, 2, allowed(0, sec)},
			{time.Minute - ns, 1, limited(0, ns, ns)},
			{time.Minute, 2, allowed(0, time.Minute)},
		}},
	})
}

// testSlidingWeighting: the sliding window counter weighs the previous
// window by the share of it still inside the sliding window. With 10 per 1s
// and 10 in the previous window, 25% into the current one the estimate is
// 7.5: two more pass, the third is denied until the estimate is 7, at 30%.
func testSlidingWeighting(t *testing.T, h StoreHarness) {
	runTimelines(t, h, []timeline{{name: "limit10_per_1s", limit: core.SlidingWindow(10, sec), steps: []step{
		{500 * ms, 10, allowed(0, 1500*ms)},
		{1250 * ms, 0, allowed(2, 750*ms)},
		{1250 * ms, 1, allowed(1, 1750*ms)},
		{1250 * ms, 1, allowed(0, 1750*ms)},
		{1250 * ms, 1, limited(0, 1750*ms, 50*ms)},
		{1300*ms - ns, 1, limited(0, 1700*ms+ns, ns)},
		{1300 * ms, 1, allowed(0, 1700*ms)},
		// The next window sees 3 as previous, and at its start weighs it
		// in full.
		{2 * sec, 0, allowed(7, sec)},
		{2500 * ms, 0, allowed(8, 500*ms)},
		{3 * sec, 0, allowed(10, 0)},
	}}})
}

// testSlidingLog: a sliding log admits exactly limit per window, and each
// admitted cost leaves exactly one window after it was admitted.
func testSlidingLog(t *testing.T, h StoreHarness) {
	runTimelines(t, h, []timeline{{name: "limit3_per_1s", limit: core.SlidingLog(3, sec), steps: []step{
		{100 * ms, 1, allowed(2, sec)},
		{200 * ms, 1, allowed(1, sec)},
		{300 * ms, 1, allowed(0, sec)},
		{1100*ms - ns, 1, limited(0, 200*ms+ns, ns)},
		{1100 * ms, 1, allowed(0, sec)},
		{1100 * ms, 1, limited(0, sec, 100*ms)},
		{1200 * ms, 2, limited(1, 900*ms, 100*ms)},
		{1300 * ms, 2, allowed(0, sec)},
		{2100*ms - ns, 0, allowed(0, 200*ms+ns)},
		{2100 * ms, 0, allowed(1, 200*ms)},
		{2300*ms - ns, 0, allowed(1, ns)},
		{2300 * ms, 0, allowed(3, 0)},
	}}})
}

// testShaping: a shaping bucket admits requests beyond its burst with Delay
// set to the exact wait for their slot, in arrival order, until that wait
// would exceed MaxWait; then it denies with RetryAfter = wait - MaxWait.
func testShaping(t *testing.T, h StoreHarness) {
	// One slot every 100ms, burst 2, at most 250ms of queueing.
	runTimelines(t, h, []timeline{{name: "rate10_burst2_wait250ms", limit: core.Shaping(core.PerSecond(10), 2, 250*ms), steps: []step{
		{0, 1, allowed(1, 100*ms)},
		{0, 1, allowed(0, 200*ms)},
		{0, 1, delayed(300*ms, 100*ms)},
		{0, 1, delayed(400*ms, 200*ms)},
		{0, 1, limited(0, 400*ms, 50*ms)},
		{50*ms - ns, 1, limited(0, 350*ms+ns, ns)},
		{50 * ms, 1, delayed(450*ms, 250*ms)},
		{500 * ms, 0, allowed(2, 0)},
		{500 * ms, 2, allowed(0, 200*ms)},
		{500 * ms, 1, delayed(300*ms, 100*ms)},
		{500 * ms, 2, limited(0, 300*ms, 50*ms)},
	}}})
}

// testRetryAfterExact: whenever a bucket denies with ReasonLimited, the same
// cost passes at now+RetryAfter and not at now+RetryAfter-1ns, for every
// algorithm, including rates whose interval is rounded up to the nanosecond.
func testRetryAfterExact(t *testing.T, h StoreHarness) {
	type take struct {
		at   time.Duration
		cost int64
	}
	cases := []struct {
		name  string
		limit core.Limit
		setup []take
		probe take
		retry time.Duration
	}{
		// 3/s: one token every 333333334ns (rounded up), so 5 take
		// 1666666670ns to refill; at t0+100ms, 2 tokens are 566666668ns away.
		{"token_bucket_3_per_s", core.TokenBucket(core.PerSecond(3), 5), []take{{0, 5}}, take{100 * ms, 2}, 566666668 * ns},
		{"token_bucket_cost_n", core.TokenBucket(core.Every(7*ms), 10), []take{{0, 8}}, take{ms, 5}, 20 * ms},
		{"shaping", core.Shaping(core.PerSecond(3), 5, 100*ms), []take{{0, 5}}, take{0, 2}, 566666668 * ns},
		{"fixed_window", core.FixedWindow(5, 13*sec), []take{{0, 4}}, take{sec, 2}, 2 * sec},
		// 5*(1-x/3s)+2 <= 5 from x = 1.2s; the probe is at 1s into the window.
		{"sliding_window", core.SlidingWindow(5, 3*sec), []take{{sec, 5}}, take{4 * sec, 2}, 200 * ms},
		// 7*(1-x)+3 <= 7 from x = 3/7s, rounded up to 428571429ns.
		{"sliding_window_sevenths", core.SlidingWindow(7, sec), []take{{300 * ms, 7}}, take{1100 * ms, 3}, 328571429 * ns},
		// 4+2 > 5: only in the next window, where 4*(1-x)+2 <= 5 from x = 25%.
		{"sliding_window_next", core.SlidingWindow(5, sec), []take{{500 * ms, 4}}, take{600 * ms, 2}, 650 * ms},
		// Needs 3 of the 5 to leave: the two of t0 and the two of t0+300ms.
		{"sliding_log", core.SlidingLog(5, 2*sec), []take{{0, 2}, {300 * ms, 2}, {700 * ms, 1}}, take{sec, 3}, 1300 * ms},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, h)
			b := bucket(t, "r", f.key("alice"), tc.limit)
			for _, s := range tc.setup {
				if st := f.takeOne(s.at, s.cost, b); !st.Allowed {
					t.Fatalf("setup %s = denied, want allowed (got %s)", call(s.at, s.cost), describe(st))
				}
			}
			p := tc.probe
			st := f.takeOne(p.at, p.cost, b)
			if st.Allowed || st.Reason != core.ReasonLimited {
				t.Fatalf("%s = %s, want denied with reason limited", call(p.at, p.cost), describe(st))
			}
			if st.RetryAfter != tc.retry {
				t.Errorf("%s: RetryAfter = %v, want %v", call(p.at, p.cost), st.RetryAfter, tc.retry)
			}
			before := p.at + st.RetryAfter - ns
			if got := f.takeOne(before, p.cost, b); got.Allowed {
				t.Errorf("%s = allowed, want denied: RetryAfter %v is 1ns too long", call(before, p.cost), st.RetryAfter)
			} else if got.RetryAfter != ns {
				t.Errorf("%s: RetryAfter = %v, want 1ns", call(before, p.cost), got.RetryAfter)
			}
			at := p.at + st.RetryAfter
			if got := f.takeOne(at, p.cost, b); !got.Allowed {
				t.Errorf("%s = denied, want allowed: RetryAfter %v is too short (got %s)", call(at, p.cost), st.RetryAfter, describe(got))
			}
		})
	}
}

// testExpiry: a bucket left alone is new again after ResetAfter, and a store
// that counts keys holds none then.
func testExpiry(t *testing.T, h StoreHarness) {
	const q = 250 * ms
	type take struct {
		at   time.Duration
		cost int64
	}
	cases := []struct {
		limit core.Limit
		takes []take
		reset time.Duration // ResetAfter of the last take
	}{
		{core.TokenBucket(core.PerSecond(2), 4), []take{{0, 4}}, 2 * sec},
		// A delayed fifth request holds the bucket 500ms longer.
		{core.Shaping(core.PerSecond(2), 4, sec), []take{{0, 4}, {0, 1}}, 2500 * ms},
		{core.FixedWindow(4, sec), []take{{q, 4}}, 750 * ms},
		{core.SlidingWindow(4, sec), []take{{q, 4}}, 1750 * ms},
		{core.SlidingLog(4, sec), []take{{0, 2}, {q, 2}}, sec},
	}
	for _, tc := range cases {
		t.Run(algName(tc.limit), func(t *testing.T) {
			f := newFixture(t, h)
			b := bucket(t, "r", f.key("alice"), tc.limit)
			var st core.BucketState
			var last time.Duration
			for _, tk := range tc.takes {
				if st = f.takeOne(tk.at, tk.cost, b); !st.Allowed {
					t.Fatalf("setup %s = denied, want allowed (got %s)", call(tk.at, tk.cost), describe(st))
				}
				last = tk.at
			}
			if st.ResetAfter != tc.reset {
				t.Fatalf("%s: ResetAfter = %v, want %v", call(last, tc.takes[len(tc.takes)-1].cost), st.ResetAfter, tc.reset)
			}
			full := last + st.ResetAfter
			f.expectKeys(full-ns, 1)
			if got := f.takeOne(full-ns, 0, b); got.Remaining >= 4 || got.ResetAfter != ns {
				t.Errorf("%s = %s, want not yet full, ResetAfter 1ns", call(full-ns, 0), describe(got))
			}
			f.expectKeys(full, 0)
			check(t, call(full, 0), f.takeOne(full, 0, b), allowed(4, 0))
			if got := f.takeOne(full, 4, b); !got.Allowed || got.Remaining != 0 {
				t.Errorf("%s = %s, want allowed with Remaining 0", call(full, 4), describe(got))
			}
		})
	}
}

// testKeyIsolation: buckets differing in key or rule share nothing, however
// alike their names: case, spaces, separators, Cluster hash tags, long keys
// that differ only in their last byte, and rule/key splits that a naive
// "rule.key" join would merge.
func testKeyIsolation(t *testing.T, h StoreHarness) {
	f := newFixture(t, h)
	l := validated(t, core.TokenBucket(core.PerHour(1), 20))[0]
	long := f.longKey()
	bs := []core.Bucket{
		{Rule: "r", Key: "alice"},
		{Rule: "r", Key: "bob"},
		{Rule: "s", Key: "alice"},
		{Rule: "r", Key: "Alice"},
		{Rule: "r", Key: "alice "},
		{Rule: "r", Key: "{alice}"},
		{Rule: "r", Key: "al{ice}"},
		{Rule: "r", Key: "alicé"},
		{Rule: "r", Key: "a:b"},
		{Rule: "r.a", Key: "b"},
		{Rule: "r", Key: "a.b"},
	}
	for i := range bs {
		bs[i].Key = f.key(bs[i].Key)
	}
	bs = append(bs,
		core.Bucket{Rule: "r", Key: long},
		core.Bucket{Rule: "r", Key: long[:len(long)-1] + "j"},
		core.Bucket{Rule: "r", Key: long[:len(long)-1]},
	)
	for i := range bs {
		bs[i].Limit = l
	}
	// Bucket i takes i+1, so any two that shared state would show it.
	for i, b := range bs {
		if st := f.takeOne(0, int64(i+1), b); !st.Allowed || st.Remaining != int64(20-i-1) {
			t.Errorf("%s bucket %s/%.20q = %s, want allowed with Remaining %d", call(0, int64(i+1)), b.Rule, b.Key, describe(st), 20-i-1)
		}
	}
	for i, b := range bs {
		if st := f.takeOne(0, 0, b); st.Remaining != int64(20-i-1) {
			t.Errorf("%s bucket %s/%.20q: Remaining = %d, want %d", call(0, 0), b.Rule, b.Key, st.Remaining, 20-i-1)
		}
	}
}

// outcomes counts what many goroutines got from concurrent Takes.
type outcomes struct {
	mu      sync.Mutex
	allowed int
	delays  []time.Duration
}

// Concurrency tests: 64 goroutines, 8 takes each, 512 in all.
const (
	goroutines = 64
	perG       = 8
)

// hammer runs goroutines x perG Takes of cost 1 on the buckets that
// buckets(g) returns for goroutine g, with the clock frozen at t0, all
// released at once. It fails t on any error.
func (f *fixture) hammer(buckets func(g int) []core.Bucket) *outcomes {
	f.t.Helper()
	f.clock.Set(t0)
	var (
		out   outcomes
		wg    sync.WaitGroup
		start = make(chan struct{})
		fails atomic.Int32
	)
	for g := range goroutines {
		bs := buckets(g)
		wg.Go(func() {
			<-start
			tk := &core.Take{Cost: 1, Buckets: bs, States: make([]core.BucketState, len(bs))}
			for range perG {
				if err := f.store.Take(context.Background(), tk); err != nil {
					if fails.Add(1) == 1 {
						f.t.Errorf("goroutine %d: %s: %v", g, call(0, 1), err)
					}
					return
				}
				ok := true
				var delay time.Duration
				for _, st := range tk.States {
					ok = ok && st.Allowed
					delay = max(delay, st.Delay)
				}
				if ok {
					out.mu.Lock()
					out.allowed++
					out.delays = append(out.delays, delay)
					out.mu.Unlock()
				}
			}
		})
	}
	close(start)
	wg.Wait()
	return &out
}

// testConcurrency: many goroutines taking from one bucket at a frozen
// instant admit exactly what the math allows: the burst, plus for shaping
// one queued request per interval within MaxWait, each in its own slot.
func testConcurrency(t *testing.T, h StoreHarness) {
	cases := []struct {
		limit core.Limit
		admit int
	}{
		{core.TokenBucket(core.PerHour(1), 100), 100},
		// 50 at once and 10 queued, one per second, delays 1s..10s.
		{core.Shaping(core.Every(sec), 50, 10*sec), 60},
		{core.FixedWindow(100, time.Hour), 100},
		{core.SlidingWindow(100, time.Hour), 100},
		{core.SlidingLog(100, time.Hour), 100},
	}
	for _, tc := range cases {
		t.Run(algName(tc.limit), func(t *testing.T) {
			f := newFixture(t, h)
			b := bucket(t, "r", f.key("hot"), tc.limit)
			out := f.hammer(func(int) []core.Bucket { return []core.Bucket{b} })
			if out.allowed != tc.admit {
				t.Errorf("%d concurrent %s: %d allowed, want exactly %d", goroutines*perG, call(0, 1), out.allowed, tc.admit)
			}
			if tc.limit.Algorithm() == core.AlgShaping {
				slices.Sort(out.delays)
				want := make([]time.Duration, tc.admit)
				for i := 50; i < tc.admit; i++ {
					want[i] = time.Duration(i-49) * sec
				}
				if !slices.Equal(out.delays, want) {
					t.Errorf("delays of the admitted requests = %v, want 50 without delay then one in each slot of 1s..10s", out.delays)
				}
			}
			if st := f.takeOne(0, 0, b); st.Remaining != 0 {
				t.Errorf("%s after the rush: Remaining = %d, want 0", call(0, 0), st.Remaining)
			}
		})
	}
}

// testConcurrencyMultiTier: concurrent 3-bucket takes, each goroutine
// listing the buckets in a different order, admit exactly the smallest
// tier's limit and take exactly that from the other tiers.
func testConcurrencyMultiTier(t *testing.T, h StoreHarness) {
	f := newFixture(t, h)
	ls := validated(t,
		core.TokenBucket(core.PerHour(1), 100),
		core.FixedWindow(50, time.Hour),
		core.SlidingLog(80, time.Hour),
	)
	bs := []core.Bucket{
		{Rule: "per-user", Key: f.key("hot"), Limit: ls[0]},
		{Rule: "per-endpoint", Key: f.key("hot"), Limit: ls[1]},
		{Rule: "global", Key: f.key("hot"), Limit: ls[2]},
	}
	orders := [][]int{{0, 1, 2}, {2, 1, 0}, {1, 2, 0}, {0, 2, 1}, {2, 0, 1}, {1, 0, 2}}
	out := f.hammer(func(g int) []core.Bucket {
		own := make([]core.Bucket, len(bs))
		for i, j := range orders[g%len(orders)] {
			own[i] = bs[j]
		}
		return own
	})
	if out.allowed != 50 {
		t.Errorf("%d concurrent 3-bucket %s: %d allowed, want exactly 50", goroutines*perG, call(0, 1), out.allowed)
	}
	f.readEach(0, bs, []int64{50, 0, 30})
}

// testBadInput: keys, costs and times that no configuration makes valid are
// errors matching core's sentinels, never panics nor denials, and store
// nothing. Values just inside the bounds are accepted.
func testBadInput(t *testing.T, h StoreHarness) {
	limit := func(t testing.TB) *core.Limit { return validated(t, core.TokenBucket(core.PerSecond(1), 4))[0] }
	unvalidated := core.TokenBucket(core.PerSecond(1), 4)
	const maxLenKey = "<a key of exactly MaxKeyLen bytes>"
	type input struct {
		now   time.Time
		cost  int64
		keys  []string // one bucket of rule "r" per key
		rules []string // if set, the rule of each bucket
		nilL  bool     // a bucket without a limit
		rawL  bool     // a limit that did not go through NewPolicy
		short bool     // States shorter than Buckets
	}
	cases := []struct {
		name string
		in   input
		want error // nil: must succeed
	}{
		{"empty_key", input{cost: 1, keys: []string{""}}, core.ErrInvalidKey},
		{"key_too_long", input{cost: 1, keys: []string{strings.Repeat("k", core.MaxKeyLen+1)}}, core.ErrInvalidKey},
		{"key_newline", input{cost: 1, keys: []string{"alice\nbob"}}, core.ErrInvalidKey},
		{"key_nul", input{cost: 1, keys: []string{"alice\x00"}}, core.ErrInvalidKey},
		{"key_del", input{cost: 1, keys: []string{"\x7falice"}}, core.ErrInvalidKey},
		{"second_key_empty", input{cost: 1, keys: []string{"alice", ""}}, core.ErrInvalidKey},
		{"bucket_twice", input{cost: 1, keys: []string{"alice", "alice"}}, core.ErrInvalidKey},
		{"rule_name_empty", input{cost: 1, keys: []string{"alice"}, rules: []string{""}}, core.ErrInvalidKey},
		{"rule_name_space", input{cost: 1, keys: []string{"alice"}, rules: []string{"per user"}}, core.ErrInvalidKey},
		{"negative_cost", input{cost: -1, keys: []string{"alice"}}, core.ErrInvalidCost},
		{"cost_above_max", input{cost: core.MaxCost + 1, keys: []string{"alice"}}, core.ErrInvalidCost},
		{"now_before_1970", input{now: time.Unix(-1, 0), cost: 1, keys: []string{"alice"}}, core.ErrInvalidTime},
		{"now_after_max_time", input{now: core.MaxTime().Add(ns), cost: 1, keys: []string{"alice"}}, core.ErrInvalidTime},
		{"nil_limit", input{cost: 1, keys: []string{"alice"}, nilL: true}, core.ErrInvalidRule},
		{"unvalidated_limit", input{cost: 1, keys: []string{"alice"}, rawL: true}, core.ErrInvalidRule},
		{"states_too_short", input{cost: 1, keys: []string{"alice", "bob"}, short: true}, core.ErrInvalidOption},
		// Just inside the bounds.
		{"key_max_len", input{cost: 1, keys: []string{maxLenKey}}, nil},
		{"cost_max", input{cost: core.MaxCost, keys: []string{"alice"}}, nil},
		{"now_epoch", input{now: time.Unix(0, 0), cost: 1, keys: []string{"alice"}}, nil},
		{"now_max_time", input{now: core.MaxTime(), cost: 1, keys: []string{"alice"}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, h)
			l := limit(t)
			tk := &core.Take{Now: tc.in.now, Cost: tc.in.cost}
			for i, k := range tc.in.keys {
				switch {
				case k == maxLenKey:
					k = f.longKey()
				case k != "" && len(k) < core.MaxKeyLen:
					k = f.key(k) // keeps what makes it invalid
				}
				b := core.Bucket{Rule: "r", Key: k, Limit: l}
				if tc.in.rules != nil {
					b.Rule = tc.in.rules[i]
				}
				switch {
				case tc.in.nilL:
					b.Limit = nil
				case tc.in.rawL:
					b.Limit = &unvalidated
				}
				tk.Buckets = append(tk.Buckets, b)
			}
			tk.States = make([]core.BucketState, len(tk.Buckets))
			if tc.in.short {
				tk.States = tk.States[:len(tk.States)-1]
			}
			err := safeTake(f.store, tk)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("Take = %v, want no error", err)
			case tc.want == nil:
				why := core.ReasonNone
				if tc.in.cost > 4 {
					why = core.ReasonCostExceedsLimit
				}
				if st := tk.States[0]; st.Reason != why || st.Allowed != (why == core.ReasonNone) {
					t.Errorf("Take = %s, want reason %v", describe(st), why)
				}
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("Take = %v, want an error matching %v", err, tc.want)
			case tc.want != nil:
				if !strings.HasPrefix(err.Error(), "ratelimit: ") {
					t.Errorf("error %q does not start with the package name", err)
				}
				f.expectKeys(0, 0)
				// Nothing was taken from the valid bucket of the take.
				if st := f.takeOne(0, 0, core.Bucket{Rule: "r", Key: f.key("alice"), Limit: l}); st.Remaining != 4 {
					t.Errorf("after the rejected Take, %s: Remaining = %d, want 4", call(0, 0), st.Remaining)
				}
			}
		})
	}
}

// safeTake calls Take and turns a panic into an error naming it.
func safeTake(s core.Store, tk *core.Take) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("conformance: Take panicked: %v", r)
		}
	}()
	return s.Take(context.Background(), tk)
}

// testExplicitNow: a Take's explicit Now decides, whatever the store's
// clock says; a Take without one reads the clock.
func testExplicitNow(t *testing.T, h StoreHarness) {
	for _, l := range []core.Limit{core.TokenBucket(core.PerSecond(2), 4), core.FixedWindow(4, sec)} {
		t.Run(algName(l), func(t *testing.T) {
			f := newFixture(t, h)
			b := bucket(t, "r", f.key("alice"), l)
			f.clock.Set(t0.Add(time.Hour))
			at := func(d time.Duration, cost int64) core.BucketState {
				tk := &core.Take{Now: t0.Add(d), Cost: cost, Buckets: []core.Bucket{b}, States: make([]core.BucketState, 1)}
				if err := f.store.Take(context.Background(), tk); err != nil {
					t.Fatalf("Take(Now: %s, cost %d): %v", instant(d), cost, err)
				}
				return tk.States[0]
			}
			// With the clock at t0+1h, the explicit t0 empties the bucket,
			// and t0+400ms (0.8 tokens, or the same window) still finds it
			// empty.
			if st := at(0, 4); !st.Allowed || st.Remaining != 0 {
				t.Errorf("Take(Now: t0, cost 4) = %s, want allowed with Remaining 0", describe(st))
			}
			if st := at(400*ms, 1); st.Allowed {
				t.Errorf("Take(Now: t0+400ms, cost 1) = allowed, want denied: the store read its clock (t0+1h)")
			}
			// Without Now, the clock's t0+1h: full again.
			tk := &core.Take{Cost: 0, Buckets: []core.Bucket{b}, States: make([]core.BucketState, 1)}
			if err := f.store.Take(context.Background(), tk); err != nil {
				t.Fatal(err)
			}
			if tk.States[0].Remaining != 4 {
				t.Errorf("Take(clock t0+1h, cost 0): Remaining = %d, want 4: the clock was not read", tk.States[0].Remaining)
			}
		})
	}
}

// changeStep is one Take of a timeline whose bucket's limit changes: the
// same rule and key under the limit named.
type changeStep struct {
	at    time.Duration
	limit string
	cost  int64
	want  core.BucketState
}

// runChanges runs one timeline per name, each on its own store, with one
// bucket (rule "r", key "alice") taken under the limits the steps name.
func runChanges(t *testing.T, h StoreHarness, name string, limits map[string]core.Limit, steps []changeStep) {
	t.Run(name, func(t *testing.T) {
		f := newFixture(t, h)
		key := f.key("alice")
		bs := map[string]core.Bucket{}
		for n, l := range limits {
			bs[n] = bucket(t, "r", key, l)
		}
		for _, s := range steps {
			check(t, fmt.Sprintf("%s under %s (%v)", call(s.at, s.cost), s.limit, bs[s.limit].Limit), f.takeOne(s.at, s.cost, bs[s.limit]), s.want)
		}
	})
}

// testLimitChange: a bucket whose limit changes (a reloaded rule of the
// same name, a per-tenant limit) keeps its state, as core.Limit documents.
// A token bucket keeps the share of its burst it had: under a limit of
// another fill time its debt (the time until full) is scaled by the new
// fill time over the old, ceil(debt*tau'/tau), clamped to tau', and it
// refills at its writer's pace until a take under the new limit is
// admitted, the time until full rounded up to the microsecond going into
// the scaling. A fixed window keeps
// its count under a limit of the same window, and starts afresh under
// another window.
func testLimitChange(t *testing.T, h StoreHarness) {
	us := time.Microsecond
	runChanges(t, h, "token_bucket", map[string]core.Limit{
		"A": core.TokenBucket(core.PerSecond(1), 4), // fill time 4s
		"B": core.TokenBucket(core.PerSecond(2), 2), // 1s
		"C": core.TokenBucket(core.PerSecond(1), 8), // 8s
		"D": core.TokenBucket(core.PerSecond(2), 8), // 4s, as A's
	}, []changeStep{
		{0, "A", 3, allowed(1, 3*sec)}, // a debt of 3s on 4s: 75% spent
		// Under B: 75% of 1s, 750ms; the 250ms left are no whole token.
		{0, "B", 0, allowed(0, 3*sec)},
		// A token of B (500ms, 25%) fits at 50% spent: 1s later at A's
		// pace, which is B's pace until B writes.
		{0, "B", 1, limited(0, 3*sec, sec)},
		// 1ns before: 2s and 1ns to full, 2.000001s once rounded up to the
		// microsecond, whose share of 1s, rounded up, leaves no token.
		{sec - ns, "B", 1, limited(0, 2*sec+ns, ns)},
		{sec - us, "B", 1, limited(0, 2*sec+us, us)},
		{sec, "B", 1, allowed(0, sec)}, // B writes: full at t0+2s
		// Back to A: B's bucket is empty, so is A's (a debt of 4s), and
		// it refills at B's pace: full at t0+2s.
		{sec, "A", 0, allowed(0, sec)},
		// A token of A (25%) fits at 75% spent: 250ms at B's pace.
		{sec, "A", 1, limited(0, sec, 250*ms)},
		{1250 * ms, "A", 1, allowed(0, 4*sec)}, // A writes: full at t0+5.25s
		// C has twice A's fill time: empty is empty.
		{1250 * ms, "C", 0, allowed(0, 4*sec)},
		// D has A's fill time: the debt is kept as it is, the same share.
		{3250 * ms, "D", 0, allowed(4, 2*sec)},
		{3250 * ms, "D", 4, allowed(0, 4*sec)},
		{5250 * ms, "A", 0, allowed(2, 2*sec)},
		{7250 * ms, "C", 0, allowed(8, 0)},
	})
	runChanges(t, h, "shaping", map[string]core.Limit{
		"S1": core.Shaping(core.PerSecond(1), 2, 3*sec), // fill time 2s
		"S2": core.Shaping(core.PerSecond(1), 4, sec),   // 4s
	}, []changeStep{
		{0, "S1", 2, allowed(0, 2*sec)},
		{0, "S1", 2, delayed(4*sec, 2*sec)},
		{0, "S1", 1, delayed(5*sec, 3*sec)},
		// A debt of 5s on 2s, 250%: clamped to S2's 4s, an empty bucket.
		// The queue beyond the burst is not carried over.
		{0, "S2", 0, allowed(0, 5*sec)},
		{0, "S2", 1, delayed(5*sec, sec)},
		{0, "S2", 1, limited(0, 5*sec, sec)},
		// Back to S1: 5s of 4s spent, 125%, clamped to S1's 2s: empty, and
		// the queue is not carried over this way either.
		{0, "S1", 1, delayed(3*sec, sec)},
		{0, "S1", 1, delayed(4*sec, 2*sec)},
		{0, "S1", 1, delayed(5*sec, 3*sec)},
		{0, "S1", 1, limited(0, 5*sec, sec)},
	})
	const q = 250 * ms
	runChanges(t, h, "fixed_window", map[string]core.Limit{
		"L3": core.FixedWindow(3, sec),
		"L5": core.FixedWindow(5, sec),
		"W2": core.FixedWindow(5, 2*sec),
	}, []changeStep{
		{q, "L3", 3, allowed(0, 750*ms)},
		{q, "L5", 0, allowed(2, 750*ms)},
		{q, "L5", 2, allowed(0, 750*ms)},
		// 5 counted under a limit of 3: none left until the window ends.
		{q, "L3", 0, allowed(0, 750*ms)},
		{q, "L3", 1, limited(0, 750*ms, 750*ms)},
		// Another window length: afresh.
		{q, "W2", 0, allowed(5, 0)},
		{q, "W2", 2, allowed(3, 1750*ms)},
		{q, "L3", 0, allowed(3, 0)},
		{sec, "L5", 1, allowed(4, sec)},
	})
}

// testLongLimits: limits longer than 100 days, up to 400, decide in whole
// microseconds, at the time truncated to the microsecond, with their
// interval between tokens rounded up to one; times far apart are exact.
func testLongLimits(t *testing.T, h StoreHarness) {
	day, us := 24*time.Hour, time.Microsecond
	runTimelines(t, h, []timeline{
		{name: "yearly_token_bucket", limit: core.TokenBucket(core.PerDay(1), 365), steps: []step{
			{123 * ns, 365, allowed(0, 365*day)},
			{day - ns, 0, allowed(0, 364*day+us)},
			{day - ns, 1, limited(0, 364*day+us, us)},
			{day + 999*ns, 1, allowed(0, 365*day)},
			{day + 999*ns, 1, limited(0, 365*day, day)},
			{200*day + 5*ns, 0, allowed(199, 166*day)},
			{400 * day, 0, allowed(365, 0)},
		}},
		// (300 days + 1ns)/3 per token: 100 days and 1ns, rounded up to
		// 100 days and 1µs.
		{name: "rounded_interval", limit: core.TokenBucket(core.Rate{N: 3, Per: 300*day + 1}, 3), steps: []step{
			{0, 3, allowed(0, 300*day+3*us)},
			{100 * day, 1, limited(0, 200*day+3*us, us)},
			{100*day + us, 1, allowed(0, 300*day+3*us)},
		}},
		{name: "shaping_200_days", limit: core.Shaping(core.PerDay(1), 100, 150*day+1999*ns), steps: []step{
			{500 * ns, 100, allowed(0, 100*day)},
			{700 * ns, 100, delayed(200*day, 100*day)},
			{800 * ns, 50, delayed(250*day, 150*day)},
			{900 * ns, 1, limited(0, 250*day, day-us)},
		}},
		// t0 is 54 days into an epoch-aligned 200-day window: 20454 days
		// after the epoch, 102 windows and 54 days.
		{name: "fixed_window_200_days", limit: core.FixedWindow(3, 200*day), steps: []step{
			{777 * ns, 3, allowed(0, 146*day)},
			{777 * ns, 1, limited(0, 146*day, 146*day)},
			{146*day - ns, 1, limited(0, us, us)},
			{146 * day, 1, allowed(2, 200*day)},
		}},
		{name: "sliding_log_120_days", limit: core.SlidingLog(2, 120*day), steps: []step{
			{ns, 1, allowed(1, 120*day)},
			{10*day + 1500*ns, 1, allowed(0, 120*day)},
			{10*day + 1500*ns, 1, limited(0, 120*day, 110*day-us)},
			{120*day - ns, 1, limited(0, 10*day+2*us, us)},
			{120 * day, 1, allowed(0, 120*day)},
		}},
	})
}
