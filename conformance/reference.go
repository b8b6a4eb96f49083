package conformance

import (
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// The reference models below restate DESIGN.md section 3 as plainly as
// possible, in exact integer and rational arithmetic, without GCRA or any of
// core's code: a token bucket's debt (the time it needs to be full again)
// that falls linearly, and lists of admitted requests that windows count.
// RunPropertySuite compares every store with them.
//
// "A denied request changes nothing" is taken literally: a model changes
// only when a request is admitted. With that rule, a clock that moves
// backwards needs no special case in the token bucket (the line through the
// last admission is extended backwards, so the debt rises and tokens fall,
// never rise); the windows never return to a window or an instant earlier
// than their latest admission, so a count once made is never forgotten.
//
// A model is told, with every request, the limit it is decided under, which
// may differ from the one its last admission was made under (core.Limit
// documents what a changed limit does): a token bucket keeps the share of
// its burst, by the documented float64 formula, and refills at its writer's
// pace until an admission under the new limit; a window keeps its count
// under a window of the same length and starts afresh under another. A
// limit longer than 100 days (core.Limit.Resolution) decides at the time
// truncated to the microsecond, with its interval between tokens rounded up
// to the microsecond.
//
// Not modelled: the rounding of a bucket's durations beyond 2^53ns to a
// double, which only an explicit time stepping back by days reaches.

// refModel is one bucket of a reference model.
type refModel interface {
	// answer is the bucket's own answer under l to a request of cost at now
	// (Unix ns), without changing the bucket.
	answer(l *core.Limit, now, cost int64) core.BucketState
	// admit records that a request of cost was admitted under l at now.
	admit(l *core.Limit, now, cost int64)
}

// newRefModel returns an empty model for l's algorithm, which must be
// validated.
func newRefModel(l *core.Limit) refModel {
	switch l.Algorithm() {
	case core.AlgTokenBucket, core.AlgShaping:
		return &refTokenBucket{}
	case core.AlgFixedWindow:
		return &refFixedWindow{}
	case core.AlgSlidingWindow:
		return &refSlidingWindow{}
	case core.AlgSlidingLog:
		return &refSlidingLog{}
	}
	panic(fmt.Sprintf("conformance: no reference model for %v", l.Algorithm()))
}

// refTake is a Take on reference models, models[i] decided under
// limits[i]: all or nothing. When a bucket denies, none admits, and each
// bucket that would have allowed reports its balance as it stands (its
// answer to cost 0).
func refTake(models []refModel, limits []*core.Limit, now, cost int64) []core.BucketState {
	out := make([]core.BucketState, len(models))
	ok := true
	for i, m := range models {
		out[i] = m.answer(limits[i], now, cost)
		ok = ok && out[i].Allowed
	}
	for i, m := range models {
		switch {
		case ok && cost > 0:
			m.admit(limits[i], now, cost)
		case !ok && out[i].Allowed:
			out[i] = m.answer(limits[i], now, 0)
		}
	}
	return out
}

// refUnit returns the resolution l decides at, in ns: 1, or 1000 for a
// limit longer than 100 days.
func refUnit(l *core.Limit) int64 { return int64(l.Resolution()) }

// refFloor returns t truncated to a multiple of unit (t >= 0).
func refFloor(t, unit int64) int64 { return t - t%unit }

// refCeil returns t rounded up to a multiple of unit (t >= 0).
func refCeil(t, unit int64) int64 { return (t + unit - 1) / unit * unit }

// refTB is what a token bucket or shaping limit says: its burst, the time
// between two tokens (Per/N rounded up to the nanosecond, and for a limit
// longer than 100 days to the microsecond, so that a rate is never
// exceeded), its fill time and its longest wait.
type refTB struct {
	burst, interval, tau, maxWait, unit int64
}

func refTBOf(l *core.Limit) refTB {
	r := l.Rate()
	unit := refUnit(l)
	interval := refCeil((int64(r.Per)+r.N-1)/r.N, unit)
	return refTB{burst: l.Burst(), interval: interval, tau: l.Burst() * interval, maxWait: int64(l.MaxWait()), unit: unit}
}

// refRescale is the documented share of a burst under a changed fill time:
// ceil(debt*to/from) in float64 operations in this order, rounded up to the
// microsecond, at most to.
func refRescale(debt, from, to int64) int64 {
	q := math.Ceil(float64(float64(debt)*float64(to)) / float64(from))
	if q >= float64(to) {
		return to
	}
	return min(refCeil(int64(q), 1000), to)
}

// refTokenBucket is DESIGN's token bucket: tokens(t) = b - debt(t)/T, where
// the debt, the time the bucket needs to be full, falls by one ns every ns
// from the last admission and is never negative; a request of cost c passes
// iff tokens >= c, that is debt + c*T <= b*T. As shaping (maxWait > 0) it
// also passes when the missing tokens refill within maxWait, and waits for
// them.
//
// With T a whole number of nanoseconds (core.Rate rounds it up), every
// duration the model gives is a whole number of nanoseconds.
type refTokenBucket struct {
	admitted bool  // false: never admitted, full
	w        refTB // the limit of the last admission
	at       int64 // its time
	debt     int64 // the debt just after it
}

// state returns what l sees at now: the instant it decides at (now, or at
// microsecond resolution now truncated to the microsecond), the time until
// the bucket is full then (at the pace of the last admission's limit), the
// debt under l (that time, or if l's fill time differs, the share of l's
// burst it stands for), and whether l's fill time differs.
func (m *refTokenBucket) state(c refTB, now int64) (at, until, debt int64, changed bool) {
	changed = m.admitted && m.w.tau != c.tau
	at = refFloor(now, c.unit)
	if m.admitted {
		until = max(refCeil(m.at+m.debt, c.unit)-at, 0)
	}
	debt = until
	if changed && until > 0 {
		debt = refRescale(refCeil(until, 1000), m.w.tau, c.tau)
	}
	return at, until, debt, changed
}

func (m *refTokenBucket) answer(l *core.Limit, now, cost int64) core.BucketState {
	c := refTBOf(l)
	_, until, debt, changed := m.state(c, now)
	tokens := func(d int64) int64 { return max(c.tau-d, 0) / c.interval } // whole tokens
	st := core.BucketState{Remaining: tokens(debt), ResetAfter: time.Duration(until)}
	need := cost * c.interval
	short := debt + need - c.tau // the time until the cost fits, at l's pace
	switch {
	case cost == 0:
		st.Allowed = true
	case cost > c.burst:
		st.Reason = core.ReasonCostExceedsLimit
	case short <= c.maxWait:
		st.Allowed = true
		st.Remaining = tokens(debt + need)
		st.ResetAfter = time.Duration(debt + need)
		st.Delay = time.Duration(max(short, 0))
	case !changed:
		st.Reason = core.ReasonLimited
		st.RetryAfter = time.Duration(short - c.maxWait)
	default:
		// The time until full falls at the writer's pace: find the largest
		// whole microsecond of it whose share leaves room for the cost.
		room := c.tau + c.maxWait - need
		lo, hi := int64(0), refCeil(until, 1000)/1000
		for lo < hi {
			mid := hi - (hi-lo)/2
			if refRescale(mid*1000, m.w.tau, c.tau) <= room {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		st.Reason = core.ReasonLimited
		st.RetryAfter = time.Duration(until - lo*1000)
	}
	return st
}

func (m *refTokenBucket) admit(l *core.Limit, now, cost int64) {
	c := refTBOf(l)
	at, _, debt, _ := m.state(c, now)
	m.admitted, m.w, m.at, m.debt = true, c, at, debt+cost*c.interval
}

// refWindow is what a window limit says.
type refWindow struct{ limit, window, unit int64 }

func refWindowOf(l *core.Limit) refWindow {
	return refWindow{limit: l.Burst(), window: int64(l.Window()), unit: refUnit(l)}
}

// refFixedWindow counts admitted costs per epoch-aligned window. It never
// returns to a window earlier than its latest admission's. Under a window
// of another length it is empty.
type refFixedWindow struct {
	window int64           // the window of the admissions; 0: none yet
	counts map[int64]int64 // window index -> admitted cost
	last   int64           // latest admission time; meaningful when window > 0
}

// view returns the counts and latest admission l sees: none under another
// window length.
func (m *refFixedWindow) view(c refWindow) (map[int64]int64, int64) {
	if m.window != c.window {
		return nil, -1
	}
	return m.counts, m.last
}

func (m *refFixedWindow) answer(l *core.Limit, now, cost int64) core.BucketState {
	c := refWindowOf(l)
	now = refFloor(now, c.unit)
	counts, last := m.view(c)
	i := max(now, last) / c.window
	count := counts[i]
	end := (i + 1) * c.window
	st := core.BucketState{Remaining: max(c.limit-count, 0)}
	if count > 0 {
		st.ResetAfter = time.Duration(end - now)
	}
	switch {
	case cost == 0:
		st.Allowed = true
	case cost > c.limit:
		st.Reason = core.ReasonCostExceedsLimit
	case count+cost <= c.limit:
		st.Allowed = true
		st.Remaining = c.limit - count - cost
		st.ResetAfter = time.Duration(end - now)
	default:
		// The next window starts empty.
		st.Reason = core.ReasonLimited
		st.RetryAfter = time.Duration(end - now)
	}
	return st
}

func (m *refFixedWindow) admit(l *core.Limit, now, cost int64) {
	c := refWindowOf(l)
	now = refFloor(now, c.unit)
	if m.window != c.window {
		m.window, m.counts, m.last = c.window, map[int64]int64{}, -1
	}
	m.last = max(now, m.last)
	m.counts[m.last/c.window] += cost
}

// refSlidingLog keeps every admitted request and counts those of the last
// window. An admission is recorded at the latest admission time if the
// clock went back before it, and the window never slides back past it.
// Under a window of another length it is empty.
type refSlidingLog struct {
	window int64 // the window of the admissions; 0: none yet
	log    []refEntry
	last   int64 // latest admission time
}

type refEntry struct{ at, cost int64 }

// live returns the admitted requests that l sees inside the window at now,
// oldest first, and the sum of their costs.
func (m *refSlidingLog) live(c refWindow, now int64) ([]refEntry, int64, int64) {
	if m.window != c.window {
		return nil, 0, -1
	}
	from := max(now, m.last) - c.window // entries at or before from are out
	var out []refEntry
	var sum int64
	for _, e := range m.log {
		if e.at > from {
			out = append(out, e)
			sum += e.cost
		}
	}
	return out, sum, m.last
}

func (m *refSlidingLog) answer(l *core.Limit, now, cost int64) core.BucketState {
	c := refWindowOf(l)
	now = refFloor(now, c.unit)
	live, sum, last := m.live(c, now)
	st := core.BucketState{Remaining: max(c.limit-sum, 0)}
	if len(live) > 0 {
		st.ResetAfter = time.Duration(live[len(live)-1].at + c.window - now)
	}
	switch {
	case cost == 0:
		st.Allowed = true
	case cost > c.limit:
		st.Reason = core.ReasonCostExceedsLimit
	case sum+cost <= c.limit:
		st.Allowed = true
		st.Remaining = c.limit - sum - cost
		st.ResetAfter = time.Duration(max(now, last) + c.window - now)
	default:
		// Wait until enough of the oldest requests have left.
		st.Reason = core.ReasonLimited
		need := sum + cost - c.limit
		for _, e := range live {
			if need -= e.cost; need <= 0 {
				st.RetryAfter = time.Duration(e.at + c.window - now)
				break
			}
		}
	}
	return st
}

func (m *refSlidingLog) admit(l *core.Limit, now, cost int64) {
	c := refWindowOf(l)
	now = refFloor(now, c.unit)
	if m.window != c.window {
		m.window, m.log, m.last = c.window, nil, -1
	}
	m.last = max(now, m.last)
	m.log = append(m.log, refEntry{m.last, cost})
}

// refSlidingWindow is DESIGN's sliding window counter: with p the previous
// fixed window's count, c the current one's and e the elapsed share of the
// current window, a cost n passes iff p*(1-e) + c + n <= limit. Windows
// never go back past the latest admission's; before the current window has
// started (the clock went back), none of it has elapsed. Under a window of
// another length it is empty.
type refSlidingWindow struct {
	window int64           // the window of the admissions; 0: none yet
	counts map[int64]int64 // window start -> admitted cost
	last   int64           // latest admission time
}

// at returns the current window's start, its count and the previous one's.
func (m *refSlidingWindow) at(c refWindow, now int64) (start, cur, prev int64) {
	counts, last := m.counts, m.last
	if m.window != c.window {
		counts, last = nil, -1
	}
	start = max(now, last)
	start -= start % c.window
	return start, counts[start], counts[start-c.window]
}

// estimate is p*(1-e) + c at now, exactly.
func (m *refSlidingWindow) estimate(c refWindow, now int64) *big.Rat {
	start, cur, prev := m.at(c, now)
	left := big.NewRat(c.window-max(now-start, 0), c.window) // of the current window
	est := left.Mul(left, big.NewRat(prev, 1))
	return est.Add(est, big.NewRat(cur, 1))
}

func (m *refSlidingWindow) answer(l *core.Limit, now, cost int64) core.BucketState {
	c := refWindowOf(l)
	now = refFloor(now, c.unit)
	start, cur, prev := m.at(c, now)
	est := m.estimate(c, now)
	limit := big.NewRat(c.limit, 1)
	st := core.BucketState{Remaining: floorNonNeg(new(big.Rat).Sub(limit, est))}
	// Full again when no admitted cost weighs any more.
	switch {
	case cur > 0:
		st.ResetAfter = time.Duration(start + 2*c.window - now)
	case prev > 0:
		st.ResetAfter = time.Duration(start + c.window - now)
	}
	fits := new(big.Rat).Add(est, big.NewRat(cost, 1)).Cmp(limit) <= 0
	switch {
	case cost == 0:
		st.Allowed = true
	case cost > c.limit:
		st.Reason = core.ReasonCostExceedsLimit
	case fits:
		st.Allowed = true
		st.Remaining = floorNonNeg(new(big.Rat).Sub(limit, new(big.Rat).Add(est, big.NewRat(cost, 1))))
		st.ResetAfter = time.Duration(start + 2*c.window - now)
	default:
		st.Reason = core.ReasonLimited
		st.RetryAfter = time.Duration(m.firstFit(c, start, cur, prev, cost) - now)
	}
	return st
}

func (m *refSlidingWindow) admit(l *core.Limit, now, cost int64) {
	c := refWindowOf(l)
	now = refFloor(now, c.unit)
	if m.window != c.window {
		m.window, m.counts, m.last = c.window, map[int64]int64{}, -1
	}
	m.last = max(now, m.last)
	m.counts[m.last-m.last%c.window] += cost
}

// firstFit returns the first instant at which cost fits if nothing else is
// admitted: later in the current window once enough of prev has slid out,
// or else in the next window, where cur becomes the previous count. In a
// window of start s with previous count p and current count c, cost fits at
// s+x iff p*(w-x)/w <= limit-c-cost, that is x >= w - (limit-c-cost)*w/p;
// a limit longer than 100 days decides at whole microseconds only.
func (m *refSlidingWindow) firstFit(c refWindow, start, cur, prev, cost int64) int64 {
	w := c.window
	firstX := func(p, cu int64) int64 {
		room := new(big.Rat).Mul(big.NewRat(c.limit-cu-cost, p), big.NewRat(w, 1))
		return refCeil(max(ceilRat(room.Sub(big.NewRat(w, 1), room)), 0), c.unit)
	}
	if room := c.limit - cur - cost; room >= 0 {
		// prev > 0 here: with prev = 0 the cost would fit now.
		return start + firstX(prev, cur)
	}
	return start + w + firstX(cur, 0)
}

// floorNonNeg is floor(max(x, 0)).
func floorNonNeg(x *big.Rat) int64 {
	if x.Sign() <= 0 {
		return 0
	}
	return new(big.Int).Quo(x.Num(), x.Denom()).Int64()
}

// ceilRat returns the least integer >= x.
func ceilRat(x *big.Rat) int64 {
	q, r := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}
