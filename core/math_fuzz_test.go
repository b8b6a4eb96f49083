package core

import (
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"
)

// The fuzz targets below drive the bucket math with numbers from across the
// valid range (rates from 1e-6/s to 1e9/s, bursts up to 1e12 and window limits
// up to MaxCost, spans up to MaxSpan at both resolutions, times from 1970 to
// MaxTime) and sequences of requests whose time steps go forwards, backwards
// and exactly to the instants a RetryAfter names. Each decision must keep the
// invariants of DESIGN.md section 3, not merely not panic: see
// mfCheckDecision. FuzzLimitChange (rescale_test.go) does the same for a
// bucket whose limit changes.
//
// Run one for a while with, for example:
//
//	go test -run '^$' -fuzz '^FuzzTokenBucket$' -fuzztime 20s ./core

// mfMaxTime is MaxTime in Unix ns.
var mfMaxTime = MaxTime().UnixNano()

// mfConfigErrors are the configuration errors NewPolicy may wrap.
var mfConfigErrors = []error{ErrInvalidRule, ErrInvalidRate, ErrInvalidBurst, ErrInvalidWindow, ErrUnknownScope, ErrDuplicateRule}

// mfMod returns x mod m as a non-negative int64, for m > 0; x may be any
// int64, including math.MinInt64.
func mfMod(x, m int64) int64 { return int64(uint64(x) % uint64(m)) }

// mfAdd returns now+d clamped to [0, mfMaxTime], without overflow.
func mfAdd(now, d int64) int64 {
	switch {
	case d > 0 && now > mfMaxTime-d:
		return mfMaxTime
	case d < 0 && now+d < 0: // now >= 0, so now+d does not overflow
		return 0
	}
	return now + d
}

// mfOp is one request of a fuzzed sequence: 10 bytes of ops, a step kind, a
// cost selector and a value.
type mfOp struct {
	kind, cost byte
	v          int64
}

// mfOps encodes ops as the fuzz targets' ops argument.
func mfOps(ops ...mfOp) []byte {
	b := make([]byte, 0, 10*len(ops))
	for _, o := range ops {
		b = append(b, o.kind, o.cost)
		b = binary.LittleEndian.AppendUint64(b, uint64(o.v))
	}
	return b
}

// The step kinds of an mfOp (kind % 8) and its cost selectors (cost % 6).
const (
	stepSame      = iota // the same instant
	stepSmall            // forward by less than a quarter of the span
	stepForward          // forward by up to twice the span
	stepBack             // backward by up to twice the span
	stepRetry            // to the last denial's now+RetryAfter
	stepRetryLess        // to 1ns before it
	stepInterval         // forward by less than one token interval (or 1ms)
	stepAny              // forward or backward by any amount
)

const (
	costZero     = iota
	costOne      // 1
	costBurst    // the burst
	costAbove    // burst+1: can never pass
	costUpTo     // 1..burst
	costUpToPlus // 1..burst+1
)

// mfSeedOps is a sequence that empties a bucket, is denied, retries at the
// named instant and 1ns before it, and goes back in time.
var mfSeedOps = mfOps(
	mfOp{stepSame, costBurst, 0},
	mfOp{stepSame, costOne, 0},
	mfOp{stepRetryLess, costOne, 0},
	mfOp{stepRetry, costOne, 0},
	mfOp{stepSmall, costUpTo, 3},
	mfOp{stepBack, costOne, 1 << 40},
	mfOp{stepRetry, costOne, 0},
	mfOp{stepForward, costAbove, 1 << 50},
	mfOp{stepInterval, costUpToPlus, 12345},
	mfOp{stepAny, costZero, -1 << 45},
)

// mfRun decides the ops against l, which must be valid, from time start,
// checking every decision.
func mfRun(t *testing.T, l *Limit, start int64, ops []byte) {
	mfRunLimits(t, []*Limit{l}, nil, start, ops)
}

