package core

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var errDown = errors.New("store down")

// flakyStore fails with errDown while fail is set and counts its calls. While
// hold is set, a call waits for gate to close (or its ctx to end) before
// answering. gate is set before the store is shared.
type flakyStore struct {
	fail  atomic.Bool
	hold  atomic.Bool
	gate  chan struct{}
	calls atomic.Int64
}

func (s *flakyStore) Take(ctx context.Context, t *Take) error {
	s.calls.Add(1)
	if s.hold.Load() {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.fail.Load() {
		return errDown
	}
	for i := range t.States {
		t.States[i] = BucketState{Allowed: true, Remaining: 1}
	}
	return nil
}

// blockingStore answers only when ctx ends, with ctx's error, as a client
// talking to a server that never replies.
type blockingStore struct{ calls atomic.Int64 }

func (s *blockingStore) Take(ctx context.Context, _ *Take) error {
	s.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// breakerStore puts one Breaker in front of a store, as a store with a
// single failure domain does. The call that opens the breaker returns the
// store's own error; later ones the refusal.
type breakerStore struct {
	Store
	b *Breaker
}

func withBreaker(t testing.TB, s Store, failures int, cooldown time.Duration) *breakerStore {
	t.Helper()
	b, err := NewBreaker(failures, cooldown)
	if err != nil {
		t.Fatal(err)
	}
	return &breakerStore{s, b}
}

func (s *breakerStore) Take(ctx context.Context, t *Take) error {
	probe, open := s.b.Admit()
	if open != nil {
		return open
	}
	err := s.Store.Take(ctx, t)
	if err != nil && ctx.Err() != nil {
		// The caller gave up, which says nothing about the store.
		if probe {
			s.b.Abandon()
		}
		return err
	}
	s.b.Record(probe, err)
	return err
}

var breakerRule = Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 2)}

