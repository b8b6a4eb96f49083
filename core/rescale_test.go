package core

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"testing"
	"time"
)

// The tests below change the limit of one bucket mid-timeline, as a policy
// reload keeping a rule's name or a per-tenant limit does: a token bucket
// keeps the share of its burst it had, a window its count (see Limit).

// chT0 is the first instant of the timelines: midnight UTC, 1 January 2026,
// a whole number of days, so windows of seconds start on it.
var chT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// chLimit validates l as NewPolicy does and returns the validated copy.
func chLimit(t *testing.T, l Limit) *Limit {
	t.Helper()
	p, err := NewPolicy(Rule{Name: "r", Scope: ScopeUser, Limit: l})
	if err != nil {
		t.Fatalf("NewPolicy(%v): %v", l, err)
	}
	return &p.rules[0].Limit
}

// chStep is one decision of a timeline: a request of cost under limit l
// at chT0+at, and the answer it must get.
type chStep struct {
	at   time.Duration
	l    string // the name of the limit in the timeline's map
	cost int64
	want BucketState
}

// chRun runs steps on one state with l.Decide and l.Commit, as every store
// does, and checks every answer field by field.
func chRun(t *testing.T, limits map[string]*Limit, steps []chStep) State {
	t.Helper()
	var s State
	for i, st := range steps {
		l := limits[st.l]
		now := chT0.Add(st.at).UnixNano()
		got, next := l.Decide(&s, now, st.cost)
		if got != st.want {
			t.Fatalf("step %d: %s.Decide(t0+%v, %d) = %+v, want %+v", i, st.l, st.at, st.cost, got, st.want)
		}
		if got.Allowed && st.cost > 0 {
			l.Commit(&s, next, st.cost)
		}
	}
	return s
}