// mfRunLimits is mfRun over several limits of one algorithm, which take
// turns on one state as a changing rule's limits would: each op's pick
// selects the limit that decides it (always the first when pick is nil).
func mfRunLimits(t *testing.T, ls []*Limit, pick []byte, start int64, ops []byte) {
	var (
		s       State
		now     = mfMod(start, mfMaxTime+1)
		hw      = int64(-1) // the latest time anything was committed
		retryAt = int64(-1) // the last denial's now+RetryAfter
		bound   int64       // the longest span of the limits
		most    int64       // the largest burst of the limits
	)
	for _, l := range ls {
		bound, most = max(bound, mfSpan(l)), max(most, l.burst)
	}
	for n := 0; len(ops) >= 10 && n < 64; n++ {
		op := mfOp{ops[0], ops[1], int64(binary.LittleEndian.Uint64(ops[2:10]))}
		ops = ops[10:]
		l := ls[0]
		if n < len(pick) {
			l = ls[int(pick[n])%len(ls)]
		}
		span := mfSpan(l)
		unit := max(int64(l.interval), int64(time.Millisecond))
		if !l.isBucket() {
			unit = int64(l.window)
		}
		switch op.kind % 8 {
		case stepSmall:
			now = mfAdd(now, mfMod(op.v, span/4+1))
		case stepForward:
			now = mfAdd(now, mfMod(op.v, 2*span+1))
		case stepBack:
			now = mfAdd(now, -mfMod(op.v, 2*span+1))
		case stepRetry:
			if retryAt >= 0 {
				now = retryAt
			}
		case stepRetryLess:
			if retryAt > 0 {
				now = retryAt - 1
			}
		case stepInterval:
			now = mfAdd(now, mfMod(op.v, unit))
		case stepAny:
			now = mfAdd(now, op.v)
		}
		var cost int64
		switch op.cost % 6 {
		case costOne:
			cost = 1
		case costBurst:
			cost = l.burst
		case costAbove:
			cost = l.burst + 1
		case costUpTo:
			cost = 1 + mfMod(op.v, l.burst)
		case costUpToPlus:
			cost = 1 + mfMod(op.v, l.burst+1)
		}

		before := mfClone(s)
		st, next := l.Decide(&s, now, cost)
		if !mfEqual(s, before) {
			t.Fatalf("Decide(now %d, cost %d) changed its input state: %+v, was %+v", now, cost, s, before)
		}
		mfCheckDecision(t, l, &s, now, cost, st, next, hw, mfMod(op.v, span)+1, bound)
		if base := l.at(now); st.Reason == ReasonLimited && base <= mfMaxTime-int64(st.RetryAfter) {
			retryAt = base + int64(st.RetryAfter)
		}
		if st.Allowed && cost > 0 {
			l.Commit(&s, next, cost)
			hw = max(hw, now)
			mfCheckState(t, l, &s, hw, most)
			// The answer's Remaining is the balance a read then sees.
			if rd, _ := l.Decide(&s, now, 0); rd.Remaining != st.Remaining {
				t.Fatalf("Decide(now %d, cost %d) = %+v, but reading right after gives Remaining %d", now, cost, st, rd.Remaining)
			}
		}
	}
}

// mfSpan is the longest time a state of l can take to become new again,
// counted from its latest commit.
func mfSpan(l *Limit) int64 {
	switch l.alg {
	case AlgTokenBucket, AlgShaping:
		return l.tau + l.wait
	case AlgSlidingWindow:
		return 2 * int64(l.window)
	}
	return int64(l.window)
}

func mfClone(s State) State {
	s.Log = slices.Clone(s.Log)
	return s
}

func mfEqual(a, b State) bool {
	return a.A == b.A && a.B == b.B && a.C == b.C && a.Span == b.Span && slices.Equal(a.Log, b.Log)
}