// TestBreakerTimeline runs timelines against a breaker that fails closed, so
// that every decision shows its RetryAfter. Each step lets fake time pass,
// makes one decision and checks whether the store was called, the state
// afterwards and the RetryAfter.
func TestBreakerTimeline(t *testing.T) {
	const cooldown = 10 * time.Second
	type step struct {
		after  time.Duration // fake time to let pass first
		fail   bool          // the store fails, if called
		called bool          // want the store called
		state  BreakerState  // want after the decision
		retry  time.Duration // want Decision.RetryAfter
	}
	var (
		// pass: the store is called and answers.
		pass = func(after time.Duration, state BreakerState) step {
			return step{after: after, called: true, state: state}
		}
		// fail: the store is called and fails.
		fail = func(after time.Duration, state BreakerState, retry time.Duration) step {
			return step{after: after, fail: true, called: true, state: state, retry: retry}
		}
		// skip: the breaker keeps the store from being called.
		skip = func(after time.Duration, retry time.Duration) step {
			return step{after: after, state: BreakerOpen, retry: retry}
		}
	)
	for _, tc := range []struct {
		name     string
		failures int
		steps    []step
	}{
		{"opens after 3 consecutive failures", 3, []step{
			fail(0, BreakerClosed, time.Second),
			fail(0, BreakerClosed, time.Second),
			fail(0, BreakerOpen, time.Second),
			skip(0, cooldown),
			skip(4*time.Second, 6*time.Second),
			skip(6*time.Second-time.Nanosecond, time.Nanosecond),
		}},
		{"one failure opens with failures 1", 1, []step{
			fail(0, BreakerOpen, time.Second),
			skip(time.Second, cooldown-time.Second),
		}},
		{"a success resets the count", 3, []step{
			fail(0, BreakerClosed, time.Second),
			fail(0, BreakerClosed, time.Second),
			pass(0, BreakerClosed),
			fail(0, BreakerClosed, time.Second),
			fail(0, BreakerClosed, time.Second),
			fail(0, BreakerOpen, time.Second),
		}},
		{"probe success closes and restarts the count", 3, []step{
			fail(0, BreakerClosed, time.Second),
			fail(0, BreakerClosed, time.Second),
			fail(0, BreakerOpen, time.Second),
			pass(cooldown, BreakerClosed),
			fail(0, BreakerClosed, time.Second),
			fail(0, BreakerClosed, time.Second),
			fail(0, BreakerOpen, time.Second),
		}},
		{"probe failure reopens for another cooldown", 3, []step{
			fail(0, BreakerClosed, time.Second),
			fail(0, BreakerClosed, time.Second),
			fail(0, BreakerOpen, time.Second),
			fail(cooldown, BreakerOpen, time.Second),
			skip(9*time.Second, time.Second),
			pass(time.Second, BreakerClosed),
			pass(0, BreakerClosed),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &flakyStore{}
				bs := withBreaker(t, s, tc.failures, cooldown)
				l := newTestLimiter(t, []Option{WithStore(bs), WithFailureMode(FailClosed)}, breakerRule)
				start := time.Now()
				for i, st := range tc.steps {
					time.Sleep(st.after)
					at := time.Since(start)
					s.fail.Store(st.fail)
					before := s.calls.Load()
					d, err := l.Allow(context.Background(), Request{User: "u"})
					if called := s.calls.Load() != before; called != st.called {
						t.Errorf("step %d (t0+%v): store called = %v, want %v", i, at, called, st.called)
					}
					if got := bs.b.State(); got != st.state {
						t.Errorf("step %d (t0+%v): State() = %v, want %v", i, at, got, st.state)
					}
					if d.RetryAfter != st.retry {
						t.Errorf("step %d (t0+%v): RetryAfter = %v, want %v", i, at, d.RetryAfter, st.retry)
					}
					switch {
					case st.called && !st.fail:
						if err != nil || !d.Allowed || d.Degraded {
							t.Errorf("step %d (t0+%v): Allow = %+v, %v; want allowed, not degraded", i, at, d, err)
						}
					case st.called:
						if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errDown) || errors.Is(err, ErrBreakerOpen) || !errors.Is(d.Err, errDown) {
							t.Errorf("step %d (t0+%v): err = %v, Decision.Err = %v; want the store's error, not the breaker's", i, at, err, d.Err)
						}
					default:
						if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrBreakerOpen) || !errors.Is(err, errDown) {
							t.Errorf("step %d (t0+%v): err = %v, want ErrUnavailable, ErrBreakerOpen and the store's error", i, at, err)
						}
						if !d.Degraded || !errors.Is(d.Err, ErrBreakerOpen) || !errors.Is(d.Err, errDown) {
							t.Errorf("step %d (t0+%v): Decision = %+v, want degraded with ErrBreakerOpen and the store's error", i, at, d)
						}
					}
					if d.Allowed != (st.called && !st.fail) || (!d.Allowed && d.Reason != ReasonUnavailable) {
						t.Errorf("step %d (t0+%v): Allowed = %v, Reason = %v", i, at, d.Allowed, d.Reason)
					}
				}
			})
		})
	}
}

