package core

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// BreakerState is the state of a Breaker. The zero value is BreakerClosed.
type BreakerState uint8

const (
	// BreakerClosed: every call goes through.
	BreakerClosed BreakerState = iota
	// BreakerOpen: the domain failed too often; until the cooldown ends no
	// call goes through and the limiter's failure mode decides at once.
	BreakerOpen
	// BreakerHalfOpen: the cooldown is over. The next call, and only that
	// one, goes through as a probe; the others fail fast until it answers.
	BreakerHalfOpen
)

// String names the state.
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("BreakerState(%d)", uint8(s))
}

// MaxBreakerFailures is the largest failure count NewBreaker accepts.
const MaxBreakerFailures = math.MaxInt32

// The breaker's word holds its state in the low two bits (a BreakerState,
// where half-open means a probe is in flight) and, while closed, the count of
// consecutive failures above them.
const (
	brStateMask = 3
	brFailure   = 4 // one failure in the count
)

// Breaker is a circuit breaker for one failure domain of a store: a Redis
// node, say, so that a dead node stops costing its own keys a timeout each
// while the keys of healthy nodes go on as before. Stores keep one per
// domain; the Limiter has none of its own. Make one with NewBreaker; it is
// safe for concurrent use and must not be copied.
//
// After failures consecutive failed calls it opens: for cooldown Admit
// refuses every call with a *BreakerOpenError. Then Admit lets one call
// through as a probe while refusing the others: if the probe succeeds the
// breaker closes, if it fails the breaker opens for another cooldown. Any
// success resets the count. A closed breaker costs a call one atomic load
// before and one after; a refusal allocates nothing.
//
// The zero value, like a nil *Breaker, is always closed and records
// nothing.
type Breaker struct {
	threshold uint64        // consecutive failures that open it, >= 1
	cooldown  time.Duration // how long it stays open, > 0

	word   atomic.Uint64
	trip   atomic.Pointer[BreakerOpenError] // the last opening; valid whenever the state is not closed
	mu     sync.Mutex
	notify func(to BreakerState, err error) // see OnTransition; nil: none
}

// BreakerOpenError is the refusal of an open Breaker. It wraps
// ErrBreakerOpen and the failure that opened the breaker; a Limiter failing
// closed turns Until into the Retry-After. It never changes once made.
type BreakerOpenError struct {
	Until time.Time // the end of the cooldown: nothing is tried before then
	Err   error     // the failure that opened the breaker

	msg         string
	wrapped     []error // ErrBreakerOpen and Err
	unavailable error   // wraps ErrUnavailable and the error itself, for FailClosed
}

// Error says that the breaker is open, and why.
func (e *BreakerOpenError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("%v: %v", ErrBreakerOpen, e.Err)
	}
	return e.msg
}

// Unwrap returns ErrBreakerOpen and the failure that opened the breaker.
func (e *BreakerOpenError) Unwrap() []error {
	if e.wrapped == nil {
		return []error{ErrBreakerOpen, e.Err}
	}
	return e.wrapped
}

// retryAfter is the time left in the cooldown at now, at least 1ns: the
// breaker lets nothing through sooner.
func (e *BreakerOpenError) retryAfter(now time.Time) time.Duration {
	return max(e.Until.Sub(now), time.Nanosecond)
}