// mfCheckDecision checks one decision st, next = l.Decide(s, now, cost), with
// hw the latest time anything was committed (-1: never), d > 0 a time
// offset to read at, and bound the longest span (mfSpan) of the limits that
// may have written s.
func mfCheckDecision(t *testing.T, l *Limit, s *State, now, cost int64, st BucketState, next State, hw, d, bound int64) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%v: Decide(now %d, cost %d) on %+v = %+v: "+format,
			append([]any{l, now, cost, *s, st}, args...)...)
	}
	switch {
	case st.Allowed != (st.Reason == ReasonNone):
		fail("Allowed and Reason disagree")
	case cost == 0 && !st.Allowed:
		fail("a read (cost 0) was denied")
	case cost > l.burst && st.Reason != ReasonCostExceedsLimit:
		fail("cost above the burst %d, want ReasonCostExceedsLimit", l.burst)
	case cost <= l.burst && st.Reason == ReasonCostExceedsLimit:
		fail("ReasonCostExceedsLimit for a cost within the burst %d", l.burst)
	case st.Reason > ReasonCostExceedsLimit:
		fail("the math never answers %v", st.Reason)
	case st.Remaining < 0 || st.Remaining > l.burst:
		fail("Remaining outside [0, %d]", l.burst)
	case st.RetryAfter < 0 || (st.RetryAfter > 0) != (st.Reason == ReasonLimited):
		fail("RetryAfter must be > 0 exactly when limited")
	case st.Delay < 0 || st.Delay > l.maxWait || (st.Delay > 0 && (l.alg != AlgShaping || !st.Allowed)):
		fail("Delay must be 0 unless a shaping bucket admits, and at most MaxWait %v", l.maxWait)
	case (!st.Allowed || cost == 0) && l.alg != AlgSlidingLog && !mfEqual(next, *s):
		fail("a read or a denial must leave the state as it is, got next %+v", next)
	case (!st.Allowed || cost == 0) && l.alg == AlgSlidingLog:
		// A log's next is the log without the entries that have left the
		// window, even when nothing is admitted: a suffix of the input
		// that answers the same at now. Stores never commit it.
		var sum int64
		for _, e := range next.Log {
			sum += e.Cost
		}
		again, _ := l.Decide(&next, now, cost)
		if len(next.Log) > len(s.Log) || !slices.Equal(next.Log, s.Log[len(s.Log)-len(next.Log):]) || sum != next.B || again != st {
			fail("a read or a denial's next %+v is not the input's log less what has left the window", next)
		}
	}
	// Durations count from the instant l decides at: now, or at
	// microsecond resolution now truncated to the microsecond.
	res := l.Resolution() // whatever limit wrote s
	base := now - now%int64(res)
	for _, d := range []time.Duration{st.ResetAfter, st.RetryAfter, st.Delay} {
		// Beyond 2^53ns a bucket's durations are rounded up to a double.
		if d%l.Resolution() != 0 && (d <= 1<<53 || !l.isBucket()) {
			fail("%v is not a whole %v", d, l.Resolution())
		}
	}

	// ResetAfter: at most one span (bound, the longest of the limits that
	// wrote s) after the latest commit.
	limit := upDouble(bound + max(hw-base, 0) + int64(res) - 1) // a TAT rounded up to res
	if st.ResetAfter < 0 || int64(st.ResetAfter) > limit {
		fail("ResetAfter outside [0, %v]", time.Duration(limit))
	}

	// RetryAfter is exact: the same cost passes at now+RetryAfter and not
	// 1ns before (at microsecond resolution: from the instant it decides
	// at). Beyond MaxTime no decision is made, so nothing to check.
	if st.Reason == ReasonLimited && base <= mfMaxTime-int64(st.RetryAfter) {
		at := base + int64(st.RetryAfter)
		if got, _ := l.Decide(s, at, cost); !got.Allowed {
			fail("at now+RetryAfter (%d) still %+v: RetryAfter is too short", at, got)
		}
		// Beyond 2^53ns a token bucket's RetryAfter is rounded up to the
		// next double (see upDouble): the wait lies after the double below.
		before := at - 1
		if r := int64(st.RetryAfter); r > 1<<53 && l.isBucket() {
			before = base + int64(math.Nextafter(float64(r), 0))
		}
		if got, _ := l.Decide(s, before, cost); got.Allowed {
			fail("already allowed at %d, before now+RetryAfter: RetryAfter is too long", before)
		}
	}

	// Time moving backwards never creates tokens, and moving forwards never
	// takes any: for a given state, reads never see more at an earlier time.
	here, _ := l.Decide(s, now, 0)
	if now >= d {
		if back, _ := l.Decide(s, now-d, 0); back.Remaining > here.Remaining {
			fail("reading %v earlier finds %d remaining, more than %d now", time.Duration(d), back.Remaining, here.Remaining)
		}
	}
	if now <= mfMaxTime-d {
		if fwd, _ := l.Decide(s, now+d, 0); fwd.Remaining < here.Remaining {
			fail("reading %v later finds %d remaining, fewer than %d now", time.Duration(d), fwd.Remaining, here.Remaining)
		}
	}
}

