package conformance

import (
	"fmt"
	"math/big"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// The reference models below restate DESIGN.md section 3 as plainly as
// possible, in exact rational arithmetic, without GCRA or any of core's
// code: a token count that refills linearly, and lists of admitted requests
// that windows count. RunPropertySuite compares every store with them.
//
// "A denied request changes nothing" is taken literally: a model changes
// only when a request is admitted. With that rule, a clock that moves
// backwards needs no special case in the token bucket (the line through the
// last admission is extended backwards, so tokens fall, never rise); the
// windows never return to a window or an instant earlier than their latest
// admission, so a count once made is never forgotten.

// refModel is one bucket of a reference model.
type refModel interface {
	// answer is the bucket's own answer to a request of cost at now (Unix
	// ns), without changing the bucket.
	answer(now, cost int64) core.BucketState
	// admit records that a request of cost was admitted at now.
	admit(now, cost int64)
}

// newRefModel returns the model of l, which must be validated.
func newRefModel(l *core.Limit) refModel {
	switch l.Algorithm() {
	case core.AlgTokenBucket, core.AlgShaping:
		// core.Rate keeps the time between tokens in whole nanoseconds,
		// Per/N rounded up, so that a rate is never exceeded.
		r := l.Rate()
		interval := (int64(r.Per) + r.N - 1) / r.N
		return &refTokenBucket{
			burst:   big.NewRat(l.Burst(), 1),
			rate:    big.NewRat(1, interval),
			maxWait: int64(l.MaxWait()),
		}
	case core.AlgFixedWindow:
		return &refFixedWindow{limit: l.Burst(), window: int64(l.Window()), counts: map[int64]int64{}, last: -1}
	case core.AlgSlidingWindow:
		return &refSlidingWindow{limit: l.Burst(), window: int64(l.Window()), counts: map[int64]int64{}, last: -1}
	case core.AlgSlidingLog:
		return &refSlidingLog{limit: l.Burst(), window: int64(l.Window()), last: -1}
	}
	panic(fmt.Sprintf("conformance: no reference model for %v", l.Algorithm()))
}

// refTake is a Take on reference models: all or nothing. When a bucket
// denies, none admits, and each bucket that would have allowed reports its
// balance as it stands (its answer to cost 0).
func refTake(models []refModel, now, cost int64) []core.BucketState {
	out := make([]core.BucketState, len(models))
	ok := true
	for i, m := range models {
		out[i] = m.answer(now, cost)
		ok = ok && out[i].Allowed
	}
	for i, m := range models {
		switch {
		case ok && cost > 0:
			m.admit(now, cost)
		case !ok && out[i].Allowed:
			out[i] = m.answer(now, 0)
		}
	}
	return out
}

// refTokenBucket is DESIGN's token bucket: tokens(t) = min(b, tokens(t0) +
// (t-t0)*r), with t0 the last admission; a request of cost c passes iff
// tokens >= c. As shaping (maxWait > 0) it also passes when the missing
// tokens refill within maxWait, and waits for them.
//
// r is one token per Per/N rounded up to the nanosecond, as core.Rate
// documents; with that, every duration the model gives is a whole number of
// nanoseconds. RunPropertySuite draws rates whose Per/N is whole anyway, so
// the rounding is not what it compares.
type refTokenBucket struct {
	burst   *big.Rat
	rate    *big.Rat // tokens per nanosecond
	maxWait int64

	admitted bool     // false: never admitted, full
	tokens   *big.Rat // just after the last admission; may be negative for shaping
	at       int64    // the last admission's time
}

// tokensAt returns the balance at now.
func (m *refTokenBucket) tokensAt(now int64) *big.Rat {
	if !m.admitted {
		return new(big.Rat).Set(m.burst)
	}
	t := new(big.Rat).Mul(big.NewRat(now-m.at, 1), m.rate)
	t.Add(t, m.tokens)
	if t.Cmp(m.burst) > 0 {
		t.Set(m.burst)
	}
	return t
}

// refillTime returns how long n tokens take to refill, in whole nanoseconds.
func (m *refTokenBucket) refillTime(n *big.Rat) time.Duration {
	d := new(big.Rat).Quo(n, m.rate)
	if !d.IsInt() {
		panic(fmt.Sprintf("conformance: %v tokens take %v ns at %v per ns: not a whole interval", n, d, m.rate))
	}
	return time.Duration(d.Num().Int64())
}

// floorNonNeg is floor(max(x, 0)).
func floorNonNeg(x *big.Rat) int64 {
	if x.Sign() <= 0 {
		return 0
	}
	return new(big.Int).Quo(x.Num(), x.Denom()).Int64()
}

func (m *refTokenBucket) answer(now, cost int64) core.BucketState {
	tokens := m.tokensAt(now)
	missing := new(big.Rat).Sub(m.burst, tokens) // until full
	st := core.BucketState{Remaining: floorNonNeg(tokens), ResetAfter: m.refillTime(missing)}
	c := big.NewRat(cost, 1)
	short := new(big.Rat).Sub(c, tokens) // tokens still missing for cost
	switch {
	case cost == 0:
		st.Allowed = true
	case c.Cmp(m.burst) > 0:
		st.Reason = core.ReasonCostExceedsLimit
	case short.Sign() <= 0 || int64(m.refillTime(short)) <= m.maxWait:
		after := new(big.Rat).Sub(tokens, c)
		st.Allowed = true
		st.Remaining = floorNonNeg(after)
		st.ResetAfter = m.refillTime(new(big.Rat).Sub(m.burst, after))
		if short.Sign() > 0 {
			st.Delay = m.refillTime(short)
		}
	default:
		st.Reason = core.ReasonLimited
		st.RetryAfter = m.refillTime(short) - time.Duration(m.maxWait)
	}
	return st
}

func (m *refTokenBucket) admit(now, cost int64) {
	t := m.tokensAt(now)
	m.tokens = t.Sub(t, big.NewRat(cost, 1))
	m.admitted, m.at = true, now
}

// refFixedWindow counts admitted costs per epoch-aligned window. It never
// returns to a window earlier than its latest admission's.
type refFixedWindow struct {
	limit, window int64
	counts        map[int64]int64 // window index -> admitted cost
	last          int64           // latest admission time, -1: none
}

func (m *refFixedWindow) answer(now, cost int64) core.BucketState {
	i := max(now, m.last) / m.window
	count := m.counts[i]
	end := (i + 1) * m.window
	st := core.BucketState{Remaining: m.limit - count}
	if count > 0 {
		st.ResetAfter = time.Duration(end - now)
	}
	switch {
	case cost == 0:
		st.Allowed = true
	case cost > m.limit:
		st.Reason = core.ReasonCostExceedsLimit
	case count+cost <= m.limit:
		st.Allowed = true
		st.Remaining -= cost
		st.ResetAfter = time.Duration(end - now)
	default:
		// The next window starts empty.
		st.Reason = core.ReasonLimited
		st.RetryAfter = time.Duration(end - now)
	}
	return st
}

func (m *refFixedWindow) admit(now, cost int64) {
	m.last = max(now, m.last)
	m.counts[m.last/m.window] += cost
}

// refSlidingLog keeps every admitted request and counts those of the last
// window. An admission is recorded at the latest admission time if the
// clock went back before it, and the window never slides back past it.
type refSlidingLog struct {
	limit, window int64
	log           []refEntry
	last          int64 // latest admission time, -1: none
}

type refEntry struct{ at, cost int64 }

// live returns the admitted requests still inside the window at now, oldest
// first, and the sum of their costs.
func (m *refSlidingLog) live(now int64) ([]refEntry, int64) {
	from := max(now, m.last) - m.window // entries at or before from are out
	var out []refEntry
	var sum int64
	for _, e := range m.log {
		if e.at > from {
			out = append(out, e)
			sum += e.cost
		}
	}
	return out, sum
}

func (m *refSlidingLog) answer(now, cost int64) core.BucketState {
	live, sum := m.live(now)
	st := core.BucketState{Remaining: m.limit - sum}
	if len(live) > 0 {
		st.ResetAfter = time.Duration(live[len(live)-1].at + m.window - now)
	}
	switch {
	case cost == 0:
		st.Allowed = true
	case cost > m.limit:
		st.Reason = core.ReasonCostExceedsLimit
	case sum+cost <= m.limit:
		st.Allowed = true
		st.Remaining -= cost
		st.ResetAfter = time.Duration(max(now, m.last) + m.window - now)
	default:
		// Wait until enough of the oldest requests have left.
		st.Reason = core.ReasonLimited
		need := sum + cost - m.limit
		for _, e := range live {
			if need -= e.cost; need <= 0 {
				st.RetryAfter = time.Duration(e.at + m.window - now)
				break
			}
		}
	}
	return st
}

func (m *refSlidingLog) admit(now, cost int64) {
	m.last = max(now, m.last)
	m.log = append(m.log, refEntry{m.last, cost})
}

// refSlidingWindow is DESIGN's sliding window counter: with p the previous
// fixed window's count, c the current one's and e the elapsed share of the
// current window, a cost n passes iff p*(1-e) + c + n <= limit. Windows
// never go back past the latest admission's; before the current window has
// started (the clock went back), none of it has elapsed.
type refSlidingWindow struct {
	limit, window int64
	counts        map[int64]int64 // window start -> admitted cost
	last          int64           // latest admission time, -1: none
}

// at returns the current window's start, its count and the previous one's.
func (m *refSlidingWindow) at(now int64) (start, cur, prev int64) {
	start = max(now, m.last)
	start -= start % m.window
	return start, m.counts[start], m.counts[start-m.window]
}

// estimate is p*(1-e) + c at now, exactly.
func (m *refSlidingWindow) estimate(now int64) *big.Rat {
	start, cur, prev := m.at(now)
	left := big.NewRat(m.window-max(now-start, 0), m.window) // of the current window
	est := left.Mul(left, big.NewRat(prev, 1))
	return est.Add(est, big.NewRat(cur, 1))
}

func (m *refSlidingWindow) answer(now, cost int64) core.BucketState {
	start, cur, prev := m.at(now)
	est := m.estimate(now)
	limit := big.NewRat(m.limit, 1)
	st := core.BucketState{Remaining: floorNonNeg(new(big.Rat).Sub(limit, est))}
	// Full again when no admitted cost weighs any more.
	switch {
	case cur > 0:
		st.ResetAfter = time.Duration(start + 2*m.window - now)
	case prev > 0:
		st.ResetAfter = time.Duration(start + m.window - now)
	}
	fits := new(big.Rat).Add(est, big.NewRat(cost, 1)).Cmp(limit) <= 0
	switch {
	case cost == 0:
		st.Allowed = true
	case cost > m.limit:
		st.Reason = core.ReasonCostExceedsLimit
	case fits:
		st.Allowed = true
		st.Remaining = floorNonNeg(new(big.Rat).Sub(limit, new(big.Rat).Add(est, big.NewRat(cost, 1))))
		st.ResetAfter = time.Duration(start + 2*m.window - now)
	default:
		st.Reason = core.ReasonLimited
		st.RetryAfter = time.Duration(m.firstFit(start, cur, prev, cost) - now)
	}
	return st
}

func (m *refSlidingWindow) admit(now, cost int64) {
	m.last = max(now, m.last)
	m.counts[m.last-m.last%m.window] += cost
}

// firstFit returns the first instant at which cost fits if nothing else is
// admitted: later in the current window once enough of prev has slid out,
// or else in the next window, where cur becomes the previous count. In a
// window of start s with previous count p and current count c, cost fits at
// s+x iff p*(w-x)/w <= limit-c-cost, that is x >= w - (limit-c-cost)*w/p.
func (m *refSlidingWindow) firstFit(start, cur, prev, cost int64) int64 {
	w := m.window
	firstX := func(p, c int64) int64 {
		room := new(big.Rat).Mul(big.NewRat(m.limit-c-cost, p), big.NewRat(w, 1))
		return ceilRat(room.Sub(big.NewRat(w, 1), room))
	}
	if room := m.limit - cur - cost; room >= 0 {
		// prev > 0 here: with prev = 0 the cost would fit now.
		return start + firstX(prev, cur)
	}
	return start + w + max(firstX(cur, 0), 0)
}

// ceilRat returns the least integer >= x.
func ceilRat(x *big.Rat) int64 {
	q, r := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}