// TestBreakerSingleProbe: when the cooldown ends, 50 goroutines decide at
// once; the store sees exactly one call, held open on a channel, while the
// other 49 fail fast. The probe's answer then closes or reopens the breaker.
func TestBreakerSingleProbe(t *testing.T) {
	const (
		cooldown = 5 * time.Second
		callers  = 50
	)
	for _, tc := range []struct {
		name      string
		probeFail bool
		state     BreakerState // after the probe
	}{
		{"probe success closes", false, BreakerClosed},
		{"probe failure reopens", true, BreakerOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &flakyStore{gate: make(chan struct{})}
				release := sync.OnceFunc(func() { close(s.gate) })
				defer release() // so that a failing test does not strand the callers
				bs := withBreaker(t, s, 2, cooldown)
				l := newTestLimiter(t, []Option{WithStore(bs), WithFailureMode(FailClosed)}, breakerRule)
				ctx := context.Background()
				req := Request{User: "u"}
				s.fail.Store(true)
				l.Allow(ctx, req)
				l.Allow(ctx, req)
				if got := bs.b.State(); got != BreakerOpen {
					t.Fatalf("after 2 failures: State() = %v, want open", got)
				}
				time.Sleep(cooldown)
				if got := bs.b.State(); got != BreakerHalfOpen {
					t.Fatalf("after the cooldown: State() = %v, want half_open", got)
				}

				s.fail.Store(tc.probeFail)
				s.hold.Store(true)
				var (
					wg      sync.WaitGroup
					fast    atomic.Int64 // decided without the store
					probes  atomic.Int64
					probe   Decision
					probeEr error
				)
				for range callers {
					wg.Go(func() {
						d, err := l.Allow(ctx, req)
						if errors.Is(d.Err, ErrBreakerOpen) {
							if !errors.Is(err, ErrUnavailable) || d.RetryAfter != time.Nanosecond {
								t.Errorf("fast decision: %+v, %v; want ErrUnavailable and RetryAfter 1ns", d, err)
							}
							fast.Add(1)
							return
						}
						probes.Add(1)
						probe, probeEr = d, err
					})
				}
				synctest.Wait() // the probe is blocked on the gate; everyone else is done
				if got := s.calls.Load(); got != 3 {
					t.Fatalf("while the probe is in flight: store calls = %d, want 3 (2 failures + 1 probe)", got)
				}
				if got := fast.Load(); got != callers-1 {
					t.Fatalf("while the probe is in flight: %d fast decisions, want %d", got, callers-1)
				}
				if got := bs.b.State(); got != BreakerHalfOpen {
					t.Fatalf("while the probe is in flight: State() = %v, want half_open", got)
				}
				release()
				wg.Wait()

				if probes.Load() != 1 || s.calls.Load() != 3 {
					t.Fatalf("probes = %d, store calls = %d; want 1 and 3", probes.Load(), s.calls.Load())
				}
				if got := bs.b.State(); got != tc.state {
					t.Fatalf("after the probe: State() = %v, want %v", got, tc.state)
				}
				if tc.probeFail {
					if !errors.Is(probeEr, ErrUnavailable) || !errors.Is(probeEr, errDown) || probe.RetryAfter != time.Second {
						t.Fatalf("failed probe: %+v, %v; want ErrUnavailable with the store's error, RetryAfter 1s", probe, probeEr)
					}
				} else if probeEr != nil || !probe.Allowed {
					t.Fatalf("probe: %+v, %v; want allowed", probe, probeEr)
				}
				l.Allow(ctx, req)
				want := int64(3)
				if !tc.probeFail {
					want = 4
				}
				if got := s.calls.Load(); got != want {
					t.Fatalf("next decision: store calls = %d, want %d", got, want)
				}
			})
		})
	}
}

// TestBreakerProbeCanceled: a probe whose caller gives up counts neither way
// and hands the probe to the next decision instead of wedging half-open.
func TestBreakerProbeCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cooldown = time.Second
		s := &flakyStore{gate: make(chan struct{})}
		bs := withBreaker(t, s, 1, cooldown)
		l := newTestLimiter(t, []Option{WithStore(bs)}, breakerRule)
		req := Request{User: "u"}
		s.fail.Store(true)
		l.Allow(context.Background(), req)
		time.Sleep(cooldown)

		s.fail.Store(false)
		s.hold.Store(true)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		if _, err := l.Allow(ctx, req); !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled probe: err = %v, want context.Canceled", err)
		}
		if got := bs.b.State(); got != BreakerHalfOpen {
			t.Fatalf("after a canceled probe: State() = %v, want half_open", got)
		}
		s.hold.Store(false)
		d, err := l.Allow(context.Background(), req)
		if err != nil || d.Degraded || s.calls.Load() != 3 {
			t.Fatalf("next decision: %+v, %v, store calls %d; want a probe that succeeds, 3 calls", d, err, s.calls.Load())
		}
		if got := bs.b.State(); got != BreakerClosed {
			t.Fatalf("after the probe: State() = %v, want closed", got)
		}
	})
}