// mfCheckState checks that a committed state is in range: nothing
// overflowed and nothing lies further ahead than the math can put it. most
// is the largest burst of the limits that may have written s before l.
func mfCheckState(t *testing.T, l *Limit, s *State, hw, most int64) {
	t.Helper()
	w := int64(l.window)
	bad := ""
	switch l.alg {
	case AlgTokenBucket, AlgShaping:
		switch {
		case s.A < 0 || s.A > hw+l.tau+l.wait:
			bad = "TAT outside [0, latest commit + fill time + MaxWait]"
		case s.Span != l.tau:
			bad = "the fill time recorded is not the limit's"
		case l.long && s.A%1000 != 0:
			bad = "a TAT at microsecond resolution that is not a whole microsecond"
		}
	case AlgFixedWindow, AlgSlidingWindow:
		switch {
		case s.A < 0 || s.A > hw || s.A%w != 0:
			bad = "window start not an epoch-aligned window at or before the latest commit"
		case s.B < 1 || s.B > l.burst || s.C < 0 || s.C > most:
			bad = "counts outside [0, limit]"
		case s.Span != w:
			bad = "the window recorded is not the limit's"
		}
	case AlgSlidingLog:
		var sum int64
		for i, e := range s.Log {
			switch {
			case e.Cost < 1:
				bad = "an entry of cost < 1"
			case i > 0 && e.At <= s.Log[i-1].At:
				bad = "entries out of order"
			case e.At > hw:
				bad = "an entry after the latest commit"
			case l.long && e.At%1000 != 0:
				bad = "an entry at microsecond resolution that is not a whole microsecond"
			}
			sum += e.Cost
		}
		if sum != s.B || sum > l.burst {
			bad += " sum of the entries differs from B or exceeds the limit"
		}
		if s.Span != w {
			bad += " the window recorded is not the limit's"
		}
	}
	if bad != "" {
		t.Fatalf("%v: after a commit, state %+v: %s", l, *s, bad)
	}
}

// mfValid validates lim as NewPolicy does and returns the validated limit,
// or nil after checking that the error is a configuration error.
func mfValid(t *testing.T, lim Limit) *Limit {
	t.Helper()
	p, err := NewPolicy(Rule{Name: "fuzz", Scope: ScopeUser, Limit: lim})
	if err != nil {
		mfCheckConfigError(t, err)
		return nil
	}
	return &p.rules[0].Limit
}

// mfCheckConfigError checks that err is a *RuleError naming rule "fuzz" and
// wrapping a configuration error.
func mfCheckConfigError(t *testing.T, err error) {
	t.Helper()
	var re *RuleError
	if !errors.As(err, &re) || re.Rule != "fuzz" {
		t.Fatalf("NewPolicy error %v is not a *RuleError naming the rule", err)
	}
	if !slices.ContainsFunc(mfConfigErrors, func(e error) bool { return errors.Is(err, e) }) {
		t.Fatalf("NewPolicy error %v wraps no configuration error", err)
	}
	if !strings.HasPrefix(err.Error(), `ratelimit: rule "fuzz": `) {
		t.Fatalf("NewPolicy error %q does not start with the package and the rule", err)
	}
}

// mfRate builds a rate from fuzzed numbers by one of three routes: Rate{N,
// Per}, Every, or RateFromFloat, all between 1e-6/s and 1e9/s where valid.
func mfRate(t *testing.T, mode uint8, a, b int64) Rate {
	switch mode % 3 {
	case 0:
		// Up to 1e9 tokens per up to 1e6 s; N > Per is above 1e9/s and
		// invalid.
		return Rate{N: 1 + mfMod(a, 1e9), Per: time.Duration(1 + mfMod(b, 1e15))}
	case 1:
		return Every(time.Duration(1 + mfMod(a, 1e15)))
	}
	perSecond := math.Pow(10, -6+15*float64(mfMod(a, 1_000_001))/1e6)
	r, err := RateFromFloat(perSecond)
	if err != nil {
		t.Fatalf("RateFromFloat(%v) = %v, want a rate: it is within 1e-6..1e9", perSecond, err)
	}
	return r
}

// mfInterval is Per/N rounded up, computed independently of Rate.interval,
// or 0 if the rate is invalid.
func mfInterval(r Rate) int64 {
	if r.N < 1 || r.Per < 1 || int64(r.Per) < r.N {
		return 0
	}
	return (int64(r.Per) + r.N - 1) / r.N
}

