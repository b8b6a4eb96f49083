package core

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// BreakerState is the state of a Limiter's circuit breaker. The zero value is
// BreakerClosed.
type BreakerState uint8

const (
	// BreakerClosed: every decision calls the store. A Limiter without a
	// breaker is always closed.
	BreakerClosed BreakerState = iota
	// BreakerOpen: the store failed too often; until the cooldown ends no
	// decision calls it and the failure mode decides at once.
	BreakerOpen
	// BreakerHalfOpen: the cooldown is over. The next decision, and only that
	// one, calls the store as a probe; the others are decided by the failure
	// mode until the probe answers.
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

// maxBreakerFailures bounds WithBreaker's count, so that it fits in
// breaker.word beside the state.
const maxBreakerFailures = math.MaxInt32

// The breaker's word holds its state in the low two bits (a BreakerState,
// where half-open means a probe is in flight) and, while closed, the count of
// consecutive failures above them.
const (
	brStateMask = 3
	brFailure   = 4 // one failure in the count
)

// breaker is a circuit breaker in front of a store. Reads are lock-free: a
// closed breaker costs a decision one atomic load before the store call and
// one after a success. Every write, which follows a failure, a probe or a
// success after failures, holds mu, so that the word and the trip it points
// to change together.
type breaker struct {
	threshold uint64        // consecutive failures that open it, >= 1
	cooldown  time.Duration // how long it stays open, > 0

	word atomic.Uint64
	trip atomic.Pointer[trip] // the last opening; valid whenever the state is not closed
	mu   sync.Mutex
}

// trip is one opening of the breaker; it never changes once published. The
// errors are built when it opens, so that a decision on an open breaker
// allocates nothing.
type trip struct {
	until       time.Time // the end of the cooldown
	err         error     // wraps ErrBreakerOpen and the store's error
	unavailable error     // wraps ErrUnavailable and err, for FailClosed
}

// retryAfter is the time left in the cooldown at now, at least 1ns: the
// breaker answers nothing sooner.
func (t *trip) retryAfter(now time.Time) time.Duration {
	return max(t.until.Sub(now), time.Nanosecond)
}

// now reads the wall clock, which testing/synctest fakes inside a bubble.
// Cooldowns are short and only gate probes, so a clock step at worst moves
// one probe.
func (b *breaker) now() time.Time { return time.Now() }

// state reports the state as BreakerState documents it: an open breaker whose
// cooldown is over is half-open, as its next decision will probe.
func (b *breaker) state() BreakerState {
	s := BreakerState(b.word.Load() & brStateMask)
	if s == BreakerOpen && !b.now().Before(b.trip.Load().until) {
		return BreakerHalfOpen
	}
	return s
}

// admit decides whether a decision may call the store. It returns nil and
// probe = false when the breaker is closed; nil and probe = true to the one
// decision that probes after a cooldown; otherwise the trip in force, and the
// decision must not call the store.
func (b *breaker) admit() (open *trip, probe bool) {
	for {
		w := b.word.Load()
		switch w & brStateMask {
		case uint64(BreakerClosed):
			return nil, false
		case uint64(BreakerHalfOpen):
			return b.trip.Load(), false
		}
		t := b.trip.Load()
		if b.now().Before(t.until) {
			return t, false
		}
		// The cooldown is over: the first to swap is the probe. The
		// others see half-open and fail fast.
		if b.word.CompareAndSwap(w, uint64(BreakerHalfOpen)) {
			return nil, true
		}
	}
}

// success records a store call that worked: it closes the breaker after a
// probe and otherwise resets the count of failures.
func (b *breaker) success(probe bool) {
	if !probe && b.word.Load() == uint64(BreakerClosed) {
		return // nothing to reset: the common case, without a lock
	}
	b.mu.Lock()
	if probe || b.word.Load()&brStateMask == uint64(BreakerClosed) {
		b.word.Store(uint64(BreakerClosed))
	}
	b.mu.Unlock()
}

// failure records a store call that failed with err and returns the trip in
// force if the breaker is open afterwards: this failure opened it (the
// threshold-th in a row, or a failed probe), or it was already open when a
// call made before the opening came back.
func (b *breaker) failure(err error, probe bool) *trip {
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
	berr := fmt.Errorf("%w: %w", ErrBreakerOpen, err)
	t := &trip{
		until:       b.now().Add(b.cooldown),
		err:         berr,
		unavailable: fmt.Errorf("%w: %w", ErrUnavailable, berr),
	}
	// The trip first: a reader that sees the open state must see its trip.
	b.trip.Store(t)
	b.word.Store(uint64(BreakerOpen))
	return t
}

// abandon returns the probe's turn when its caller gave up, which says
// nothing about the store: the breaker stays open with its cooldown over, so
// the next decision probes.
func (b *breaker) abandon() {
	b.mu.Lock()
	b.word.Store(uint64(BreakerOpen))
	b.mu.Unlock()
}
