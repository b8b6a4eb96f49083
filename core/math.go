package core

import "time"

// The bucket math is pure: a limit, a state, the current time and a cost in; a
// BucketState and the next state out. Times are int64 Unix nanoseconds in
// [0, MaxTime()], so no sum below overflows (see maxSpan).

// State is the stored state of one bucket, in the units of its algorithm. The
// zero value is a new bucket, which is full. Stores other than the in-memory
// one keep the same fields under their own encoding:
//
//	token bucket, shaping: A = theoretical arrival time (GCRA), Unix ns
//	fixed window:          A = window start, B = count in that window
//	sliding window:        A = current window start, B = its count, C = previous window's count
//	sliding log:           Log = admitted (time, cost) in time order, B = their sum
//
// A State is not safe for concurrent use: stores serialize access to each
// bucket's.
type State struct {
	A, B, C int64      // per algorithm, as above; times in Unix ns
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
// a new bucket and can be dropped: for a token bucket, when it is full again;
// 0 for a window or log that holds nothing.
func (l *Limit) ExpiresAt(s *State) int64 {
	switch l.alg {
	case AlgTokenBucket, AlgShaping:
		return s.A
	case AlgFixedWindow:
		if s.B == 0 {
			return 0
		}
		return s.A + int64(l.window)
	case AlgSlidingWindow:
		switch {
		case s.B > 0:
			return s.A + 2*int64(l.window)
		case s.C > 0:
			return s.A + int64(l.window)
		}
		return 0
	case AlgSlidingLog:
		if len(s.Log) == 0 {
			return 0
		}
		return s.Log[len(s.Log)-1].At + int64(l.window)
	}
	return 0
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
// holds (tau - debt)/T tokens, debt = max(TAT-now, 0). A cost c fits iff
// debt + c*T <= tau; then TAT = now + debt + c*T. Both sides are at most
// maxSpan, so nothing overflows and every value is exact in a double.
func (l *Limit) decideBucket(s *State, now, cost int64) (BucketState, State) {
	next := *s
	var st BucketState
	st, next.A = l.gcra(s.A, now, cost)
	return st, next
}

// gcra decides a token bucket or shaping limit whose theoretical arrival
// time is tat, and returns the answer and the next tat (unchanged unless
// allowed with cost > 0).
func (l *Limit) gcra(tat, now, cost int64) (BucketState, int64) {
	st, left, next := l.gcraSpan(tat, now, cost)
	st.Remaining = left / l.interval
	return st, next
}

// gcraSpan is gcra without its one division: it leaves st.Remaining unset
// and returns the span, in ns, that Remaining is the whole number of
// intervals of. The memory store divides after unlocking the bucket, which
// keeps a hot bucket's lock held for less time.
func (l *Limit) gcraSpan(tat, now, cost int64) (st BucketState, left, next int64) {
	debt := max(tat-now, 0)
	room := l.tau - debt // negative only if the clock went backwards
	st = BucketState{ResetAfter: time.Duration(debt)}
	need := cost * l.interval
	wait := need - room // > 0: the cost does not fit now
	if cost == 0 || cost > l.burst {
		st.Allowed = cost == 0
		if !st.Allowed {
			st.Reason = ReasonCostExceedsLimit
		}
		return st, max(room, 0), tat
	}
	if wait <= 0 || (l.alg == AlgShaping && wait <= int64(l.maxWait)) {
		st.Allowed = true
		if wait > 0 {
			st.Delay = time.Duration(wait)
		}
		st.ResetAfter = time.Duration(debt + need)
		return st, max(room-need, 0), now + debt + need
	}
	st.Reason = ReasonLimited
	st.RetryAfter = time.Duration(wait)
	if l.alg == AlgShaping {
		// A shaping bucket admits, with a delay, as soon as the wait is
		// within MaxWait.
		st.RetryAfter = time.Duration(wait - int64(l.maxWait))
	}
	return st, max(room, 0), tat
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
	start := windowStart(now, w, s.A)
	count := s.B
	if start != s.A {
		count = 0
	}
	end := start + w
	st := BucketState{Remaining: l.burst - count}
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
		next.A, next.B = start, count+cost
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
	start := windowStart(now, w, s.A)
	cur, prev := s.B, s.C
	switch {
	case start == s.A:
	case start == s.A+w:
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
		next.A, next.B, next.C = start, cur+cost, prev
	default:
		st.Reason = ReasonLimited
		if cur+cost <= l.burst {
			// Fits later in this window, once enough of prev has slid out.
			x := firstFit(elapsed, w, func(x int64) bool { return slidingFits(prev, cur, w, x, cost, l.burst) })
			// From now, which may lie before start if the clock went back.
			st.RetryAfter = time.Duration(start + x - now)
		} else {
			// Fits in the next window, where this window's count is prev.
			x := firstFit(0, w, func(x int64) bool { return slidingFits(cur, 0, w, x, cost, l.burst) })
			st.RetryAfter = time.Duration(start + w - now + x)
		}
	}
	return st, next
}

// firstFit returns the least x in [lo, hi] with fits(x), for fits monotone
// (false then true), or hi when no smaller x fits. It searches by bisection:
// the closed form in doubles can be off by hundreds of nanoseconds for long
// windows, and RetryAfter must never be earlier than the real refill.
func firstFit(lo, hi int64, fits func(int64) bool) int64 {
	for lo < hi {
		mid := lo + (hi-lo)/2
		if fits(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi
}

func (l *Limit) decideLog(s *State, now, cost int64) (BucketState, State) {
	w := int64(l.window)
	// Entries at or before now-W have left the window.
	i := 0
	sum := s.B
	for i < len(s.Log) && s.Log[i].At <= now-w {
		sum -= s.Log[i].Cost
		i++
	}
	live := s.Log[i:]
	next := State{B: sum, Log: live}
	st := BucketState{Remaining: l.burst - sum}
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
		next.B = sum + cost
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