// fuzzBucket fuzzes a token bucket (shaping false) or a shaping limit.
func fuzzBucket(f *testing.F, shaping bool) {
	f.Add(uint8(0), int64(2), int64(time.Second), int64(3), int64(500*time.Millisecond), int64(1767225600e9), mfSeedOps)
	f.Add(uint8(0), int64(1e9), int64(time.Second), int64(1e12), int64(1), int64(0), mfSeedOps)
	f.Add(uint8(1), int64(7*time.Millisecond), int64(0), int64(9), int64(time.Second), mfMaxTime, mfSeedOps)
	f.Add(uint8(1), int64(1e15), int64(0), int64(8), int64(1e15), mfMaxTime-1, mfSeedOps)
	f.Add(uint8(2), int64(0), int64(0), int64(1e12), int64(0), int64(1e18), mfSeedOps)
	f.Add(uint8(2), int64(1_000_000), int64(0), int64(1e12), int64(42), int64(1767225600e9), mfSeedOps)
	f.Add(uint8(0), int64(3), int64(time.Second), int64(5), int64(100*time.Millisecond), int64(1767225600e9), []byte{})
	// Longer than 100 days: microsecond resolution.
	f.Add(uint8(1), int64(150*24*time.Hour+7), int64(0), int64(2), int64(20*24*time.Hour+1234), int64(1767225600e9+999), mfSeedOps)
	f.Add(uint8(0), int64(3), int64(1000), int64(26e12), int64(0), int64(1767225600e9+1), mfSeedOps)
	// Found by fuzzing: time stepping back by hundreds of days (a debt
	// beyond 2^53ns and 2^56ns), and a long limit's durations beyond 2^56ns.
	f.Add(uint8(2), int64(0), int64(-74), int64(1e12), int64(0), int64(1e18), []byte("0200000000C10000000A"))
	f.Add(uint8('H'), int64(2), int64(1e9), int64(-44), int64(5e8), int64(1767225600e9), []byte("0100000000C0\x00C21171A1000001700C0070101200"))
	f.Add(uint8('a'), int64(12959999999999953), int64(0), int64(-88), int64(1728000000001330), int64(1767225600000000986), []byte("0100000000010000000011000000010100000000$100000000700000000\xa50"))
	f.Add(uint8('a'), int64(12960000000000007), int64(0), int64(-88), int64(1728000000001234), int64(1767225600000000986), []byte("00000000000000000000000000000001000000000200000000C1000000\xf07"))
	f.Fuzz(func(t *testing.T, mode uint8, a, b, burst, wait, start int64, ops []byte) {
		rate := mfRate(t, mode, a, b)
		interval := mfInterval(rate)
		if interval == 0 {
			// Above 1e9/s: rejected, as FuzzNewPolicy checks in detail.
			mfValid(t, TokenBucket(rate, 1))
			return
		}
		// A burst the rate refills within MaxSpan, up to 1e12.
		most := min(int64(1e12), int64(MaxSpan)/interval)
		if most < 1 {
			mfValid(t, TokenBucket(rate, 1))
			return
		}
		burst = 1 + mfMod(burst, most)
		lim := TokenBucket(rate, burst)
		var kind uint8
		if shaping {
			room := int64(MaxSpan) - burst*interval
			if room < 1 {
				return // no MaxWait fits beside this fill time
			}
			wait = 1 + mfMod(wait, room)
			lim, kind = Shaping(rate, burst, time.Duration(wait)), 1
		}
		// Within MaxSpan at nanosecond resolution; at microsecond resolution
		// (longer than 100 days) the rounded interval may not fit.
		faults := mfFaults(kind, rate, burst, 0, wait)
		l := mfValid(t, lim)
		if l == nil {
			if len(faults) == 0 {
				t.Fatalf("NewPolicy rejected %v, whose fill time and wait are within MaxSpan", lim)
			}
			return
		}
		if len(faults) > 0 {
			t.Fatalf("NewPolicy accepted %v, want one of %v", lim, faults)
		}
		mfRun(t, l, start, ops)
	})
}

// FuzzTokenBucket checks the invariants of mfCheckDecision for token buckets.
func FuzzTokenBucket(f *testing.F) { fuzzBucket(f, false) }

