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
// less than one nanosecond per token. A limit longer than 100 days keeps it
// in whole microseconds instead, rounded up too (see Limit.Resolution).
// Rates up to 1e9 tokens per second can be expressed; a bucket's time to
// fill from empty (burst/rate) is at most MaxSpan.
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
// invalid and is rejected by NewPolicy. A Limit is a small immutable value,
// safe for concurrent use.
//
// A limit's span is the longest time its state matters: a token bucket's
// fill time from empty (Window) plus, for shaping, its MaxWait; a window
// algorithm's window. Spans are at most MaxSpan (400 days). A limit whose
// span is at most 100 days decides at nanosecond resolution. A longer one
// decides at microsecond resolution (see Resolution): NewPolicy rounds its
// interval between tokens up to a whole microsecond (the rate is never
// exceeded) and its MaxWait down to one (which admits exactly the same
// requests), and it decides as at the time truncated to the microsecond.
// Every time and duration its math forms is then a whole number of
// microseconds below 2^56 ns, which the doubles of the Redis stores' script
// hold exactly, as they hold the nanoseconds of a span below 2^53 ns.
//
// A rule or tenant whose limit changes keeps its buckets: a Take may carry,
// for a bucket (a rule name and an identity), a limit other than the one its
// state was written under. The state records the fill time or window it was
// written under (State.Span), and:
//   - A token bucket or shaping limit keeps the share of its burst it had.
//     Under a limit whose fill time tau' differs from the writer's tau, its
//     debt (the time until it is full, max(TAT-now, 0)) counts as
//     ceil(debt*tau'/tau), computed in float64 in that order, rounded up to
//     the microsecond and clamped to [0, tau']: a shaping queue beyond the
//     burst is not carried over. Until a take under the new limit is
//     admitted and writes, the bucket refills at the writer's pace (its
//     share is the one it has under that limit), and a read or a denial
//     reports exactly that: ResetAfter is the time until it is full (the
//     writer's debt), RetryAfter the time until the rescaled debt leaves
//     room for the cost (the writer's debt rounded up to the microsecond
//     goes into the rescaling). Equal fill times keep the debt as it is,
//     which is the same share.
//   - A window algorithm keeps its count, to which the new limit applies
//     (Remaining is 0 while the count exceeds it), as long as the window
//     length is the same; a window of another length starts afresh, as does
//     a bucket whose algorithm changes.
//
// A read (cost 0) and a denial see the rescaled state; as always, they write
// nothing.
type Limit struct {
	alg     Algorithm
	rate    Rate
	burst   int64 // capacity, or the count allowed per window
	window  time.Duration
	maxWait time.Duration

	// Derived by validate, from the fields above only, so that validating
	// a validated limit again changes nothing.
	interval int64 // token bucket: ns between tokens (T)
	tau      int64 // token bucket: ns to fill from empty (burst*T)
	wait     int64 // shaping: the max wait in ns, for a long limit rounded down to the µs
	long     bool  // span above 100 days: decides in whole microseconds
}

// TokenBucket returns a token bucket that refills at rate up to burst tokens.
// A new bucket is full. For example TokenBucket(PerSecond(10), 50) allows a
// burst of 50 and 10 per second sustained. Its fill time, burst/rate, must
// be at most MaxSpan; above 100 days it decides at microsecond resolution
// (see Limit).
func TokenBucket(rate Rate, burst int64) Limit {
	return Limit{alg: AlgTokenBucket, rate: rate, burst: burst}
}

// Shaping returns a token bucket that, instead of denying a request, delays
// it until its tokens have refilled, as long as the delay is at most maxWait.
// Requests are served in the order they arrive. Past maxWait it denies. Its
// fill time plus maxWait must be at most MaxSpan; above 100 days it decides
// at microsecond resolution (see Limit).
func Shaping(rate Rate, burst int64, maxWait time.Duration) Limit {
	return Limit{alg: AlgShaping, rate: rate, burst: burst, maxWait: maxWait}
}

// FixedWindow returns a limit of limit per window, with windows aligned to the
// Unix epoch (a one-minute window starts on every whole minute). The window
// must be a whole number of milliseconds up to MaxSpan; above 100 days it
// decides at microsecond resolution (see Limit).
func FixedWindow(limit int64, window time.Duration) Limit {
	return Limit{alg: AlgFixedWindow, burst: limit, window: window}
}

// SlidingWindow returns the sliding window counter: with the previous fixed
// window's count p, the current one's c and the elapsed share e of the current
// window, a request of cost n is allowed iff p*(1-e) + c + n <= limit. The
// window must be a whole number of milliseconds up to MaxSpan; above 100
// days it decides at microsecond resolution (see Limit).
func SlidingWindow(limit int64, window time.Duration) Limit {
	return Limit{alg: AlgSlidingWindow, burst: limit, window: window}
}

// SlidingLog returns an exact sliding window: the costs admitted in
// (now-window, now] never exceed limit. It keeps one entry per admitted
// request, so its memory grows with limit. The window must be a whole
// number of milliseconds up to MaxSpan; above 100 days it decides at
// microsecond resolution (see Limit).
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

