package core

import (
	"math"
	"time"
)

// The bucket math is pure: a limit, a state, the current time and a cost in; a
// BucketState and the next state out. Times are int64 Unix nanoseconds in
// [0, MaxTime()], so no sum below overflows (see maxSpan).

// State is the stored state of one bucket, in the units of its algorithm. The
// zero value is a new bucket, which is full. Stores other than the in-memory
// one keep the same fields under their own encoding:
//
//	token bucket, shaping: A = theoretical arrival time (GCRA), Unix ns; Span = fill time tau
//	fixed window:          A = window start, B = count in that window; Span = window
//	sliding window:        A = current window start, B = its count, C = previous window's count; Span = window
//	sliding log:           Log = admitted (time, cost) in time order, B = their sum; Span = window
//
// Span records the limit the state was written under (see Limit for what a
// changed limit does with it). 0 means not recorded, as in states written
// before it was: a token bucket then takes its fill time as the deciding
// limit's, and so does a window algorithm whose window is at most 100 days;
// one with a longer window, which no such state was written under, starts
// afresh.
//
// A State is not safe for concurrent use: stores serialize access to each
// bucket's.
type State struct {
	A, B, C int64      // per algorithm, as above; times in Unix ns
	Span    int64      // ns: the fill time or window written under; 0: not recorded
	Log     []LogEntry // the sliding log's entries, oldest first; nil otherwise
}

// LogEntry is one admitted request of a sliding log. The zero value is a
// cost of 0 at the Unix epoch.
type LogEntry struct {
	At   int64 // Unix ns
	Cost int64 // tokens admitted at At
}

// Reason says why a bucket or a decision denied, or that it did not. The
// zero value is ReasonNone.
type Reason uint8

const (
	// ReasonNone: allowed.
	ReasonNone Reason = iota
	// ReasonLimited: not enough tokens now; RetryAfter says when.
	ReasonLimited
	// ReasonCostExceedsLimit: the cost is larger than the burst or window
	// limit and can never pass; there is no retry time.
	ReasonCostExceedsLimit
	// ReasonUnavailable: the store failed and the limiter fails closed.
	ReasonUnavailable
)

// String names the reason.
func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonLimited:
		return "limited"
	case ReasonCostExceedsLimit:
		return "cost_exceeds_limit"
	case ReasonUnavailable:
		return "unavailable"
	}
	return "unknown"
}

// BucketState is what one bucket says about one request. The zero value is
// a denial with no reason, which no store reports.
type BucketState struct {
	// Allowed reports whether this bucket alone would admit the request.
	Allowed bool
	// Reason is ReasonNone when allowed, otherwise why not.
	Reason Reason
	// Remaining is the whole number of tokens (or window requests) left after
	// the decision; never negative. When the request as a whole is denied,
	// nothing is consumed and Remaining is the current balance.
	Remaining int64
	// ResetAfter is the time until the bucket is full again.
	ResetAfter time.Duration
	// RetryAfter, when denied by this bucket, is the exact time until this
	// cost can pass if nobody else consumes; 0 otherwise and for
	// ReasonCostExceedsLimit.
	RetryAfter time.Duration
	// Delay is the time a shaping bucket asks the request to wait before it
	// proceeds; 0 for every other algorithm.
	Delay time.Duration
}

// Decide evaluates a request of cost at time now (Unix ns) against one bucket
// without changing s, and returns the bucket's answer and the state to store
// if the request as a whole is admitted. For a sliding log, next shares s.Log's
// backing array; call Commit to store it. Decide is the reference
// implementation that every store must match. now is Unix nanoseconds, cost
// a count of tokens; both are taken as valid (see CheckTake).
//
// A limit that cannot decide (the zero Limit, a token bucket or shaping
// limit that NewPolicy did not validate, a window limit whose window is not
// positive) gets ReasonCostExceedsLimit, a denial that no wait cures, and
// next equal to *s. Decide does not change l and is safe for concurrent use
// on distinct states.
func (l *Limit) Decide(s *State, now, cost int64) (st BucketState, next State) {
	next = *s
	if !l.decidable() {
		return BucketState{Reason: ReasonCostExceedsLimit}, next
	}
	now = l.at(now)
	switch l.alg {
	case AlgTokenBucket, AlgShaping:
		return l.decideBucket(s, now, cost)
	case AlgFixedWindow:
		return l.decideFixed(s, now, cost)
	case AlgSlidingWindow:
		return l.decideSliding(s, now, cost)
	case AlgSlidingLog:
		return l.decideLog(s, now, cost)
	}
	return BucketState{Reason: ReasonCostExceedsLimit}, next
}