// FuzzShaping checks the invariants of mfCheckDecision for shaping limits.
func FuzzShaping(f *testing.F) { fuzzBucket(f, true) }

// fuzzWindow fuzzes a window algorithm with limits up to MaxCost and
// windows of whole milliseconds up to MaxSpan.
func fuzzWindow(f *testing.F, mk func(int64, time.Duration) Limit, seedOps []byte) {
	f.Add(int64(4), int64(999), int64(1767225600e9+250e6), seedOps)
	f.Add(int64(10), int64(12999), int64(1767225600e9), seedOps)
	f.Add(int64(7), int64(0), int64(0), seedOps)
	f.Add(int64(MaxCost-1), int64(MaxSpan/time.Millisecond-1), mfMaxTime, seedOps)
	f.Add(int64(5), int64(100*24*time.Hour/time.Millisecond), int64(1767225600e9+123456789), seedOps)
	f.Add(int64(5), int64(150*24*time.Hour/time.Millisecond+6), int64(1767225600e9+123456789), seedOps)
	f.Add(int64(1e12), int64(59999), mfMaxTime-1, seedOps)
	f.Fuzz(func(t *testing.T, limit, windowMs, start int64, ops []byte) {
		limit = 1 + mfMod(limit, MaxCost)
		window := time.Duration(1+mfMod(windowMs, int64(MaxSpan/time.Millisecond))) * time.Millisecond
		lim := mk(limit, window)
		l := mfValid(t, lim)
		if l == nil {
			t.Fatalf("NewPolicy rejected %v, whose numbers are in range", lim)
		}
		mfRun(t, l, start, ops)
	})
}

// FuzzFixedWindow checks the invariants of mfCheckDecision for fixed windows.
func FuzzFixedWindow(f *testing.F) { fuzzWindow(f, FixedWindow, mfSeedOps) }

// FuzzSlidingWindow checks the invariants of mfCheckDecision for sliding
// window counters, with time moving backwards as well as forwards.
func FuzzSlidingWindow(f *testing.F) { fuzzWindow(f, SlidingWindow, mfSeedOps) }

// FuzzSlidingLog checks the invariants of mfCheckDecision for sliding logs.
func FuzzSlidingLog(f *testing.F) { fuzzWindow(f, SlidingLog, mfSeedOps) }

