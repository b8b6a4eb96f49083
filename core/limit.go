package core

import (
	"fmt"
	"math"
	"time"
)

// Rate is a refill rate: N tokens every Per. The zero value is invalid.
//
// A rate is exact: the time between two tokens, Per/N, is kept in whole
// nanoseconds and rounded up, so a rate is never exceeded; the rounding costs
// less than one nanosecond per token. Rates up to 1e9 tokens per second can be
// expressed; a bucket's time to fill from empty (burst/rate) is at most
// MaxSpan.
type Rate struct {
	N   int64         // tokens added every Per; must be >= 1
	Per time.Duration // the period; must be > 0
}

// PerSecond returns a rate of n tokens per second.
func PerSecond(n int64) Rate { return Rate{N: n, Per: time.Second} }

// PerMinute returns a rate of n tokens per minute.
func PerMinute(n int64) Rate { return Rate{N: n, Per: time.Minute} }

// PerHour returns a rate of n tokens per hour.
func PerHour(n int64) Rate { return Rate{N: n, Per: time.Hour} }

// PerDay returns a rate of n tokens per 24 hours.
func PerDay(n int64) Rate { return Rate{N: n, Per: 24 * time.Hour} }

// Every returns a rate of one token every d.
func Every(d time.Duration) Rate { return Rate{N: 1, Per: d} }

// RateFromFloat converts a rate given in tokens per second, as configuration
// files write it, into a Rate. It returns an error wrapping ErrInvalidRate for
// zero, negative, NaN or infinite rates and for rates above 1e9 per second.
func RateFromFloat(perSecond float64) (Rate, error) {
	switch {
	case math.IsNaN(perSecond) || math.IsInf(perSecond, 0):
		return Rate{}, fmt.Errorf("%w: %v per second is not a finite number", ErrInvalidRate, perSecond)
	case perSecond <= 0:
		return Rate{}, fmt.Errorf("%w: must be > 0, got %v per second", ErrInvalidRate, perSecond)
	case perSecond > maxPerSecond:
		return Rate{}, fmt.Errorf("%w: must be at most 1e9 per second, got %v", ErrInvalidRate, perSecond)
	}
	if perSecond == math.Trunc(perSecond) {
		return PerSecond(int64(perSecond)), nil
	}
	// One token every 1/perSecond seconds, rounded up to the nanosecond so the
	// configured rate is never exceeded.
	per := math.Ceil(1e9 / perSecond)
	if per > math.MaxInt64 {
		return Rate{}, fmt.Errorf("%w: %v per second is too slow to express", ErrInvalidRate, perSecond)
	}
	return Every(time.Duration(per)), nil
}

const maxPerSecond = 1e9

// interval returns the emission interval Per/N rounded up to the nanosecond,
// or an error naming what is wrong with the rate.
func (r Rate) interval() (int64, error) {
	switch {
	case r.N <= 0:
		return 0, fmt.Errorf("%w: token count must be > 0, got %d", ErrInvalidRate, r.N)
	case r.Per <= 0:
		return 0, fmt.Errorf("%w: period must be > 0, got %v", ErrInvalidRate, r.Per)
	case int64(r.Per) < r.N:
		return 0, fmt.Errorf("%w: %d per %v is above 1e9 per second", ErrInvalidRate, r.N, r.Per)
	}
	t := int64(r.Per) / r.N
	if int64(r.Per)%r.N != 0 {
		t++
	}
	return t, nil
}

// String formats the rate as "10/1s".
func (r Rate) String() string { return fmt.Sprintf("%d/%v", r.N, r.Per) }

// Algorithm selects how a rule counts requests. The zero value is no
// algorithm: the zero Limit has it, and NewPolicy rejects it.
type Algorithm uint8