func chAllowed(remaining int64, reset time.Duration) BucketState {
	return BucketState{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func chLimited(remaining int64, reset, retry time.Duration) BucketState {
	return BucketState{Reason: ReasonLimited, Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

// TestLimitChangeTokenBucket: the share of the burst carries over, the
// bucket refills at the pace of the limit that wrote it until a take under
// the new one is admitted, and RetryAfter and ResetAfter are exact under
// that.
func TestLimitChangeTokenBucket(t *testing.T) {
	const ms = time.Millisecond
	limits := map[string]*Limit{
		"A": chLimit(t, TokenBucket(PerSecond(1), 4)), // tau 4s
		"B": chLimit(t, TokenBucket(PerSecond(2), 2)), // tau 1s
		"C": chLimit(t, TokenBucket(PerSecond(1), 8)), // tau 8s
		"D": chLimit(t, TokenBucket(PerSecond(2), 8)), // tau 4s, as A's
	}
	chRun(t, limits, []chStep{
		{0, "A", 3, chAllowed(1, 3*time.Second)}, // debt 3s of 4s: 75% used
		// Under B, 75% of 1s: 750ms; 250ms of room is less than a token.
		{0, "B", 0, chAllowed(0, 3*time.Second)},
		// A token (500ms, 25% of B's burst) fits once the debt is down to
		// 50%: 1s later at A's pace, not 250ms at B's.
		{0, "B", 1, chLimited(0, 3*time.Second, time.Second)},
		{time.Second - time.Microsecond, "B", 1, chLimited(0, 2*time.Second+time.Microsecond, time.Microsecond)},
		{time.Second, "B", 1, chAllowed(0, time.Second)}, // now B's: TAT t0+2s, tau 1s
		// Back under A: B's bucket is empty (debt 1s of 1s): 4s of debt.
		{time.Second, "A", 0, chAllowed(0, time.Second)},
		// A token of A (1s of 4s, 25%) fits at 75%: 250ms at B's pace.
		{time.Second, "A", 1, chLimited(0, time.Second, 250*ms)},
		{1250 * ms, "A", 1, chAllowed(0, 4*time.Second)}, // A's again: TAT t0+5.25s
		// C has twice A's fill time: empty is empty.
		{1250 * ms, "C", 0, chAllowed(0, 4*time.Second)},
		// D has A's fill time (twice the rate and the burst): the debt is
		// kept as it is, the same share. Half of it is 2s: 4 tokens of 8.
		{3250 * ms, "D", 0, chAllowed(4, 2*time.Second)},
		{5250 * ms, "C", 0, chAllowed(8, 0)},
	})
}

// TestLimitChangeShaping: a shaping bucket keeps its share too, but its
// queue beyond the burst is not carried over to a limit with another fill
// time: the debt is clamped to the new fill time.
func TestLimitChangeShaping(t *testing.T) {
	limits := map[string]*Limit{
		"S1": chLimit(t, Shaping(PerSecond(1), 2, 3*time.Second)), // tau 2s
		"S2": chLimit(t, Shaping(PerSecond(1), 4, time.Second)),   // tau 4s
	}
	sec := time.Second
	chRun(t, limits, []chStep{
		{0, "S1", 2, chAllowed(0, 2*sec)},
		{0, "S1", 2, BucketState{Allowed: true, ResetAfter: 4 * sec, Delay: 2 * sec}},
		{0, "S1", 1, BucketState{Allowed: true, ResetAfter: 5 * sec, Delay: 3 * sec}},
		// 5s of debt on a 2s burst: 250%, clamped to S2's 4s.
		{0, "S2", 0, chAllowed(0, 5*sec)},
		// Empty, with 1s of MaxWait: one more request waits 1s.
		{0, "S2", 1, BucketState{Allowed: true, ResetAfter: 5 * sec, Delay: sec}},
		// Now S2's: 5s of debt on 4s, 2s away from a token, 1s past MaxWait.
		{0, "S2", 1, chLimited(0, 5*sec, sec)},
	})
}

// TestLimitChangeWindows: a window keeps its count under a new limit of the
// same length, Remaining never negative when the count exceeds it; a window
// of another length starts afresh.
func TestLimitChangeWindows(t *testing.T) {
	const ms, q = time.Millisecond, 250 * time.Millisecond
	t.Run("fixed_window", func(t *testing.T) {
		limits := map[string]*Limit{
			"L3": chLimit(t, FixedWindow(3, time.Second)),
			"L5": chLimit(t, FixedWindow(5, time.Second)),
			"W2": chLimit(t, FixedWindow(5, 2*time.Second)),
		}
		chRun(t, limits, []chStep{
			{q, "L3", 3, chAllowed(0, 750*ms)},
			{q, "L5", 0, chAllowed(2, 750*ms)},
			{q, "L5", 2, chAllowed(0, 750*ms)},
			// 5 counted, 3 allowed: nothing remains, until the window ends.
			{q, "L3", 0, chAllowed(0, 750*ms)},
			{q, "L3", 1, chLimited(0, 750*ms, 750*ms)},
			// Another length: a new count, whose window is 2s long.
			{q, "W2", 0, chAllowed(5, 0)},
			{q, "W2", 1, chAllowed(4, 1750*ms)},
			// Now W2's: L5 sees a window of another length, afresh.
			{q, "L5", 0, chAllowed(5, 0)},
		})
	})
	t.Run("sliding_window", func(t *testing.T) {
		limits := map[string]*Limit{
			"L4": chLimit(t, SlidingWindow(4, time.Second)),
			"L2": chLimit(t, SlidingWindow(2, time.Second)),
			"W3": chLimit(t, SlidingWindow(4, 3*time.Second)),
		}
		chRun(t, limits, []chStep{
			{q, "L4", 3, chAllowed(1, 1750*ms)},
			{q, "L2", 0, chAllowed(0, 1750*ms)},
			// Next window at 50%: 3*50% = 1.5 of 2: 0 whole; a cost of 1 fits
			// once 3*(1-x) <= 1, x = 2/3: 666.666667ms in, rounded up.
			{1500 * ms, "L2", 1, chLimited(0, 500*ms, 166666667)},
			{q, "W3", 0, chAllowed(4, 0)},
		})
	})
	t.Run("sliding_log", func(t *testing.T) {
		limits := map[string]*Limit{
			"L3": chLimit(t, SlidingLog(3, time.Second)),
			"L1": chLimit(t, SlidingLog(1, time.Second)),
			"W2": chLimit(t, SlidingLog(3, 2*time.Second)),
		}
		chRun(t, limits, []chStep{
			{0, "L3", 2, chAllowed(1, time.Second)},
			{q, "L3", 1, chAllowed(0, time.Second)},
			{q, "L1", 0, chAllowed(0, time.Second)},
			// 3 counted, 1 allowed: a cost of 1 fits when all 3 have left.
			{q, "L1", 1, chLimited(0, time.Second, time.Second)},
			{q, "W2", 0, chAllowed(3, 0)},
		})
	})
}

// TestLimitChangeUnrecorded: a state that does not record its span (as
// written before spans were) takes the deciding limit's: a token bucket
// keeps its debt, a window of at most 100 days its count; a longer window
// starts afresh, no such state having been written under one.
func TestLimitChangeUnrecorded(t *testing.T) {
	now := chT0.UnixNano()
	tb := chLimit(t, TokenBucket(PerSecond(1), 8))
	if st, _ := tb.Decide(&State{A: now + 3e9}, now, 0); st != chAllowed(5, 3*time.Second) {
		t.Errorf("token bucket: Decide(TAT t0+3s, no span) = %+v, want 5 remaining", st)
	}
	fw := chLimit(t, FixedWindow(4, time.Second))
	if st, _ := fw.Decide(&State{A: now, B: 3}, now, 0); st.Remaining != 1 {
		t.Errorf("fixed window: Decide(3 counted, no span) = %+v, want 1 remaining", st)
	}
	long := chLimit(t, FixedWindow(4, 200*24*time.Hour))
	start := now - now%int64(200*24*time.Hour)
	if st, _ := long.Decide(&State{A: start, B: 3}, now, 0); st.Remaining != 4 {
		t.Errorf("200-day fixed window: Decide(3 counted, no span) = %+v, want 4 remaining (afresh)", st)
	}
	if st, _ := long.Decide(&State{A: start, B: 3, Span: int64(200 * 24 * time.Hour)}, now, 0); st.Remaining != 1 {
		t.Errorf("200-day fixed window: Decide(3 counted under it) = %+v, want 1 remaining", st)
	}
}

// TestRescaleDebt: the rescaled debt is the ceiling of the exact share to
// within a few nanoseconds, rounded up to the microsecond, at most the new
// fill time, monotone, and the float64 operations it is defined by.
func TestRescaleDebt(t *testing.T) {
	day := int64(24 * time.Hour)
	cases := []struct{ debt, from, to int64 }{
		{3e9, 4e9, 1e9},
		{1, 3, 7},
		{1000, 3, 7},
		{399*day + 1000, 400 * day, 1e9},
		{1e9, 400 * day, 400 * day / 3},
		{123456789000, 987654321, 400*day - 1000},
		{400 * day, 1, 400 * day}, // clamped
		{1<<53 + 1000, 7, 3},
	}
	for _, tc := range cases {
		got := rescaleDebt(tc.debt, tc.from, tc.to)
		// The definition, restated: float64 product, quotient, ceiling.
		f := math.Ceil(float64(tc.debt) * float64(tc.to) / float64(tc.from))
		want := tc.to
		if f < float64(tc.to) {
			want = min(int64(math.Ceil(f/1000))*1000, tc.to)
		}
		if got != want {
			t.Errorf("rescaleDebt(%d, %d, %d) = %d, want %d", tc.debt, tc.from, tc.to, got, want)
		}
		// The exact ceiling, rounded up to the microsecond and clamped.
		exact := new(big.Int).Mul(big.NewInt(tc.debt), big.NewInt(tc.to))
		exact.Add(exact, big.NewInt(tc.from-1)).Quo(exact, big.NewInt(tc.from))
		ex := tc.to
		if exact.IsInt64() && exact.Int64() < tc.to {
			ex = min((exact.Int64()+999)/1000*1000, tc.to)
		}
		if d := got - ex; d < -1000 || d > 1000 {
			t.Errorf("rescaleDebt(%d, %d, %d) = %d, exact share %d", tc.debt, tc.from, tc.to, got, ex)
		}
		if got < 0 || got > tc.to || (got%1000 != 0 && got != tc.to) {
			t.Errorf("rescaleDebt(%d, %d, %d) = %d: not a whole microsecond in [0, %d]", tc.debt, tc.from, tc.to, got, tc.to)
		}
		if lower := rescaleDebt(tc.debt-1, tc.from, tc.to); tc.debt > 1 && lower > got {
			t.Errorf("rescaleDebt is not monotone at %d: %d then %d", tc.debt, lower, got)
		}
	}
}

// TestMemoryStoreLimitChange: the memory store keeps a bucket's state and
// the fill time it was written under across limits, and reclaims it no
// earlier than it is full under any of them.
func TestMemoryStoreLimitChange(t *testing.T) {
	clock := NewManualClock(chT0)
	s, err := NewMemoryStore(WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	a := chLimit(t, TokenBucket(PerSecond(1), 4))
	b := chLimit(t, TokenBucket(PerSecond(2), 2))
	long := chLimit(t, TokenBucket(PerDay(1), 200)) // microsecond resolution
	take := func(l *Limit, at time.Duration, cost int64) BucketState {
		t.Helper()
		tk := &Take{Now: chT0.Add(at), Cost: cost, Buckets: []Bucket{{Rule: "r", Key: "k", Limit: l}}, States: make([]BucketState, 1)}
		if err := s.Take(context.Background(), tk); err != nil {
			t.Fatal(err)
		}
		return tk.States[0]
	}
	keys := func(at time.Duration) int {
		clock.Set(chT0.Add(at))
		s.Reclaim()
		return s.Stats().Keys
	}
	if st := take(a, 0, 3); st != chAllowed(1, 3*time.Second) {
		t.Fatalf("A: %+v", st)
	}
	if st := take(b, 0, 1); st != chLimited(0, 3*time.Second, time.Second) {
		t.Fatalf("B right after: %+v, want denied for 1s at A's pace", st)
	}
	if st := take(b, time.Second, 1); st != chAllowed(0, time.Second) {
		t.Fatalf("B 1s later: %+v", st)
	}
	if n := keys(2*time.Second - 1); n != 1 {
		t.Fatalf("Keys 1ns before the bucket is full = %d, want 1", n)
	}
	if n := keys(2 * time.Second); n != 0 {
		t.Fatalf("Keys when full = %d, want 0", n)
	}
	// Written under a nanosecond limit at an instant that is no whole
	// microsecond, a bucket is full for a microsecond-resolution limit only
	// at its TAT rounded up: it is kept until then.
	if st := take(a, 4*time.Second+1, 1); !st.Allowed {
		t.Fatalf("A: %+v", st)
	}
	tat := 5*time.Second + 1 // TAT, 1ns past a microsecond
	// A microsecond of 4s is 4.32s of 200 days: 199 whole days remain.
	if st := take(long, tat, 0); st.Remaining != 199 || st.ResetAfter != time.Microsecond {
		t.Fatalf("under the 200-day limit at the TAT: %+v, want a microsecond of debt, 199 remaining", st)
	}
	if n := keys(tat + time.Microsecond - 2); n != 1 {
		t.Fatalf("Keys before the TAT rounded up to the microsecond = %d, want 1", n)
	}
	if n := keys(tat + time.Microsecond - 1); n != 0 {
		t.Fatalf("Keys at the TAT rounded up to the microsecond = %d, want 0", n)
	}
}

// FuzzLimitChange runs fuzzed sequences on one state under up to four
// limits of one algorithm taking turns, at both resolutions, and checks
// every decision's invariants (mfCheckDecision): among them RetryAfter
// exact and time moving backwards never creating tokens.
func FuzzLimitChange(f *testing.F) {
	day := int64(24 * time.Hour)
	f.Add(uint8(0), int64(1e9), int64(4), int64(5e8), int64(2), int64(1767225600e9), []byte{0, 1, 0, 1, 2, 3}, mfSeedOps)
	f.Add(uint8(1), int64(day), int64(10), int64(3*day+7), int64(150), int64(1767225600e9+999), []byte{0, 1, 1, 0, 2, 3, 0}, mfSeedOps)
	f.Add(uint8(2), int64(1000), int64(3), int64(200*day), int64(7), int64(1767225600e9+1), []byte{0, 1, 2, 3, 0, 1}, mfSeedOps)
	f.Add(uint8(3), int64(60000), int64(3), int64(1000), int64(7), int64(0), []byte{1, 0, 1, 0}, mfSeedOps)
	f.Add(uint8(4), int64(1000), int64(3), int64(300*day), int64(1), int64(1767225600e9), []byte{3, 2, 1, 0}, mfSeedOps)
	// Found by fuzzing: an admission under a changed limit at an instant
	// that is no whole microsecond; a previous count above the new limit.
	f.Add(uint8(1), int64(1065), int64(61), int64(25919999999999955), int64(1), int64(1767225600000000107), []byte("2"), []byte("11000000000100000000"))
	f.Add(uint8(0x99), int64(86400000000000), int64(-141), int64(259200000000001), int64(235), int64(1767225600000000999), []byte("071"), []byte("00000000007A2117C9F21100718101"))
	f.Fuzz(func(t *testing.T, alg uint8, x1, n1, x2, n2, start int64, pick, ops []byte) {
		// Four limits: two from the numbers, and each with the other's
		// second number, so that fill times and windows both match and
		// differ.
		var ls []*Limit
		for _, xn := range [][2]int64{{x1, n1}, {x2, n2}, {x1, n2}, {x2, n1}} {
			var lim Limit
			switch alg % 5 {
			case 0, 1:
				// One token every x ns (1ns to 400 days), burst n.
				iv := 1 + mfMod(xn[0], int64(MaxSpan))
				burst := 1 + mfMod(xn[1], min(1e12, int64(MaxSpan)/iv))
				lim = TokenBucket(Every(time.Duration(iv)), burst)
				if alg%5 == 1 {
					if room := int64(MaxSpan) - iv*burst; room > 0 {
						lim = Shaping(Every(time.Duration(iv)), burst, time.Duration(1+mfMod(xn[1]*7919, room)))
					}
				}
			default:
				w := time.Duration(1+mfMod(xn[0], int64(MaxSpan/time.Millisecond))) * time.Millisecond
				n := 1 + mfMod(xn[1], 1000)
				lim = [...]func(int64, time.Duration) Limit{FixedWindow, SlidingWindow, SlidingLog}[alg%5-2](n, w)
			}
			p, err := NewPolicy(Rule{Name: "fuzz", Scope: ScopeUser, Limit: lim})
			if err != nil {
				continue // rounded to the microsecond, it may not fit
			}
			l := &p.rules[0].Limit
			if l.alg == lim.alg {
				ls = append(ls, l)
			}
		}
		if len(ls) == 0 {
			return
		}
		mfRunLimits(t, ls, pick, start, ops)
	})
}

// ExampleLimit_limitChange: a per-user limit raised from 10 to 100 a minute
// keeps the share of its burst a user has spent.
func ExampleLimit_limitChange() {
	p1, _ := NewPolicy(Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerMinute(10), 10)})
	p2, _ := NewPolicy(Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerMinute(100), 100)})
	l, _ := NewLimiter(p1)
	ctx := context.Background()
	d, _ := l.AllowAt(ctx, chT0, Request{User: "alice"}, 5)
	fmt.Println("under 10/min:", d.Remaining, "of", d.Limit)
	l.SetPolicy(p2)
	d, _ = l.AllowAt(ctx, chT0, Request{User: "alice"}, 0)
	fmt.Println("under 100/min:", d.Remaining, "of", d.Limit)
	// Output:
	// under 10/min: 5 of 10
	// under 100/min: 50 of 100
}