// Commit stores next, as returned by Decide for the same cost, into s. For a
// sliding log it drops the entries that left the window and appends the
// admitted cost, reusing s.Log's array. The caller serializes access to s.
func (l *Limit) Commit(s *State, next State, cost int64) {
	s.Span = next.Span
	if l.alg != AlgSlidingLog {
		s.A, s.B, s.C = next.A, next.B, next.C
		return
	}
	// next.Log is a suffix of s.Log: move it to the front so the array's
	// whole capacity stays usable.
	log := s.Log[:copy(s.Log, next.Log)]
	if cost > 0 {
		if n := len(log); n > 0 && log[n-1].At == next.A {
			log[n-1].Cost += cost // same instant: one entry carries both
		} else {
			log = append(log, LogEntry{At: next.A, Cost: cost})
		}
	}
	s.B, s.Log = next.B, log
}

// ExpiresAt returns the Unix ns instant from which the state is equivalent to
// a new bucket and can be dropped, whatever limit of l's algorithm decides
// on it then: for a token bucket, when it is full again (its TAT, rounded up
// to the microsecond for limits of that resolution); for a window or log,
// when its window (the one recorded in s.Span, else l's) has passed; 0 for a
// window or log that holds nothing.
func (l *Limit) ExpiresAt(s *State) int64 {
	w := s.Span
	if w <= 0 {
		w = int64(l.window)
	}
	switch l.alg {
	case AlgTokenBucket, AlgShaping:
		return ceilMicro(s.A)
	case AlgFixedWindow:
		if s.B == 0 {
			return 0
		}
		return s.A + w
	case AlgSlidingWindow:
		switch {
		case s.B > 0:
			return s.A + 2*w
		case s.C > 0:
			return s.A + w
		}
		return 0
	case AlgSlidingLog:
		if len(s.Log) == 0 {
			return 0
		}
		return s.Log[len(s.Log)-1].At + w
	}
	return 0
}

// ceilMicro rounds t up to a whole microsecond (t itself if t <= 0 or the
// rounding would overflow).
func ceilMicro(t int64) int64 {
	if r := t % 1000; r > 0 && t <= math.MaxInt64-999 {
		return t + 1000 - r
	}
	return t
}

// unit returns l's resolution in ns: 1, or 1000 for a limit longer than
// 100 days.
func (l *Limit) unit() int64 {
	if l.long {
		return 1000
	}
	return 1
}

// at returns the time l decides at for now: now itself, or at microsecond
// resolution now truncated to the microsecond (now >= 0).
func (l *Limit) at(now int64) int64 {
	if l.long {
		return now - now%1000
	}
	return now
}

// sameWindow reports whether a window state s was written under l's window,
// so that its counts apply (see State.Span).
func (l *Limit) sameWindow(s *State) bool {
	return s.Span == int64(l.window) || (s.Span == 0 && !l.long)
}

// rescaleDebt returns the debt of a bucket whose raw debt (the time until
// it is full under the limit that wrote it) is debt > 0 and whose fill time
// was from, under a limit whose fill time is to: ceil(debt*to/from) in
// float64 operations in this order, so that every store (Lua numbers are
// doubles) gets the same bits, rounded up to the microsecond, and at most
// to. The explicit conversion stops the compiler from fusing the multiply
// and the divide. debt is a whole microsecond and every operand is exact in
// a double; the result is within a few nanoseconds of the exact share (the
// product and the quotient round) and, as a pure function of the three
// numbers, the same everywhere. It is monotone in debt.
func rescaleDebt(debt, from, to int64) int64 {
	q := math.Ceil(float64(float64(debt)*float64(to)) / float64(from))
	if q >= float64(to) {
		return to
	}
	return min(ceilMicro(int64(q)), to) // q >= 0: debt, to and from are positive
}