// TestBreakerOpenFailureModes: with the breaker open, each failure mode
// decides without the store; FailFallback still limits, to the burst of 2.
func TestBreakerOpenFailureModes(t *testing.T) {
	const cooldown = time.Minute
	for _, tc := range []struct {
		mode    FailureMode
		allowed int // of 6 decisions, the first of which opens the breaker
		err     error
	}{
		{FailOpen, 6, nil},
		{FailClosed, 0, ErrUnavailable},
		{FailFallback, 2, nil},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &flakyStore{}
				s.fail.Store(true)
				l := newTestLimiter(t, []Option{WithStore(withBreaker(t, s, 1, cooldown)), WithFailureMode(tc.mode)}, breakerRule)
				allowed := 0
				for i := range 6 {
					d, err := l.AllowAt(context.Background(), t0, Request{User: "u"}, 1)
					if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
						t.Fatalf("decision %d: err = %v, want %v", i, err, tc.err)
					}
					if !d.Degraded || !errors.Is(d.Err, errDown) {
						t.Fatalf("decision %d: %+v, want degraded with the store's error", i, d)
					}
					if i > 0 && !errors.Is(d.Err, ErrBreakerOpen) {
						t.Fatalf("decision %d: Err = %v, want ErrBreakerOpen", i, d.Err)
					}
					if i > 0 && tc.mode == FailClosed && (!errors.Is(err, ErrBreakerOpen) || d.RetryAfter != cooldown) {
						t.Fatalf("decision %d: %+v, %v; want ErrBreakerOpen and RetryAfter %v", i, d, err, cooldown)
					}
					if d.Allowed {
						allowed++
					}
				}
				if allowed != tc.allowed || s.calls.Load() != 1 {
					t.Fatalf("allowed %d, store calls %d; want %d and 1", allowed, s.calls.Load(), tc.allowed)
				}
			})
		})
	}
}

// TestTimeout: a store that never answers is cut off by WithTimeout and
// counted as a failure, while the caller's own context ending is returned as
// its error. Fake time shows how long each
// decision took.
func TestTimeout(t *testing.T) {
	const bound = 100 * time.Millisecond
	for _, tc := range []struct {
		name    string
		timeout time.Duration                                // WithTimeout
		caller  func() (context.Context, context.CancelFunc) // the caller's ctx
		took    time.Duration
		err     error // from Allow; nil: a degraded decision wrapping DeadlineExceeded
	}{
		{"bound expires: a store failure", bound, func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}, bound, nil},
		{"caller deadline after the bound: a store failure", bound, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Second)
		}, bound, nil},
		{"caller cancels first: its error", bound, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(bound/2, cancel)
			return ctx, cancel
		}, bound / 2, context.Canceled},
		{"caller deadline first: its error", bound, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), bound/2)
		}, bound / 2, context.DeadlineExceeded},
		{"no bound: the caller's deadline", 0, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Hour)
		}, time.Hour, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &blockingStore{}
				l := newTestLimiter(t, []Option{WithStore(s), WithTimeout(tc.timeout)}, breakerRule)
				ctx, cancel := tc.caller()
				defer cancel()
				start := time.Now()
				d, err := l.Allow(ctx, Request{User: "u"})
				if took := time.Since(start); took != tc.took {
					t.Errorf("Allow took %v, want %v", took, tc.took)
				}
				if tc.err != nil {
					if !errors.Is(err, tc.err) || d.Degraded {
						t.Errorf("Allow = %+v, %v; want error %v and no decision", d, err, tc.err)
					}
				} else if err != nil || !d.Degraded || !d.Allowed || !errors.Is(d.Err, context.DeadlineExceeded) || !strings.Contains(d.Err.Error(), "WithTimeout") {
					t.Errorf("Allow = %+v, %v; want allowed (fail open), degraded by the WithTimeout bound", d, err)
				}
				if s.calls.Load() != 1 {
					t.Errorf("store calls = %d, want 1", s.calls.Load())
				}
			})
		})
	}
}

// TestBreakerConcurrentMix: many goroutines, a store failing one call in
// three, a short cooldown; the race detector watches, and the breaker must
// still close once the store is healthy.
func TestBreakerConcurrentMix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cooldown = time.Millisecond
		var n atomic.Int64
		s := &flakyStore{}
		bs := withBreaker(t, s, 2, cooldown)
		l := newTestLimiter(t, []Option{WithStore(bs), WithFailureMode(FailFallback)},
			Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1e6), 1<<20)})
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for range 200 {
					s.fail.Store(n.Add(1)%3 == 0)
					if _, err := l.Allow(context.Background(), Request{User: "u"}); err != nil {
						t.Error(err)
						return
					}
					_ = bs.b.State()
					time.Sleep(cooldown / 4)
				}
			})
		}
		wg.Wait()
		s.fail.Store(false)
		time.Sleep(cooldown)
		if d, err := l.Allow(context.Background(), Request{User: "u"}); err != nil || d.Degraded {
			t.Fatalf("healthy store after the cooldown: %+v, %v", d, err)
		}
		if got := bs.b.State(); got != BreakerClosed {
			t.Fatalf("State() = %v, want closed", got)
		}
	})
}