// MaxWait returns the longest delay of a shaping limit. For a limit longer
// than 100 days, validated by NewPolicy, it is rounded down to the
// microsecond, which admits exactly the requests the unrounded wait would:
// such a limit's waits are whole microseconds.
func (l Limit) MaxWait() time.Duration {
	if l.long {
		return time.Duration(l.wait)
	}
	return l.maxWait
}

// Interval returns the time between two tokens of a token bucket or shaping
// limit (Per/N rounded up to the nanosecond, or for a limit longer than 100
// days to the microsecond), and 0 for the window algorithms and a limit
// NewPolicy has not validated.
func (l Limit) Interval() time.Duration { return time.Duration(l.interval) }

// Resolution returns the unit of time a limit validated by NewPolicy decides
// in: time.Nanosecond for a limit whose span (see Limit) is at most 100
// days, time.Microsecond for a longer one, which decides as at the time
// truncated to the microsecond and whose durations (ResetAfter, RetryAfter,
// Delay) are whole microseconds counted from that instant: up to 999ns
// longer than counted from the time itself, never shorter. The zero Limit
// and limits not validated report time.Nanosecond.
func (l Limit) Resolution() time.Duration {
	if l.long {
		return time.Microsecond
	}
	return time.Nanosecond
}

func (l *Limit) isBucket() bool { return l.alg == AlgTokenBucket || l.alg == AlgShaping }

// MaxSpan bounds every duration a limit can produce: a token bucket's fill
// time plus its maximum wait, and a window; it is 400 days, so quarterly and
// yearly quotas fit. A limit whose span is at most 100 days (below 2^53 ns)
// decides at nanosecond resolution; a longer one at microsecond resolution
// (see Limit.Resolution), where every time and duration is a multiple of
// 1000ns below 2^56ns. Either way the Redis scripts, whose numbers are IEEE
// doubles, hold every value exactly and decide exactly as the memory store
// does.
const MaxSpan = 400 * 24 * time.Hour

const maxSpan = MaxSpan

// nsSpan is the longest span decided at nanosecond resolution: 100 days,
// below 2^53 ns.
const nsSpan = 100 * 24 * time.Hour

// maxTime is MaxTime's answer: int64 Unix nanoseconds leave room for two
// maxSpan after it. It is never written.
var maxTime = time.Unix(0, math.MaxInt64-2*int64(maxSpan))

// MaxTime returns the latest instant a decision can be made at, on 1
// February 2260: int64 Unix nanoseconds leave room for two MaxSpan after it,
// so that a state's furthest instant (a sliding window's expiry, two
// windows after its start) never overflows. Explicit times before the Unix
// epoch or after MaxTime are rejected with ErrInvalidTime. It is safe for
// concurrent use.
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
			return fmt.Errorf("%w: refilling %d tokens at %v takes longer than 400 days", ErrInvalidBurst, l.burst, l.rate)
		}
		tau, wait := t*l.burst, int64(0)
		if l.alg == AlgShaping {
			if l.maxWait <= 0 || l.maxWait > maxSpan-time.Duration(tau) {
				return fmt.Errorf("%w: max wait must be > 0 and, with the fill time %v, at most 400 days; got %v", ErrInvalidWindow, time.Duration(tau), l.maxWait)
			}
			wait = int64(l.maxWait)
		}
		if tau > int64(nsSpan)-wait {
			// Longer than 100 days: whole microseconds, so that every value
			// stays exact in a double (see MaxSpan). The interval rounds up,
			// so the rate is never exceeded; the wait rounds down, which
			// changes no decision, waits being whole microseconds.
			us := ceilMicro(t)
			if us > int64(maxSpan)/l.burst {
				return fmt.Errorf("%w: refilling %d tokens at %v takes longer than 400 days at the microsecond resolution of limits longer than 100 days (one token every %v)", ErrInvalidBurst, l.burst, l.rate, time.Duration(us))
			}
			t, tau, wait = us, us*l.burst, wait-wait%1000
			if l.alg == AlgShaping && (wait <= 0 || wait > int64(maxSpan)-tau) {
				return fmt.Errorf("%w: max wait must be at least 1µs and, with the fill time %v (one token every %v at the microsecond resolution of limits longer than 100 days), at most 400 days; got %v", ErrInvalidWindow, time.Duration(tau), time.Duration(t), l.maxWait)
			}
			l.long = true
		} else {
			l.long = false
		}
		l.interval, l.tau, l.wait = t, tau, wait
	case AlgFixedWindow, AlgSlidingWindow, AlgSlidingLog:
		if l.burst < 1 || l.burst > MaxCost {
			return fmt.Errorf("%w: limit must be between 1 and 2^50, got %d", ErrInvalidBurst, l.burst)
		}
		if l.window <= 0 || l.window > maxSpan {
			return fmt.Errorf("%w: window must be > 0 and at most 400 days, got %v", ErrInvalidWindow, l.window)
		}
		if l.window%time.Millisecond != 0 {
			// Windows are aligned to the epoch; in whole milliseconds that
			// alignment is exact in a double as well.
			return fmt.Errorf("%w: window must be a whole number of milliseconds, got %v", ErrInvalidWindow, l.window)
		}
		l.long = l.window > nsSpan
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