// rescaledFit returns, for a bucket read under a limit other than the one
// that wrote it (fill time from), the largest whole-microsecond raw debt y
// in [0, debt] whose rescaled debt is at most room: the cost fits once the
// raw debt is down to y. Its rescaled debt is monotone in y, so bisection
// finds it; room >= 0, and y = 0 always fits.
func rescaledFit(debt, from, to, room int64) int64 {
	lo, hi := int64(0), debt/1000 // in microseconds; lo fits
	for lo < hi {
		mid := hi - (hi-lo)/2 // > lo
		if rescaleDebt(mid*1000, from, to) <= room {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo * 1000
}

// upDouble returns the least integer >= x that a double holds exactly: x
// itself up to 2^53. A bucket reports its ResetAfter and RetryAfter through
// it, so that the Redis script, whose numbers are doubles, reports the same.
// They exceed 2^53 ns (104 days) only when a bucket's debt does, which
// only an explicit time stepping back by days or a limit with a longer span
// having written the bucket can make happen; there they are at most 2^-52
// of themselves late, never early.
func upDouble(x int64) int64 {
	if x <= 1<<53 {
		return x
	}
	f := float64(x)
	if f >= 0x1p63 {
		return math.MaxInt64 // beyond any state a valid limit writes
	}
	if int64(f) < x {
		f = math.Nextafter(f, math.Inf(1))
	}
	return int64(f)
}

// decidable reports whether the math below can run on l without dividing
// by zero: a token bucket needs the interval NewPolicy derives, a window a
// positive length.
func (l *Limit) decidable() bool {
	switch l.alg {
	case AlgTokenBucket, AlgShaping:
		return l.interval > 0
	case AlgFixedWindow, AlgSlidingWindow, AlgSlidingLog:
		return l.window > 0
	}
	return false
}

// decideBucket is GCRA in integer nanoseconds. With T the interval between
// tokens and tau = burst*T, a bucket whose theoretical arrival time is TAT
// holds (tau - debt)/T tokens, debt = max(TAT-now, 0) (see gcraSpan for its
// rounding and rescaling). A cost c fits iff debt + c*T <= tau; then TAT =
// now + debt + c*T, recorded with tau. Nothing overflows, times being at
// most MaxTime, and every value is exact in a double: below 2^53 at
// nanosecond resolution, whole microseconds below 2^56 at microsecond
// resolution, and beyond (a clock stepped back by days) rounded up to one
// (upDouble).
func (l *Limit) decideBucket(s *State, now, cost int64) (BucketState, State) {
	next := *s
	var st BucketState
	left, tat := l.gcraSpan(&st, s.A, s.Span, now, cost)
	st.Remaining = left / l.interval
	if st.Allowed && cost > 0 {
		next.A, next.Span = tat, l.tau
	}
	return st, next
}

// gcraSpan decides a token bucket or shaping limit whose state is (tat,
// span) into st without the division for Remaining: it leaves st.Remaining 0
// and returns the span, in ns, that Remaining is the whole number of
// intervals of, and the next tat (to be stored with l.tau when allowed with
// cost > 0; tat otherwise). The memory store divides after unlocking the
// bucket, which keeps a hot bucket's lock held for less time.
//
// The time until the bucket is full is max(tat-now, 0), which ResetAfter
// reports; it is the debt. A state written under another fill time (span)
// keeps the share of its burst it has under that limit (see Limit): until
// a take under l is admitted, it refills at that limit's pace, and its debt
// under l is rescaleDebt of that time, rounded up to the microsecond. The
// cost then fits once that time is down to rescaledFit's, a whole number of
// microseconds: its RetryAfter is exact at any resolution, and the
// bisection runs on values a double holds exactly.
func (l *Limit) gcraSpan(st *BucketState, tat, span, now, cost int64) (left, next int64) {
	now = l.at(now)
	full := tat // when the bucket is full
	if l.long {
		full = ceilMicro(tat) // now is a whole microsecond: so is every difference
	}
	until := max(full-now, 0)
	debt := until
	changed := span > 0 && span != l.tau
	if changed && until > 0 {
		debt = rescaleDebt(ceilMicro(until), span, l.tau)
	}
	room := l.tau - debt // negative only if the clock went backwards or a longer limit wrote
	// Every field is written on every path, Allowed and Reason in one
	// store, which the decision's read of the two forwards from: a
	// BucketState built whole and copied out would be read back in wide
	// loads over narrower stores, which stall.
	st.Remaining, st.RetryAfter, st.Delay = 0, 0, 0
	need := cost * l.interval
	wait := need - room // > 0: the cost does not fit now
	if cost == 0 || cost > l.burst {
		if cost == 0 {
			st.Allowed, st.Reason = true, ReasonNone
		} else {
			st.Allowed, st.Reason = false, ReasonCostExceedsLimit
		}
		st.ResetAfter = time.Duration(upDouble(until))
		return max(room, 0), tat
	}
	if wait <= 0 || (l.alg == AlgShaping && wait <= l.wait) {
		st.Allowed, st.Reason = true, ReasonNone
		if wait > 0 {
			st.Delay = time.Duration(wait)
		}
		st.ResetAfter = time.Duration(debt + need)
		return max(room-need, 0), now + debt + need
	}
	// A shaping bucket admits, with a delay, as soon as the wait is within
	// MaxWait (l.wait is 0 for a token bucket).
	st.Allowed, st.Reason = false, ReasonLimited
	st.ResetAfter = time.Duration(upDouble(until))
	if changed {
		// The time until full falls at the writer's pace: the cost fits once
		// it is down to the largest whose rescaled debt leaves room for need
		// (l.tau+l.wait-need >= 0, as cost <= burst). That is below
		// ceilMicro(until), the cost not fitting now.
		st.RetryAfter = time.Duration(upDouble(until - rescaledFit(ceilMicro(until), span, l.tau, l.tau+l.wait-need)))
	} else {
		st.RetryAfter = time.Duration(upDouble(wait - l.wait))
	}
	return max(room, 0), tat
}

// fits is gcraSpan's first case on a token bucket or shaping bucket of TAT
// tat written under l (the same fill time): it returns the TAT to write
// for a cost that fits at now, or reports false for every other case,
// which span decides. It writes nothing, so that a caller's
// compare-and-swap comes before any store (which it would wait for), and
// admitted reports the decision after it.
func (l *Limit) fits(tat, now, cost int64) (int64, bool) {
	if cost <= 0 || cost > l.burst || l.long {
		return 0, false
	}
	next := max(tat, now) + cost*l.interval // cost*interval <= tau: no overflow
	return next, next-now <= l.tau
}

// admitted sets st to the state of a bucket under l whose TAT an admission
// at now set to next (see fits).
func (l *Limit) admitted(st *BucketState, next, now int64) {
	st.Allowed, st.Reason = true, ReasonNone
	st.Remaining = (l.tau - (next - now)) / l.interval
	st.ResetAfter, st.RetryAfter, st.Delay = time.Duration(next-now), 0, 0
}

// span decides a request of cost at now on a token bucket or shaping
// bucket of TAT tat written under l (the same fill time) into st, and
// returns the TAT to write if it is admitted.
func (l *Limit) span(st *BucketState, tat, now, cost int64) int64 {
	left, next := l.gcraSpan(st, tat, l.tau, now, cost)
	st.Remaining = left / l.interval
	return next
}

// windowStart returns the start of the fixed window holding now, and the
// stored window to use: a stored window later than now (the clock went
// backwards) is kept, so time moving backwards never resets a count.
func windowStart(now, window, stored int64) int64 {
	start := now - now%window
	return max(start, stored)
}

func (l *Limit) decideFixed(s *State, now, cost int64) (BucketState, State) {
	next := *s
	w := int64(l.window)
	a, count := s.A, s.B
	if !l.sameWindow(s) {
		a, count = 0, 0 // another window length: start afresh
	}
	start := windowStart(now, w, a)
	if start != a {
		count = 0
	}
	end := start + w
	// A count above the limit (a smaller limit now applies to it) leaves 0.
	st := BucketState{Remaining: max(l.burst-count, 0)}
	if count > 0 {
		st.ResetAfter = time.Duration(end - now)
	}
	switch {
	case cost == 0:
		st.Allowed = true
	case cost > l.burst:
		st.Reason = ReasonCostExceedsLimit
	case count+cost <= l.burst:
		st.Allowed = true
		st.Remaining -= cost
		st.ResetAfter = time.Duration(end - now)
		next.A, next.B, next.Span = start, count+cost, w
	default:
		st.Reason = ReasonLimited
		st.RetryAfter = time.Duration(end - now)
	}
	return st, next
}

// slidingEstimate is DESIGN's estimate prev*(1-elapsed/W) + cur, computed in
// this exact order of float64 operations so that every store (Lua numbers are
// doubles) gets the same bits. The explicit conversion stops the compiler from
// fusing the multiply and the divide.
func slidingEstimate(prev, cur, w, elapsed int64) float64 {
	return float64(float64(prev)*float64(w-elapsed))/float64(w) + float64(cur)
}

func slidingFits(prev, cur, w, elapsed, cost, limit int64) bool {
	return slidingEstimate(prev, cur, w, elapsed)+float64(cost) <= float64(limit)
}

func (l *Limit) decideSliding(s *State, now, cost int64) (BucketState, State) {
	next := *s
	w := int64(l.window)
	a, cur, prev := s.A, s.B, s.C
	if !l.sameWindow(s) {
		a, cur, prev = 0, 0, 0 // another window length: start afresh
	}
	start := windowStart(now, w, a)
	switch {
	case start == a:
	case start == a+w:
		prev, cur = cur, 0
	default:
		prev, cur = 0, 0
	}
	elapsed := max(now-start, 0)
	est := slidingEstimate(prev, cur, w, elapsed)
	st := BucketState{}
	remaining := func(used float64) int64 {
		r := float64(l.burst) - used
		if r <= 0 {
			return 0
		}
		return int64(r) // floor for positive values
	}
	resetAfter := func(cur, prev int64) time.Duration {
		switch {
		case cur > 0:
			return time.Duration(start + 2*w - now)
		case prev > 0:
			return time.Duration(start + w - now)
		}
		return 0
	}
	st.ResetAfter = resetAfter(cur, prev)
	st.Remaining = remaining(est)
	switch {
	case cost == 0:
		st.Allowed = true
	case cost > l.burst:
		st.Reason = ReasonCostExceedsLimit
	case slidingFits(prev, cur, w, elapsed, cost, l.burst):
		st.Allowed = true
		// What a read right after would see: the estimate with cur+cost.
		st.Remaining = remaining(slidingEstimate(prev, cur+cost, w, elapsed))
		st.ResetAfter = resetAfter(cur+cost, prev)
		next.A, next.B, next.C, next.Span = start, cur+cost, prev, w
	default:
		st.Reason = ReasonLimited
		unit := l.unit()
		if cur+cost <= l.burst {
			// Fits later in this window, once enough of prev has slid out.
			x := firstFit(elapsed, w, unit, func(x int64) bool { return slidingFits(prev, cur, w, x, cost, l.burst) })
			// From now, which may lie before start if the clock went back.
			st.RetryAfter = time.Duration(start + x - now)
		} else {
			// Fits in the next window, where this window's count is prev.
			x := firstFit(0, w, unit, func(x int64) bool { return slidingFits(cur, 0, w, x, cost, l.burst) })
			st.RetryAfter = time.Duration(start + w - now + x)
		}
	}
	return st, next
}

// firstFit returns the least x in [lo, hi] that is a multiple of unit with
// fits(x), for fits monotone (false then true), or hi when no smaller x
// fits; lo and hi are multiples of unit (the resolution the limit decides
// at, so that x is an instant it can decide at). It searches by bisection:
// the closed form in doubles can be off by hundreds of nanoseconds for long
// windows, and RetryAfter must never be earlier than the real refill.
func firstFit(lo, hi, unit int64, fits func(int64) bool) int64 {
	lo, hi = lo/unit, hi/unit
	for lo < hi {
		mid := lo + (hi-lo)/2
		if fits(mid * unit) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi * unit
}

func (l *Limit) decideLog(s *State, now, cost int64) (BucketState, State) {
	w := int64(l.window)
	// Entries at or before now-W have left the window.
	i := 0
	sum := s.B
	if !l.sameWindow(s) {
		i, sum = len(s.Log), 0 // another window length: start afresh
	}
	for i < len(s.Log) && s.Log[i].At <= now-w {
		sum -= s.Log[i].Cost
		i++
	}
	live := s.Log[i:]
	next := State{B: sum, Span: s.Span, Log: live}
	// A sum above the limit (a smaller limit now applies to it) leaves 0.
	st := BucketState{Remaining: max(l.burst-sum, 0)}
	if len(live) > 0 {
		st.ResetAfter = time.Duration(max(live[len(live)-1].At+w-now, 0))
	}
	switch {
	case cost == 0:
		st.Allowed = true
	case cost > l.burst:
		st.Reason = ReasonCostExceedsLimit
	case sum+cost <= l.burst:
		st.Allowed = true
		st.Remaining -= cost
		at := now
		if n := len(live); n > 0 && live[n-1].At > at {
			// The clock went backwards: record at the latest time seen, so
			// the entry leaves the window no earlier than it should.
			at = live[n-1].At
		}
		st.ResetAfter = time.Duration(at + w - now)
		next.B, next.Span = sum+cost, w
		next.A = at // Commit appends (A, cost) to the log
	default:
		st.Reason = ReasonLimited
		need := sum + cost - l.burst
		for _, e := range live {
			need -= e.Cost
			if need <= 0 {
				st.RetryAfter = time.Duration(e.At + w - now)
				break
			}
		}
	}
	return st, next
}