func TestTimeoutRejected(t *testing.T) {
	p, _ := NewPolicy(breakerRule)
	if _, err := NewLimiter(p, WithStore(failingStore{errDown}), WithTimeout(-time.Nanosecond)); !errors.Is(err, ErrInvalidOption) ||
		!strings.Contains(err.Error(), "WithTimeout: timeout must be >= 0, got -1ns") {
		t.Fatalf("NewLimiter(WithTimeout(-1ns)) = %v; want ErrInvalidOption naming WithTimeout", err)
	}
	if l, err := NewLimiter(p, WithStore(failingStore{errDown}), WithTimeout(0)); err != nil || l == nil {
		t.Fatalf("NewLimiter(WithTimeout(0)) = %v, %v; want accepted", l, err)
	}
}

func TestNewBreakerRejected(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int
		cooldown time.Duration
		want     []string // in the message; none if accepted
	}{
		{"zero failures", 0, time.Second, []string{"failures must be between 1 and 2147483647, got 0"}},
		{"negative failures", -3, time.Second, []string{"failures must be between 1 and 2147483647, got -3"}},
		{"failures beyond int32", 1 << 31, time.Second, []string{"failures must be between"}},
		{"zero cooldown", 1, 0, []string{"cooldown must be > 0, got 0s"}},
		{"negative cooldown", 1, -time.Second, []string{"cooldown must be > 0, got -1s"}},
		{"both", 0, 0, []string{"failures must be", "cooldown must be"}},
		{"smallest breaker", 1, time.Nanosecond, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewBreaker(tc.failures, tc.cooldown)
			if len(tc.want) == 0 {
				if err != nil || b == nil || b.State() != BreakerClosed {
					t.Fatalf("NewBreaker = %v, %v; want a closed breaker", b, err)
				}
				return
			}
			if b != nil || !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("NewBreaker = %v, %v; want ErrInvalidOption", b, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("NewBreaker: %v; want it to say %q", err, w)
				}
			}
		})
	}
}

// TestBreakerZero: a zero or nil Breaker is closed, admits everything and
// records nothing.
func TestBreakerZero(t *testing.T) {
	for _, b := range []*Breaker{nil, {}} {
		for range 3 {
			if probe, open := b.Admit(); probe || open != nil {
				t.Fatalf("Admit() = %v, %v; want admitted", probe, open)
			}
			if o := b.Record(false, errDown); o != nil {
				t.Fatalf("Record = %v, want nil", o)
			}
		}
		b.Abandon()
		if got := b.State(); got != BreakerClosed {
			t.Fatalf("State() = %v, want closed", got)
		}
	}
}

func TestBreakerStateString(t *testing.T) {
	for _, tc := range []struct {
		s    BreakerState
		want string
	}{
		{BreakerClosed, "closed"},
		{BreakerOpen, "open"},
		{BreakerHalfOpen, "half_open"},
		{BreakerState(7), "BreakerState(7)"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("BreakerState(%d).String() = %q, want %q", uint8(tc.s), got, tc.want)
		}
	}
}

// okStore allows everything: the cost of the store path without a store.
type okStore struct{}

func (okStore) Take(_ context.Context, t *Take) error {
	for i := range t.States {
		t.States[i] = BucketState{Allowed: true, Remaining: 1}
	}
	return nil
}

// BenchmarkStorePath: AllowN through a store other than memory, without and
// with a breaker (closed, and open so that the store is skipped). The breaker
// must add no allocation. With a timeout, the context.WithTimeout it needs is
// measured for comparison.
func BenchmarkStorePath(b *testing.B) {
	p, err := NewPolicy(breakerRule)
	if err != nil {
		b.Fatal(err)
	}
	failing := &flakyStore{}
	failing.fail.Store(true)
	for _, bc := range []struct {
		name string
		opts []Option
	}{
		{"plain", []Option{WithStore(okStore{})}},
		{"breaker", []Option{WithStore(withBreaker(b, okStore{}, 5, time.Second))}},
		{"breaker_open", []Option{WithStore(withBreaker(b, failing, 1, time.Hour))}},
		{"timeout", []Option{WithStore(okStore{}), WithTimeout(time.Second)}},
	} {
		l, err := NewLimiter(p, bc.opts...)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		req := Request{User: "alice"}
		l.AllowN(ctx, req, 0) // opens breaker_open
		b.Run(bc.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d, _ := l.AllowN(ctx, req, 1); !d.Allowed {
					b.Fatal("denied")
				}
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d, _ := l.AllowN(ctx, req, 1); !d.Allowed {
						b.Error("denied")
						return
					}
				}
			})
		})
	}
}