// NewBreaker returns a closed breaker that opens after failures consecutive
// failures, for cooldown. failures must be between 1 and MaxBreakerFailures
// and cooldown above 0, or NewBreaker fails with an error wrapping
// ErrInvalidOption.
func NewBreaker(failures int, cooldown time.Duration) (*Breaker, error) {
	var errs []error
	if failures < 1 || failures > MaxBreakerFailures {
		errs = append(errs, fmt.Errorf("%w: breaker: failures must be between 1 and %d, got %d", ErrInvalidOption, MaxBreakerFailures, failures))
	}
	if cooldown <= 0 {
		errs = append(errs, fmt.Errorf("%w: breaker: cooldown must be > 0, got %v", ErrInvalidOption, cooldown))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Breaker{threshold: uint64(failures), cooldown: cooldown}, nil
}

// OnTransition makes b call fn on every change of state: to BreakerOpen with
// the failure that opened it, to BreakerHalfOpen when a probe is let
// through, to BreakerClosed when a probe succeeded. It must be called
// before b is used, and fn must be quick and not call b: it runs on the
// deciding goroutine, holding b's lock for openings. Stores log breaker
// transitions through it. A nil fn removes the hook.
func (b *Breaker) OnTransition(fn func(to BreakerState, err error)) {
	if b.active() {
		b.notify = fn
	}
}

// now reads the wall clock, which testing/synctest fakes inside a bubble.
// Cooldowns are short and only gate probes, so a clock step at worst moves
// one probe.
func (b *Breaker) now() time.Time { return time.Now() }

// active reports whether b was made by NewBreaker.
func (b *Breaker) active() bool { return b != nil && b.threshold > 0 }

// State reports the state: an open breaker whose cooldown is over reads as
// BreakerHalfOpen, since its next call will probe. The answer may be stale
// by the time it is used; it is meant for metrics and health checks.
func (b *Breaker) State() BreakerState {
	if !b.active() {
		return BreakerClosed
	}
	s := BreakerState(b.word.Load() & brStateMask)
	if s == BreakerOpen && !b.now().Before(b.trip.Load().Until) {
		return BreakerHalfOpen
	}
	return s
}

// Admit decides whether a call may go through. It returns probe = false and
// a nil error when the breaker is closed; probe = true and a nil error to
// the one call that probes after a cooldown; otherwise the opening in
// force, and the call must not be made. Every admitted call must be
// followed by Record or, for a probe whose caller gave up, Abandon.
func (b *Breaker) Admit() (probe bool, err *BreakerOpenError) {
	if !b.active() {
		return false, nil
	}
	for {
		w := b.word.Load()
		switch w & brStateMask {
		case uint64(BreakerClosed):
			return false, nil
		case uint64(BreakerHalfOpen):
			return false, b.trip.Load()
		}
		t := b.trip.Load()
		if b.now().Before(t.Until) {
			return false, t
		}
		// The cooldown is over: the first to swap is the probe. The
		// others see half-open and fail fast.
		if b.word.CompareAndSwap(w, uint64(BreakerHalfOpen)) {
			if b.notify != nil {
				b.notify(BreakerHalfOpen, nil)
			}
			return true, nil
		}
	}
}

// Record records the outcome of an admitted call: success when err is nil,
// which closes the breaker after a probe and otherwise resets the count;
// failure otherwise, which opens it on the threshold-th failure in a row or
// a failed probe. It returns the opening in force if the breaker is open
// afterwards.
func (b *Breaker) Record(probe bool, err error) *BreakerOpenError {
	if !b.active() {
		return nil
	}
	if err == nil {
		b.success(probe)
		return nil
	}
	return b.failure(err, probe)
}

func (b *Breaker) success(probe bool) {
	if !probe && b.word.Load() == uint64(BreakerClosed) {
		return // nothing to reset: the common case, without a lock
	}
	b.mu.Lock()
	if probe || b.word.Load()&brStateMask == uint64(BreakerClosed) {
		b.word.Store(uint64(BreakerClosed))
		if probe && b.notify != nil {
			b.notify(BreakerClosed, nil)
		}
	}
	b.mu.Unlock()
}

func (b *Breaker) failure(err error, probe bool) *BreakerOpenError {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.word.Load()
	switch {
	case probe:
	case w&brStateMask == uint64(BreakerOpen):
		return b.trip.Load()
	case w&brStateMask == uint64(BreakerHalfOpen):
		return nil // the probe decides
	case w/brFailure+1 < b.threshold:
		b.word.Store(w + brFailure)
		return nil
	}
	t := &BreakerOpenError{
		Until: b.now().Add(b.cooldown),
		Err:   err,
		msg:   fmt.Sprintf("%v: %v", ErrBreakerOpen, err),
	}
	t.wrapped = []error{ErrBreakerOpen, err}
	t.unavailable = fmt.Errorf("%w: %w", ErrUnavailable, t)
	// The trip first: a reader that sees the open state must see its trip.
	b.trip.Store(t)
	b.word.Store(uint64(BreakerOpen))
	if b.notify != nil {
		b.notify(BreakerOpen, err)
	}
	return t
}

// Abandon returns the probe's turn when its caller gave up, which says
// nothing about the domain: the breaker stays open with its cooldown over,
// so the next call probes.
func (b *Breaker) Abandon() {
	if !b.active() {
		return
	}
	b.mu.Lock()
	b.word.Store(uint64(BreakerOpen))
	b.mu.Unlock()
}