// The algorithms. Their exact semantics are in the package documentation.
const (
	// AlgTokenBucket refills Rate continuously up to Burst; a request is allowed
	// when the bucket holds its cost. The default.
	AlgTokenBucket Algorithm = iota + 1
	// AlgShaping is a token bucket that delays a request into its slot, up to
	// MaxWait, instead of denying it: a leaky bucket used as a queue.
	AlgShaping
	// AlgFixedWindow allows Limit per Window, windows aligned to the Unix epoch.
	AlgFixedWindow
	// AlgSlidingWindow weights the previous fixed window by the share of it
	// still inside the sliding window and adds the current one.
	AlgSlidingWindow
	// AlgSlidingLog counts exactly the costs admitted in the last Window.
	AlgSlidingLog
)

// String returns the algorithm's name as configuration files spell it.
func (a Algorithm) String() string {
	switch a {
	case AlgTokenBucket:
		return "token_bucket"
	case AlgShaping:
		return "shaping"
	case AlgFixedWindow:
		return "fixed_window"
	case AlgSlidingWindow:
		return "sliding_window"
	case AlgSlidingLog:
		return "sliding_log"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Limit is an algorithm with its numbers. Build one with TokenBucket,
// Shaping, FixedWindow, SlidingWindow or SlidingLog; the zero value is
// invalid and is rejected by NewPolicy. A Limit is a small immutable value.
type Limit struct {
	alg     Algorithm
	rate    Rate
	burst   int64 // capacity, or the count allowed per window
	window  time.Duration
	maxWait time.Duration

	// Derived by validate.
	interval int64 // token bucket: ns between tokens (T)
	tau      int64 // token bucket: ns to fill from empty (burst*T)
}

// TokenBucket returns a token bucket that refills at rate up to burst tokens.
// A new bucket is full. For example TokenBucket(PerSecond(10), 50) allows a
// burst of 50 and 10 per second sustained.
func TokenBucket(rate Rate, burst int64) Limit {
	return Limit{alg: AlgTokenBucket, rate: rate, burst: burst}
}

// Shaping returns a token bucket that, instead of denying a request, delays
// it until its tokens have refilled, as long as the delay is at most maxWait.
// Requests are served in the order they arrive. Past maxWait it denies.
func Shaping(rate Rate, burst int64, maxWait time.Duration) Limit {
	return Limit{alg: AlgShaping, rate: rate, burst: burst, maxWait: maxWait}
}

// FixedWindow returns a limit of limit per window, with windows aligned to the
// Unix epoch (a one-minute window starts on every whole minute).
func FixedWindow(limit int64, window time.Duration) Limit {
	return Limit{alg: AlgFixedWindow, burst: limit, window: window}
}

// SlidingWindow returns the sliding window counter: with the previous fixed
// window's count p, the current one's c and the elapsed share e of the current
// window, a request of cost n is allowed iff p*(1-e) + c + n <= limit.
func SlidingWindow(limit int64, window time.Duration) Limit {
	return Limit{alg: AlgSlidingWindow, burst: limit, window: window}
}

// SlidingLog returns an exact sliding window: the costs admitted in
// (now-window, now] never exceed limit. It keeps one entry per admitted
// request, so its memory grows with limit.
func SlidingLog(limit int64, window time.Duration) Limit {
	return Limit{alg: AlgSlidingLog, burst: limit, window: window}
}

// Algorithm returns the limit's algorithm.
func (l Limit) Algorithm() Algorithm { return l.alg }

// Rate returns the refill rate of a token bucket or shaping limit.
func (l Limit) Rate() Rate { return l.rate }

// Burst returns the capacity of a token bucket, or the count allowed per
// window for the window algorithms.
func (l Limit) Burst() int64 { return l.burst }

// Window returns the window of a window algorithm, or, for a token bucket,
// the time to refill from empty (burst / rate).
func (l Limit) Window() time.Duration {
	if l.isBucket() {
		return time.Duration(l.tau)
	}
	return l.window
}

// MaxWait returns the longest delay of a shaping limit.
func (l Limit) MaxWait() time.Duration { return l.maxWait }

// Interval returns the time between two tokens of a token bucket or shaping
// limit (Per/N rounded up to the nanosecond), and 0 for the window algorithms.
func (l Limit) Interval() time.Duration { return time.Duration(l.interval) }

func (l Limit) isBucket() bool { return l.alg == AlgTokenBucket || l.alg == AlgShaping }

// MaxSpan bounds every duration a limit can produce: a token bucket's fill
// time plus its maximum wait, and a window. It keeps every duration the math
// handles below 2^53 ns, so that the Redis scripts, whose numbers are IEEE
// doubles, compute them exactly and decide exactly as the memory store does.
const MaxSpan = 100 * 24 * time.Hour

const maxSpan = MaxSpan

// maxTime is MaxTime's answer: int64 Unix nanoseconds leave room for two
// maxSpan after it. It is never written.
var maxTime = time.Unix(0, math.MaxInt64-2*int64(maxSpan))

// MaxTime returns the latest instant a decision can be made at, in
// September 2261: int64 Unix nanoseconds leave room for two MaxSpan after it.
// Explicit times before the Unix epoch or after MaxTime are rejected with
// ErrInvalidTime. It is safe for concurrent use.
func MaxTime() time.Time { return maxTime }

// MaxCost is the largest cost a request may carry and the largest burst or
// window limit a rule may have. Counts below 2^53 are exact in the doubles
// that Redis scripts compute with; 2^50 leaves room for sums of them.
const MaxCost = 1 << 50

// validate checks the numbers and fills the derived fields.
func (l *Limit) validate() error {
	switch l.alg {
	case AlgTokenBucket, AlgShaping:
		t, err := l.rate.interval()
		if err != nil {
			return err
		}
		if l.burst < 1 || l.burst > MaxCost {
			return fmt.Errorf("%w: burst must be between 1 and 2^50, got %d", ErrInvalidBurst, l.burst)
		}
		if t > int64(maxSpan)/l.burst {
			return fmt.Errorf("%w: refilling %d tokens at %v takes longer than 100 days", ErrInvalidBurst, l.burst, l.rate)
		}
		l.interval, l.tau = t, t*l.burst
		if l.alg == AlgShaping && (l.maxWait <= 0 || l.maxWait > maxSpan-time.Duration(l.tau)) {
			return fmt.Errorf("%w: max wait must be > 0 and, with the fill time %v, at most 100 days; got %v", ErrInvalidWindow, time.Duration(l.tau), l.maxWait)
		}
	case AlgFixedWindow, AlgSlidingWindow, AlgSlidingLog:
		if l.burst < 1 || l.burst > MaxCost {
			return fmt.Errorf("%w: limit must be between 1 and 2^50, got %d", ErrInvalidBurst, l.burst)
		}
		if l.window <= 0 || l.window > maxSpan {
			return fmt.Errorf("%w: window must be > 0 and at most 100 days, got %v", ErrInvalidWindow, l.window)
		}
		if l.window%time.Millisecond != 0 {
			// Windows are aligned to the epoch; in whole milliseconds that
			// alignment is exact in a double as well.
			return fmt.Errorf("%w: window must be a whole number of milliseconds, got %v", ErrInvalidWindow, l.window)
		}
	case 0:
		return fmt.Errorf("%w: no limit set", ErrInvalidRule)
	default:
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalidRule, l.alg)
	}
	return nil
}

// String describes the limit, for example "token_bucket 10/1s burst 50".
func (l Limit) String() string {
	switch l.alg {
	case AlgTokenBucket:
		return fmt.Sprintf("%v %v burst %d", l.alg, l.rate, l.burst)
	case AlgShaping:
		return fmt.Sprintf("%v %v burst %d max wait %v", l.alg, l.rate, l.burst, l.maxWait)
	}
	return fmt.Sprintf("%v %d per %v", l.alg, l.burst, l.window)
}