// TestDecideAllocs guards the paths that must not allocate: the memory store,
// allowing and denying, and a decision the open breaker makes without the
// store. The open breaker's decision goes through the pooled path of stores
// other than memory, and the race detector drops pooled items at random, so
// that case is checked by the run without the race detector (make test runs
// the Allocs tests of core both ways).
func TestDecideAllocs(t *testing.T) {
	ctx := context.Background()
	req := Request{User: "alice", Endpoint: "GET /x"}
	open := newTestLimiter(t, []Option{WithStore(withBreaker(t, failingStore{errDown}, 1, time.Hour))}, breakerRule)
	open.Allow(ctx, req)
	for _, tc := range []struct {
		name string
		l    *Limiter
	}{
		{"memory allows", newTestLimiter(t, nil, Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1<<20), 1<<30)})},
		{"memory denies", newTestLimiter(t, nil, Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerDay(1), 1)})},
		{"memory three tiers", newTestLimiter(t, nil,
			Rule{Name: "u", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1<<20), 1<<30)},
			Rule{Name: "e", Scope: ScopeEndpoint, Limit: TokenBucket(PerSecond(1<<20), 1<<30)},
			Rule{Name: "g", Scope: ScopeGlobal, Limit: TokenBucket(PerSecond(1<<20), 1<<30)})},
		{"breaker open", open},
	} {
		if tc.l == open && raceEnabled {
			t.Logf("%s: pooled path, checked without the race detector", tc.name)
			continue
		}
		tc.l.Allow(ctx, req) // create the buckets
		if got := testing.AllocsPerRun(100, func() { tc.l.Allow(ctx, req) }); got != 0 {
			t.Errorf("%s: Allow makes %v allocations, want 0", tc.name, got)
		}
	}
}

// TestBreakerOnTransition: the hook sees every change of state, in order,
// with the failure that opened the breaker.
func TestBreakerOnTransition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := NewBreaker(2, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		b.OnTransition(func(to BreakerState, err error) { got = append(got, fmt.Sprintf("%v:%v", to, err)) })
		fail := func() {
			probe, open := b.Admit()
			if open == nil {
				b.Record(probe, errDown)
			}
		}
		fail()
		fail() // opens
		fail() // refused: no change
		time.Sleep(time.Second)
		fail() // the probe fails: open again
		time.Sleep(time.Second)
		probe, _ := b.Admit()
		b.Record(probe, nil) // the probe succeeds: closed
		want := []string{"open:" + errDown.Error(), "half_open:<nil>", "open:" + errDown.Error(), "half_open:<nil>", "closed:<nil>"}
		if !slices.Equal(got, want) {
			t.Errorf("transitions %q, want %q", got, want)
		}
	})
}

// TestObservedAllocs: observers and the logger add no allocation to a
// decision (the event is pooled, which the race detector defeats at random:
// see TestDecideAllocs).
func TestObservedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("pooled path: checked by the run without the race detector (make test runs it)")
	}
	var seen int
	obs := func(_ context.Context, e *Event) { seen += int(e.Decision.Cost) }
	l := newTestLimiter(t, []Option{WithObserver(obs), WithObserver(obs), WithLatencySampling(2), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))},
		Rule{Name: "u", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1<<20), 1<<30)},
		Rule{Name: "g", Scope: ScopeGlobal, Limit: TokenBucket(PerSecond(1<<20), 1<<30)})
	ctx := context.Background()
	req := Request{User: "alice"}
	l.Allow(ctx, req)
	if got := testing.AllocsPerRun(1000, func() { l.Allow(ctx, req) }); got != 0 {
		t.Errorf("Allow with observers makes %v allocations, want 0", got)
	}
	if seen == 0 {
		t.Error("the observers saw nothing")
	}
}