// FuzzNewPolicy checks that NewPolicy accepts a limit exactly when its
// numbers are within the documented bounds, fills the derived fields
// exactly when it does, and otherwise returns a *RuleError wrapping the
// configuration error of a field at fault.
func FuzzNewPolicy(f *testing.F) {
	day := int64(24 * time.Hour)
	f.Add(uint8(0), int64(10), int64(time.Second), int64(50), int64(0))
	f.Add(uint8(0), int64(0), int64(time.Second), int64(50), int64(0))
	f.Add(uint8(0), int64(1e9+1), int64(time.Second), int64(1), int64(0))
	f.Add(uint8(0), int64(1), int64(day), int64(100), int64(0))
	f.Add(uint8(0), int64(1), int64(day), int64(101), int64(0))
	f.Add(uint8(0), int64(3), int64(time.Second), int64(MaxCost+1), int64(0))
	f.Add(uint8(1), int64(1), int64(day), int64(99), int64(day))
	f.Add(uint8(1), int64(1), int64(day), int64(99), int64(day+1))
	f.Add(uint8(1), int64(2), int64(time.Second), int64(4), int64(0))
	// At 400 days, and beyond 100 days at microsecond resolution: an
	// interval of 334ns rounds up to 1µs, which then may or may not fit.
	f.Add(uint8(0), int64(1), int64(day), int64(400), int64(0))
	f.Add(uint8(0), int64(1), int64(day), int64(401), int64(0))
	f.Add(uint8(1), int64(1), int64(day), int64(399), int64(day))
	f.Add(uint8(1), int64(1), int64(day), int64(399), int64(day+1))
	f.Add(uint8(1), int64(1), int64(day), int64(50), int64(50*day+999))
	f.Add(uint8(1), int64(1), int64(day), int64(50), int64(50*day+1))
	f.Add(uint8(0), int64(3), int64(300*day+1), int64(3), int64(0))
	f.Add(uint8(0), int64(3), int64(1000), int64(26e12), int64(0))
	f.Add(uint8(0), int64(3), int64(1000), int64(1e14), int64(0))
	f.Add(uint8(2), int64(0), int64(100*day+1e6), int64(7), int64(0))
	f.Add(uint8(2), int64(0), int64(time.Minute), int64(100), int64(0))
	f.Add(uint8(3), int64(0), int64(time.Second+time.Microsecond), int64(10), int64(0))
	f.Add(uint8(4), int64(0), int64(MaxSpan), int64(MaxCost), int64(0))
	f.Add(uint8(4), int64(0), int64(MaxSpan+time.Millisecond), int64(1), int64(0))
	f.Add(uint8(5), int64(0), int64(0), int64(0), int64(0))
	f.Add(uint8(11), int64(0), int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, alg uint8, n, per, burst, wait int64) {
		rate := Rate{N: n, Per: time.Duration(per)}
		var lim Limit
		kind := alg % 6
		switch kind {
		case 0:
			lim = TokenBucket(rate, burst)
		case 1:
			lim = Shaping(rate, burst, time.Duration(wait))
		case 2:
			lim = FixedWindow(burst, time.Duration(per))
		case 3:
			lim = SlidingWindow(burst, time.Duration(per))
		case 4:
			lim = SlidingLog(burst, time.Duration(per))
		default:
			// No algorithm, or an unknown one.
			a := Algorithm(alg)
			if a <= AlgSlidingLog {
				a = 0
			}
			lim = Limit{alg: a}
		}
		faults := mfFaults(kind, rate, burst, per, wait)
		p, err := NewPolicy(Rule{Name: "fuzz", Scope: ScopeUser, Limit: lim})
		if err != nil {
			mfCheckConfigError(t, err)
			if len(faults) == 0 {
				t.Fatalf("NewPolicy(%v) = %v, want it accepted: every number is within bounds", lim, err)
			}
			if !slices.ContainsFunc(faults, func(e error) bool { return errors.Is(err, e) }) {
				t.Fatalf("NewPolicy(%v) = %v, want an error matching one of %v", lim, err, faults)
			}
			return
		}
		if len(faults) > 0 {
			t.Fatalf("NewPolicy(%v) accepted it, want an error matching one of %v", lim, faults)
		}
		l := p.Rules()[0].Limit
		if l.Burst() != burst || l.Algorithm() != lim.alg {
			t.Fatalf("NewPolicy changed %v into %v", lim, l)
		}
		if l.isBucket() {
			if kind == 0 {
				wait = 0
			}
			iv, wantWait, long := mfBucket(rate, burst, wait)
			if int64(l.Interval()) != iv || int64(l.Window()) != iv*burst || l.Rate() != rate {
				t.Fatalf("%v: Interval %v, Window %v, want %v (Per/N rounded up) and %v (burst of them)",
					l, l.Interval(), l.Window(), time.Duration(iv), time.Duration(iv*burst))
			}
			if kind == 1 && l.MaxWait() != time.Duration(wantWait) {
				t.Fatalf("%v: MaxWait %v, want %v", l, l.MaxWait(), time.Duration(wantWait))
			}
			if want := mfResolution(long); l.Resolution() != want {
				t.Fatalf("%v: Resolution %v, want %v", l, l.Resolution(), want)
			}
		} else if l.Window() != time.Duration(per) || l.Interval() != 0 || l.Resolution() != mfResolution(per > int64(100*24*time.Hour)) {
			t.Fatalf("%v: Window %v, Interval %v, Resolution %v, want %v, 0 and %v", l, l.Window(), l.Interval(), l.Resolution(), time.Duration(per), mfResolution(per > int64(100*24*time.Hour)))
		}
	})
}

// mfFaults restates the documented bounds of a limit and returns the
// configuration errors its numbers call for (none: valid). Products are
// computed in big integers, so nothing overflows here.
func mfFaults(kind uint8, rate Rate, burst, per, wait int64) []error {
	var faults []error
	if kind > 4 {
		return []error{ErrInvalidRule}
	}
	if burst < 1 || burst > MaxCost {
		faults = append(faults, ErrInvalidBurst)
	}
	if kind >= 2 {
		if per <= 0 || per > int64(MaxSpan) || per%int64(time.Millisecond) != 0 {
			faults = append(faults, ErrInvalidWindow)
		}
		return faults
	}
	iv := mfInterval(rate)
	if iv == 0 {
		return append(faults, ErrInvalidRate)
	}
	if len(faults) > 0 {
		return faults
	}
	if kind == 0 {
		wait = 0
	}
	check := func(iv, wait int64) []error {
		tau := new(big.Int).Mul(big.NewInt(iv), big.NewInt(burst))
		span := big.NewInt(int64(MaxSpan))
		if tau.Cmp(span) > 0 {
			return []error{ErrInvalidBurst}
		}
		if kind == 1 {
			total := new(big.Int).Add(tau, big.NewInt(wait))
			if wait <= 0 || total.Cmp(span) > 0 {
				return []error{ErrInvalidWindow}
			}
		}
		return nil
	}
	if f := check(iv, wait); f != nil {
		return f
	}
	// Longer than 100 days: the interval rounded up to the microsecond and
	// the wait down must still fit.
	if iv*burst+wait > int64(100*24*time.Hour) {
		return check((iv+999)/1000*1000, wait/1000*1000)
	}
	return nil
}

// mfBucket restates what NewPolicy derives for a valid token bucket (wait
// 0) or shaping limit: the interval between tokens, the max wait and
// whether the limit is longer than 100 days, at microsecond resolution.
func mfBucket(rate Rate, burst, wait int64) (iv, w int64, long bool) {
	iv, w = mfInterval(rate), wait
	if iv*burst+wait > int64(100*24*time.Hour) {
		return (iv + 999) / 1000 * 1000, wait / 1000 * 1000, true
	}
	return iv, w, false
}

// mfResolution is the resolution of a limit that is longer than 100 days
// or not.
func mfResolution(long bool) time.Duration {
	if long {
		return time.Microsecond
	}
	return time.Nanosecond
}

// FuzzRateFromFloat checks that RateFromFloat rejects what is not a rate
// between 0 and 1e9 per second, and otherwise returns a valid rate that never
// exceeds the one asked for and loses less than 1ns per token.
func FuzzRateFromFloat(f *testing.F) {
	for _, x := range []float64{1, 2.5, 1e9, 1e-6, 1e9 / 3, 0.1, 7e8, 1e9 + 1, 0, -1, 1e-12, math.NaN(), math.Inf(1), math.SmallestNonzeroFloat64} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x float64) {
		r, err := RateFromFloat(x)
		valid := x > 0 && x <= 1e9 // false for NaN
		if err != nil {
			if !errors.Is(err, ErrInvalidRate) {
				t.Fatalf("RateFromFloat(%v) = %v, want an error wrapping ErrInvalidRate", x, err)
			}
			if valid && x >= 1e-9 {
				t.Fatalf("RateFromFloat(%v) = %v, want a rate", x, err)
			}
			return
		}
		if !valid {
			t.Fatalf("RateFromFloat(%v) = %v, want ErrInvalidRate", x, r)
		}
		iv, ierr := r.interval()
		if ierr != nil {
			t.Fatalf("RateFromFloat(%v) = %v, which is invalid: %v", x, r, ierr)
		}
		// iv >= 1e9/x (never faster) and iv < 1e9/x + 1, up to the
		// rounding of x itself: the double nearest a decimal such as 1e-6 is
		// off by up to half an ulp, and the interval meant for "1e-6 per
		// second" is exactly 1e15ns even though the double lies 4.5e-17
		// below 1e-6. So the bounds allow a relative 2^-52 of the exact
		// interval; an interval rounded the wrong way is off by far more.
		exact := new(big.Rat).Quo(big.NewRat(1e9, 1), new(big.Rat).SetFloat64(x))
		slack := new(big.Rat).Mul(exact, big.NewRat(1, 1<<52))
		ivr := new(big.Rat).SetInt64(iv)
		if lo := new(big.Rat).Sub(exact, slack); ivr.Cmp(lo) < 0 {
			t.Fatalf("RateFromFloat(%v) = %v: one token every %dns, faster than the %v ns asked for", x, r, iv, exact.FloatString(6))
		}
		if hi := new(big.Rat).Add(exact, slack); ivr.Cmp(hi.Add(hi, big.NewRat(1, 1))) >= 0 {
			t.Fatalf("RateFromFloat(%v) = %v: one token every %dns, 1ns or more slower than %v ns", x, r, iv, exact.FloatString(6))
		}
	})
}
