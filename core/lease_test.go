package core

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// leaseStore is a Store and Leaser in memory, with the reference math
// (Limit.Decide) and counters of its calls: core's own tests of the
// limiter's leases use it; the Redis stores are tested against real
// servers in adapters/test.
type leaseStore struct {
	clock *ManualClock // the store's clock for calls without a time; nil: time.Now

	mu      sync.Mutex
	states  map[[2]string]*State
	fail    error         // every call fails with it, when set
	down    error         // TakeLease fails with it, when set: Take and ReturnLease work
	gate    chan struct{} // TakeLease waits for it, when set
	entered chan struct{} // TakeLease sends to it before waiting for gate

	takes, leases, returns atomic.Int64
	returned               atomic.Int64 // tokens given back
}

func newLeaseStore(clock *ManualClock) *leaseStore {
	return &leaseStore{clock: clock, states: map[[2]string]*State{}}
}

func (f *leaseStore) now(t time.Time) int64 {
	switch {
	case !t.IsZero():
		return t.UnixNano()
	case f.clock != nil:
		return f.clock.Now().UnixNano()
	}
	return time.Now().UnixNano()
}

func (f *leaseStore) state(b *Bucket) *State {
	k := [2]string{b.Rule, b.Key}
	s := f.states[k]
	if s == nil {
		s = &State{}
		f.states[k] = s
	}
	return s
}

func (f *leaseStore) setFail(err error) {
	f.mu.Lock()
	f.fail = err
	f.mu.Unlock()
}

// setDown has TakeLease alone fail with err (nil: none).
func (f *leaseStore) setDown(err error) {
	f.mu.Lock()
	f.down = err
	f.mu.Unlock()
}

func (f *leaseStore) Take(_ context.Context, t *Take) error {
	if err := CheckTake(t); err != nil {
		return err
	}
	f.takes.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	now := f.now(t.Now)
	t.At = time.Unix(0, now)
	next := make([]State, len(t.Buckets))
	all := true
	for i := range t.Buckets {
		b := &t.Buckets[i]
		t.States[i], next[i] = b.Limit.Decide(f.state(b), now, t.Cost)
		all = all && t.States[i].Allowed
	}
	for i := range t.Buckets {
		b := &t.Buckets[i]
		switch {
		case all && t.Cost > 0:
			b.Limit.Commit(f.state(b), next[i], t.Cost)
		case !all && t.States[i].Allowed:
			t.States[i], _ = b.Limit.Decide(f.state(b), now, 0)
		}
	}
	return nil
}

func (f *leaseStore) TakeLease(_ context.Context, b Bucket, need, size int64, now time.Time) (LeaseGrant, error) {
	if err := CheckLease(&b, need, size, now); err != nil {
		return LeaseGrant{}, err
	}
	f.leases.Add(1)
	f.mu.Lock()
	gate, entered := f.gate, f.entered
	f.mu.Unlock()
	if gate != nil {
		entered <- struct{}{}
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := cmp.Or(f.fail, f.down); err != nil {
		return LeaseGrant{}, err
	}
	t := f.now(now)
	s := f.state(&b)
	st, _ := b.Limit.Decide(s, t, need)
	if !st.Allowed {
		return LeaseGrant{State: st, At: time.Unix(0, t)}, nil
	}
	avail, _ := b.Limit.Decide(s, t, 0)
	g := min(size, avail.Remaining)
	st, next := b.Limit.Decide(s, t, g)
	b.Limit.Commit(s, next, g)
	return LeaseGrant{Granted: g, State: st, At: time.Unix(0, t)}, nil
}

func (f *leaseStore) ReturnLease(_ context.Context, b Bucket, n int64, now time.Time) error {
	if err := CheckLease(&b, n, 0, now); err != nil {
		return err
	}
	f.returns.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.returned.Add(n)
	s := f.state(&b)
	s.A = max(s.A-n*int64(b.Limit.Interval()), f.now(now))
	return nil
}

// tokens returns the whole tokens bucket (rule, key) of lim holds at now.
func (f *leaseStore) tokens(lim *Limit, rule, key string, now time.Time) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, _ := lim.Decide(f.state(&Bucket{Rule: rule, Key: key}), now.UnixNano(), 0)
	return st.Remaining
}

// hookStore is a leaseStore that calls hook, when set, at the start of
// each Take: another request can then run while one is between its leased
// and its unleased tiers.
type hookStore struct {
	*leaseStore
	hook func()
}

func (h *hookStore) Take(ctx context.Context, t *Take) error {
	if h.hook != nil {
		h.hook()
	}
	return h.leaseStore.Take(ctx, t)
}

// plainStore is a Store that cannot lease.
type plainStore struct{ s *leaseStore }

func (p plainStore) Take(ctx context.Context, t *Take) error { return p.s.Take(ctx, t) }

func leasePolicy(t testing.TB, rules ...Rule) *Policy {
	t.Helper()
	p, err := NewPolicy(rules...)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

func leaseLimiter(t testing.TB, p *Policy, opts ...Option) *Limiter {
	t.Helper()
	l, err := NewLimiter(p, opts...)
	if err != nil {
		t.Fatalf("NewLimiter: %v", err)
	}
	return l
}

// globalLeased is a global token bucket of 10/s, burst 100, leased by up
// to max tokens for a minute.
func globalLeased(max int64) Rule {
	return Rule{Name: "global", Scope: ScopeGlobal, Limit: TokenBucket(PerSecond(10), 100), Lease: Lease{Max: max, TTL: time.Minute}}
}

func TestLeaseValidation(t *testing.T) {
	tb := TokenBucket(PerSecond(10), 100)
	for _, tc := range []struct {
		name  string
		rule  Rule
		field string // in the message; "" for a valid rule
	}{
		{"none", Rule{Limit: tb}, ""},
		{"valid", Rule{Limit: tb, Lease: Lease{Max: 100, TTL: time.Second}}, ""},
		{"negative_max", Rule{Limit: tb, Lease: Lease{Max: -1, TTL: time.Second}}, "Lease.Max: must be >= 0"},
		{"ttl_without_max", Rule{Limit: tb, Lease: Lease{TTL: time.Second}}, "Lease.TTL: 1s set without Lease.Max"},
		{"zero_ttl", Rule{Limit: tb, Lease: Lease{Max: 10}}, "Lease.TTL: must be > 0"},
		{"negative_ttl", Rule{Limit: tb, Lease: Lease{Max: 10, TTL: -time.Second}}, "Lease.TTL: must be > 0"},
		{"max_above_burst", Rule{Limit: tb, Lease: Lease{Max: 101, TTL: time.Second}}, "Lease.Max: must be at most the burst (100), got 101"},
		{"shaping", Rule{Limit: Shaping(PerSecond(10), 100, time.Second), Lease: Lease{Max: 10, TTL: time.Second}}, "Lease: only a token bucket"},
		{"fixed_window", Rule{Limit: FixedWindow(100, time.Second), Lease: Lease{Max: 10, TTL: time.Second}}, "Lease: only a token bucket"},
		{"sliding_window", Rule{Limit: SlidingWindow(100, time.Second), Lease: Lease{Max: 10, TTL: time.Second}}, "Lease: only a token bucket"},
		{"sliding_log", Rule{Limit: SlidingLog(100, time.Second), Lease: Lease{Max: 10, TTL: time.Second}}, "Lease: only a token bucket"},
		{"lookup", Rule{Limit: tb, Lookup: &LimitTable{}, Lease: Lease{Max: 10, TTL: time.Second}}, "Lease: a rule with a Lookup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.rule
			r.Name, r.Scope = "global", ScopeGlobal
			_, err := NewPolicy(r)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("NewPolicy = %v, want no error", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidRule) {
				t.Fatalf("NewPolicy = %v, want an error wrapping ErrInvalidRule", err)
			}
			if msg := err.Error(); !strings.Contains(msg, `rule "global"`) || !strings.Contains(msg, tc.field) {
				t.Fatalf("NewPolicy = %q, want it to name rule \"global\" and %q", msg, tc.field)
			}
		})
	}
}

func TestLeaseNeedsLeaser(t *testing.T) {
	leased := leasePolicy(t, globalLeased(10))
	plain := leasePolicy(t, Rule{Name: "global", Scope: ScopeGlobal, Limit: TokenBucket(PerSecond(10), 100)})
	store := plainStore{newLeaseStore(NewManualClock(t0))}
	_, err := NewLimiter(leased, WithStore(store))
	if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), `rule "global" has a Lease`) {
		t.Fatalf("NewLimiter(leased, non-Leaser) = %v, want ErrInvalidOption naming rule \"global\"", err)
	}
	l := leaseLimiter(t, plain, WithStore(store))
	if err := l.SetPolicy(leased); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), `"global"`) {
		t.Fatalf("SetPolicy(leased) = %v, want ErrInvalidOption naming rule \"global\"", err)
	}
	if l.Policy() != plain {
		t.Fatal("a refused policy took effect")
	}
	// The memory store decides a leased rule exactly, as any other.
	m := leaseLimiter(t, leased, WithStore(mustMemory(t, WithClock(NewManualClock(t0)))))
	admitted := 0
	for range 150 {
		if d, err := m.Allow(context.Background(), Request{}); err != nil {
			t.Fatal(err)
		} else if d.Allowed {
			admitted++
		}
	}
	if admitted != 100 {
		t.Fatalf("memory store admitted %d of 150 at one instant, want the burst, 100", admitted)
	}
}

// TestLeaseServesLocally: one lease call, then decisions from the lease
// without the store; Remaining is what the instance holds.
func TestLeaseServesLocally(t *testing.T) {
	ctx := context.Background()
	s := newLeaseStore(nil)
	l := leaseLimiter(t, leasePolicy(t, globalLeased(10)), WithStore(s))
	rule := l.Policy().Rules()[0]
	// The first lease is the cost (no use seen yet); the second, right
	// after, is extrapolated from that use and capped at Max: 10.
	wantRemaining := []int64{0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 9}
	for i, want := range wantRemaining {
		d, err := l.AllowAt(ctx, t0, Request{}, 1)
		if err != nil || !d.Allowed {
			t.Fatalf("AllowAt(t0) #%d = %+v, %v, want allowed", i, d, err)
		}
		if d.Remaining != want {
			t.Fatalf("AllowAt(t0) #%d: Remaining = %d, want %d (held by this instance)", i, d.Remaining, want)
		}
	}
	if got := s.leases.Load(); got != 3 {
		t.Fatalf("%d TakeLease calls for 12 decisions, want 3 (sizes 1, 10, 10)", got)
	}
	if got := s.takes.Load(); got != 0 {
		t.Fatalf("%d Take calls, want none", got)
	}
	if got := s.tokens(&rule.Limit, "global", "*", t0); got != 100-21 {
		t.Fatalf("shared bucket holds %d, want 79 (100 less leases of 1, 10 and 10)", got)
	}
}

// TestLeaseExactAtOneInstant: two instances on one shared bucket with the
// clock frozen admit exactly the burst together, as the unleased math
// does, and each then denies with the RetryAfter of one token.
func TestLeaseExactAtOneInstant(t *testing.T) {
	ctx := context.Background()
	s := newLeaseStore(nil)
	p := leasePolicy(t, globalLeased(7))
	a, b := leaseLimiter(t, p, WithStore(s)), leaseLimiter(t, p, WithStore(s))
	admitted := 0
	for i := range 300 {
		l := a
		if i%3 == 0 {
			l = b
		}
		d, err := l.AllowAt(ctx, t0, Request{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
			continue
		}
		if d.Reason != ReasonLimited || d.RetryAfter != 100*time.Millisecond {
			t.Fatalf("denial #%d: reason %v, RetryAfter %v; want limited, 100ms (one token at 10/s)", i, d.Reason, d.RetryAfter)
		}
	}
	if admitted != 100 {
		t.Fatalf("admitted %d at one instant, want the burst, 100", admitted)
	}
}

// TestLeaseDenialIsRemembered: once a refill finds the shared bucket short,
// the instance denies locally until the bucket has refilled the
// shortfall, then asks the store again.
func TestLeaseDenialIsRemembered(t *testing.T) {
	ctx := context.Background()
	s := newLeaseStore(nil)
	l := leaseLimiter(t, leasePolicy(t, globalLeased(100)), WithStore(s))
	if d, err := l.AllowAt(ctx, t0, Request{}, 100); err != nil || !d.Allowed {
		t.Fatalf("AllowAt(t0, 100) = %+v, %v, want allowed", d, err)
	}
	calls := s.leases.Load()
	t1 := t0.Add(50 * time.Millisecond)
	for _, tc := range []struct {
		name  string
		at    time.Time
		cost  int64
		retry time.Duration // 0: allowed
		calls int64         // store calls it makes
	}{
		{"short_asks_store", t1, 1, 50 * time.Millisecond, 1},
		{"again_local", t1, 1, 50 * time.Millisecond, 0},
		{"cost_2_local", t1, 2, 150 * time.Millisecond, 0},
		{"later_local", t0.Add(99 * time.Millisecond), 1, time.Millisecond, 0},
		{"refilled_asks_store", t0.Add(100 * time.Millisecond), 1, 0, 1},
	} {
		d, err := l.AllowAt(ctx, tc.at, Request{}, tc.cost)
		if err != nil {
			t.Fatal(err)
		}
		got := s.leases.Load() - calls
		calls += got
		if d.Allowed != (tc.retry == 0) || d.RetryAfter != tc.retry || got != tc.calls {
			t.Fatalf("%s: AllowAt(t0+%v, %d) = allowed %v, RetryAfter %v, %d store calls; want allowed %v, RetryAfter %v, %d calls",
				tc.name, tc.at.Sub(t0), tc.cost, d.Allowed, d.RetryAfter, got, tc.retry == 0, tc.retry, tc.calls)
		}
	}
}

// TestLeaseDrainedBlocks: a refill that drains the shared bucket makes
// the requests the lease cannot serve deny locally until it refills,
// instead of each asking the store in turn.
func TestLeaseDrainedBlocks(t *testing.T) {
	ctx := context.Background()
	s := newLeaseStore(nil)
	l := leaseLimiter(t, leasePolicy(t, globalLeased(100)), WithStore(s))
	for _, tc := range []struct {
		name      string
		at        time.Duration
		cost      int64
		allowed   bool
		remaining int64
		retry     time.Duration
		calls     int64
	}{
		{"first_lease", 0, 60, true, 0, 0, 1},
		{"drains_the_bucket", 0, 30, true, 10, 0, 1}, // asks for 100, gets the 40 left
		{"short_by_one_local", 0, 11, false, 10, 100 * time.Millisecond, 0},
		{"from_the_lease", 0, 10, true, 0, 0, 0},
		{"refilled_one", 100 * time.Millisecond, 1, true, 0, 0, 1},
	} {
		calls := s.leases.Load()
		d, err := l.AllowAt(ctx, t0.Add(tc.at), Request{}, tc.cost)
		if err != nil {
			t.Fatal(err)
		}
		got := s.leases.Load() - calls
		if d.Allowed != tc.allowed || d.Remaining != tc.remaining || d.RetryAfter != tc.retry || got != tc.calls {
			t.Fatalf("%s: AllowAt(t0+%v, %d) = allowed %v, Remaining %d, RetryAfter %v, %d store calls; want %v, %d, %v, %d",
				tc.name, tc.at, tc.cost, d.Allowed, d.Remaining, d.RetryAfter, got, tc.allowed, tc.remaining, tc.retry, tc.calls)
		}
	}
}

// TestLeaseEndsAtTTL: a lease past its TTL gives its tokens back before
// the next lease is taken.
func TestLeaseEndsAtTTL(t *testing.T) {
	ctx := context.Background()
	s := newLeaseStore(nil)
	l := leaseLimiter(t, leasePolicy(t, globalLeased(10)), WithStore(s))
	rule := l.Policy().Rules()[0]
	l.AllowAt(ctx, t0, Request{}, 1)
	l.AllowAt(ctx, t0, Request{}, 1) // a lease of 10: 9 held
	if got := s.tokens(&rule.Limit, "global", "*", t0); got != 89 {
		t.Fatalf("shared bucket holds %d, want 89", got)
	}
	t1 := t0.Add(time.Minute) // the lease of the second call ends
	d, err := l.AllowAt(ctx, t1, Request{}, 1)
	if err != nil || !d.Allowed {
		t.Fatalf("AllowAt(t1) = %+v, %v", d, err)
	}
	if s.returns.Load() != 1 || s.returned.Load() != 9 {
		t.Fatalf("%d returns of %d tokens, want 1 of 9", s.returns.Load(), s.returned.Load())
	}
}

// TestLeaseTimerReturnsIdle: a lease that nobody touches is given back by
// its timer at its TTL, and the limiter forgets the bucket.
func TestLeaseTimerReturnsIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := newLeaseStore(nil)
		l := leaseLimiter(t, leasePolicy(t, globalLeased(10)), WithStore(s))
		l.Allow(ctx, Request{})
		l.Allow(ctx, Request{})
		if s.returns.Load() != 0 {
			t.Fatal("returned before the TTL")
		}
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		if s.returns.Load() != 1 || s.returned.Load() != 9 {
			t.Fatalf("after the TTL: %d returns of %d tokens, want 1 of 9", s.returns.Load(), s.returned.Load())
		}
		if e := l.leases.peek("global", "*"); e != nil {
			t.Fatal("the idle lease is still in the table")
		}
	})
}

// waitForgotten lets a minute pass in t's synctest bubble, past every
// lease timer, and fails t for each of ls that still holds an entry.
func waitForgotten(t *testing.T, ls ...*Limiter) {
	t.Helper()
	time.Sleep(time.Minute)
	synctest.Wait()
	for i, l := range ls {
		if n := len(l.leases.all()); n != 0 {
			t.Errorf("a minute later, limiter %d holds %d lease entries, want none", i, n)
		}
	}
}

// TestLeaseForgetsIdleBuckets: a bucket nobody asks for leaves the table,
// whatever its last refill said (granted, denied, failed, after the lease
// ended or while its timer fired), and every token its lease held goes
// back: the shared bucket then holds the burst less what was admitted.
func TestLeaseForgetsIdleBuckets(t *testing.T) {
	// 10 tokens an hour, burst 10: none refills during a case.
	r := Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerHour(10), 10), Lease: Lease{Max: 5, TTL: time.Second}}
	t1 := t0.Add(2 * time.Second) // leases taken at t0 have ended
	type step struct {
		on      string    // "a" or "b": the instance asked
		at      time.Time // the limiter's clock
		cost    int64
		allowed bool
		down    bool // TakeLease fails (FailOpen: allowed, nothing taken)
		slow    bool // the refill is held until the lease's timer has fired
	}
	for _, tc := range []struct {
		name     string
		steps    []step
		admitted int64 // tokens taken by admitted requests
	}{
		{"granted", []step{
			{on: "a", at: t0, cost: 1, allowed: true},
			{on: "a", at: t0, cost: 1, allowed: true}, // a lease of 5: 4 held
		}, 2},
		{"denied", []step{
			{on: "b", at: t0, cost: 10, allowed: true}, // drains the bucket
			{on: "a", at: t0, cost: 1},
		}, 10},
		{"failed", []step{
			{on: "a", at: t0, cost: 1, allowed: true, down: true},
		}, 0},
		{"ended_then_denied", []step{
			{on: "a", at: t0, cost: 1, allowed: true},
			{on: "a", at: t0, cost: 1, allowed: true},
			{on: "a", at: t1, cost: 9}, // the 4 held go back: 8 < 9
		}, 2},
		{"ended_then_failed", []step{
			{on: "a", at: t0, cost: 1, allowed: true},
			{on: "a", at: t0, cost: 1, allowed: true},
			{on: "a", at: t1, cost: 1, allowed: true, down: true},
		}, 2},
		{"ended_then_denied_locally", []step{
			{on: "a", at: t0, cost: 6, allowed: true},
			{on: "a", at: t0, cost: 4, allowed: true}, // asks for 5, drains the 4 left
			{on: "a", at: t1, cost: 1},                // nothing held to give back
		}, 10},
		{"timer_fired_during_denied_refill", []step{
			{on: "a", at: t0, cost: 1, allowed: true},
			{on: "a", at: t0, cost: 1, allowed: true},
			{on: "b", at: t0, cost: 4, allowed: true}, // drains the bucket
			{on: "a", at: t0, cost: 5, slow: true},    // the 4 held stay held
		}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				s := newLeaseStore(NewManualClock(t0))
				p := leasePolicy(t, r)
				a, b := leaseLimiter(t, p, WithStore(s)), leaseLimiter(t, p, WithStore(s))
				for i, st := range tc.steps {
					l := a
					if st.on == "b" {
						l = b
					}
					if st.down {
						s.setDown(errors.New("lease node down"))
					}
					var d Decision
					if st.slow {
						gate, entered := make(chan struct{}), make(chan struct{}, 1)
						s.mu.Lock()
						s.gate, s.entered = gate, entered
						s.mu.Unlock()
						done := make(chan struct{})
						go func() {
							d, _ = l.AllowAt(ctx, st.at, Request{User: "u"}, st.cost)
							close(done)
						}()
						<-entered
						s.mu.Lock()
						s.gate = nil
						s.mu.Unlock()
						time.Sleep(2 * r.Lease.TTL)
						synctest.Wait()
						close(gate)
						<-done
					} else {
						d, _ = l.AllowAt(ctx, st.at, Request{User: "u"}, st.cost)
					}
					s.setDown(nil)
					if d.Allowed != st.allowed {
						t.Fatalf("step %d: %s.AllowAt(t0+%v, %d) = allowed %v, want %v", i, st.on, st.at.Sub(t0), st.cost, d.Allowed, st.allowed)
					}
				}
				waitForgotten(t, a, b)
				lim := p.Rules()[0].Limit
				if got, want := s.tokens(&lim, "per-user", "u", t1), 10-tc.admitted; got != want {
					t.Errorf("the shared bucket holds %d, want %d (10 less the %d admitted)", got, want, tc.admitted)
				}
			})
		})
	}
}

// TestLeaseForgetsManyIdentities: on a leased rule keyed per user, every
// user's entry is forgotten once nobody asks for it: those whose refill
// another instance's use denied, and those seen while TakeLease failed.
func TestLeaseForgetsManyIdentities(t *testing.T) {
	const users = 1000
	t.Run("denied", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			s := newLeaseStore(nil)
			r := Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1), Lease: Lease{Max: 1, TTL: time.Second}}
			p := leasePolicy(t, r)
			a, b := leaseLimiter(t, p, WithStore(s)), leaseLimiter(t, p, WithStore(s))
			for i := range users {
				req := Request{User: "user-" + strconv.Itoa(i)}
				if d, err := a.Allow(ctx, req); err != nil || !d.Allowed {
					t.Fatalf("a.Allow(%s) = %+v, %v; want allowed", req.User, d, err)
				}
				if d, err := b.Allow(ctx, req); err != nil || d.Allowed {
					t.Fatalf("b.Allow(%s) = %+v, %v; want denied: a took the burst", req.User, d, err)
				}
			}
			waitForgotten(t, a, b)
		})
	})
	t.Run("failed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			s := newLeaseStore(nil)
			r := Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(10), 10), Lease: Lease{Max: 5, TTL: time.Second}}
			l := leaseLimiter(t, leasePolicy(t, r), WithStore(s))
			s.setFail(errors.New("store down"))
			for i := range users {
				l.Allow(ctx, Request{User: "user-" + strconv.Itoa(i)})
			}
			s.setFail(nil)
			waitForgotten(t, l)
		})
	})
}

// TestLeaseKeepsBucketWhileDenied: an entry that denies requests locally
// (the shared bucket is short) stays while they keep coming, sparing the
// store a call each, and is forgotten a TTL or two after the last.
func TestLeaseKeepsBucketWhileDenied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := newLeaseStore(NewManualClock(t0))
		r := Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerHour(10), 10), Lease: Lease{Max: 5, TTL: time.Second}}
		p := leasePolicy(t, r)
		a, b := leaseLimiter(t, p, WithStore(s)), leaseLimiter(t, p, WithStore(s))
		req := Request{User: "u"}
		if d, err := b.AllowAt(ctx, t0, req, 10); err != nil || !d.Allowed {
			t.Fatalf("b.AllowAt(t0, 10) = %+v, %v; want allowed", d, err)
		}
		start := time.Now()
		for _, tc := range []struct {
			at    time.Duration // since t0, on the limiter's clock and the timers'
			held  bool          // a's entry is in the table before the request
			calls int64         // store calls the request makes
		}{
			{0, false, 1},
			{500 * time.Millisecond, true, 0},
			{1500 * time.Millisecond, true, 0},  // the timer at 1s kept it
			{3500 * time.Millisecond, false, 1}, // the timer at 3s forgot it
		} {
			time.Sleep(start.Add(tc.at).Sub(time.Now()))
			synctest.Wait()
			if held := a.leases.peek("per-user", "u") != nil; held != tc.held {
				t.Fatalf("t0+%v: a's entry in the table = %v, want %v", tc.at, held, tc.held)
			}
			calls := s.leases.Load()
			d, err := a.AllowAt(ctx, t0.Add(tc.at), req, 1)
			if got := s.leases.Load() - calls; err != nil || d.Allowed || got != tc.calls {
				t.Fatalf("t0+%v: a.AllowAt(1) = allowed %v, %v, %d store calls; want denied, %d calls", tc.at, d.Allowed, err, got, tc.calls)
			}
		}
		waitForgotten(t, a)
	})
}

// TestLeaseForgetsPutBack: tokens a denied request puts back into an entry
// whose lease has ended go back to the store before the entry is dropped.
// The request takes from the lease, and while its unleased tier is in the
// store another request ends the lease and is denied a refill.
func TestLeaseForgetsPutBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := &hookStore{leaseStore: newLeaseStore(NewManualClock(t0))}
		global := Rule{Name: "global", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(10), 10), Lease: Lease{Max: 5, TTL: time.Second}}
		p := leasePolicy(t, global, Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)})
		a, b := leaseLimiter(t, p, WithStore(s)), leaseLimiter(t, p, WithStore(s))
		t1 := t0.Add(2 * time.Second) // the lease of t0 has ended
		for i, tc := range []struct {
			l       *Limiter
			req     Request
			cost    int64
			allowed bool
		}{
			{a, Request{}, 1, true},
			{a, Request{}, 1, true}, // a lease of 5: 4 held
			{b, Request{}, 4, true}, // drains the bucket
			{a, Request{User: "u"}, 1, true},
		} {
			if d, err := tc.l.AllowAt(ctx, t0, tc.req, tc.cost); err != nil || d.Allowed != tc.allowed {
				t.Fatalf("step %d: AllowAt(t0, %d) = %+v, %v; want allowed %v", i, tc.cost, d, err, tc.allowed)
			}
		}
		s.hook = func() {
			s.hook = nil
			// Gives back the 2 left, and is denied 4.
			if d, err := a.AllowAt(ctx, t1, Request{}, 4); err != nil || d.Allowed {
				t.Errorf("AllowAt(t1, 4) during the per-user take = %+v, %v; want denied", d, err)
			}
		}
		if d, err := a.AllowAt(ctx, t0, Request{User: "u"}, 1); err != nil || d.Allowed || d.Rule != "per-user" {
			t.Fatalf("second request of u = %+v, %v; want denied by per-user", d, err)
		}
		waitForgotten(t, a, b)
		lim := p.Rules()[0].Limit
		if got := s.tokens(&lim, "global", "*", t1); got != 3 {
			t.Fatalf("the shared bucket holds %d, want 3 (10 less the 7 admitted)", got)
		}
	})
}

// TestLeaseForgetsUnderLoad: 3 instances, 8 goroutines each, on 32 users'
// leased buckets beside 4 unleased per-IP ones, while refills are granted,
// denied (the users' buckets run dry) and fail (TakeLease down now and
// then), the per-IP tier denies requests that took from a lease, leases
// end by their timers and ReturnLeases ends them all. No token is lost or
// counted twice: once every timer has fired, each bucket holds its burst
// less what was admitted on it; and no entry is left.
func TestLeaseForgetsUnderLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			instances, goroutines, requests = 3, 8, 600
			users, ips                      = 32, 4
			userBurst, ipBurst              = 300, 60
		)
		// One token an hour: none refills during the run.
		p := leasePolicy(t,
			Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), userBurst), Lease: Lease{Max: 4, TTL: 2 * time.Millisecond}},
			Rule{Name: "per-ip", Scope: ScopeIP, Limit: TokenBucket(PerHour(1), ipBurst)})
		s := newLeaseStore(nil)
		ls := make([]*Limiter, instances)
		for i := range ls {
			ls[i] = leaseLimiter(t, p, WithStore(s), WithFailureMode(FailClosed))
		}
		var (
			userTaken [users]atomic.Int64
			ipTaken   [ips]atomic.Int64
			outcomes  sync.Map // "allowed", a denying rule's name, "failed": *atomic.Int64
		)
		count := func(k string) {
			n, _ := outcomes.LoadOrStore(k, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		}
		ctx := context.Background()
		var wg sync.WaitGroup
		for i, l := range ls {
			for g := range goroutines {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
					for range requests {
						u, ip := rng.IntN(users), rng.IntN(2*ips)
						req := Request{User: "user-" + strconv.Itoa(u)}
						if ip < ips {
							req.IP = "10.0.0." + strconv.Itoa(ip)
						}
						cost := 1 + rng.Int64N(3)
						d, err := l.AllowN(ctx, req, cost)
						switch {
						case err != nil:
							count("failed")
						case d.Allowed:
							count("allowed")
							userTaken[u].Add(cost)
							if ip < ips {
								ipTaken[ip].Add(cost)
							}
						default:
							count(d.Rule)
						}
						time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
					}
				})
			}
		}
		stop := make(chan struct{})
		var side sync.WaitGroup
		side.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-time.After(3 * time.Millisecond):
				}
				s.setDown(errors.New("lease node down"))
				time.Sleep(500 * time.Microsecond)
				s.setDown(nil)
				if err := ls[k%instances].ReturnLeases(ctx); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Wait()
		close(stop)
		side.Wait()
		waitForgotten(t, ls...)

		for _, k := range []string{"allowed", "per-user", "per-ip", "failed"} {
			n, _ := outcomes.Load(k)
			if n == nil || n.(*atomic.Int64).Load() == 0 {
				t.Errorf("no request %s: the run did not exercise it", k)
			}
		}
		if s.returns.Load() == 0 {
			t.Error("no tokens given back: the run did not exercise it")
		}
		now := time.Now()
		rules := p.Rules()
		for u := range users {
			if got, want := s.tokens(&rules[0].Limit, "per-user", "user-"+strconv.Itoa(u), now), userBurst-userTaken[u].Load(); got != want {
				t.Errorf("user-%d's bucket holds %d, want %d (%d less the %d admitted)", u, got, want, userBurst, userTaken[u].Load())
			}
		}
		for ip := range ips {
			if got, want := s.tokens(&rules[1].Limit, "per-ip", "10.0.0."+strconv.Itoa(ip), now), ipBurst-ipTaken[ip].Load(); got != want {
				t.Errorf("10.0.0.%d's bucket holds %d, want %d (%d less the %d admitted)", ip, got, want, ipBurst, ipTaken[ip].Load())
			}
		}
	})
}

// TestLeaseAllOrNothing: a request that an unleased tier denies gives its
// leased tokens back to the lease.
func TestLeaseAllOrNothing(t *testing.T) {
	ctx := context.Background()
	s := newLeaseStore(nil)
	p := leasePolicy(t, globalLeased(10), Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)})
	l := leaseLimiter(t, p, WithStore(s))
	req := Request{User: "u"}
	l.AllowAt(ctx, t0, Request{}, 1) // no user: global only; a lease of 1
	if d, _ := l.AllowAt(ctx, t0, req, 1); !d.Allowed {
		t.Fatalf("first request of u denied: %+v", d)
	}
	held := l.leases.peek("global", "*").tokens.Load()
	d, err := l.AllowAt(ctx, t0, req, 1)
	if err != nil || d.Allowed || d.Rule != "per-user" {
		t.Fatalf("second request of u = %+v, %v; want denied by per-user", d, err)
	}
	if got := l.leases.peek("global", "*").tokens.Load(); got != held {
		t.Fatalf("lease holds %d after the denial, want %d: nothing taken", got, held)
	}
	if tr := d.TierAt(0); tr.Rule.Name != "global" || !tr.Allowed || tr.Remaining != held {
		t.Fatalf("global tier of the denial = %+v, want allowed with Remaining %d", tr, held)
	}
}

// TestLeaseFailureModes: a failing TakeLease goes through the failure mode.
func TestLeaseFailureModes(t *testing.T) {
	ctx := context.Background()
	down := errors.New("store down")
	for _, tc := range []struct {
		mode    FailureMode
		allowed bool
		err     error
	}{
		{FailOpen, true, nil},
		{FailClosed, false, ErrUnavailable},
		{FailFallback, true, nil},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			s := newLeaseStore(nil)
			s.setFail(down)
			l := leaseLimiter(t, leasePolicy(t, globalLeased(10)), WithStore(s), WithFailureMode(tc.mode))
			d, err := l.AllowAt(ctx, t0, Request{}, 1)
			if d.Allowed != tc.allowed || !errors.Is(err, tc.err) || !d.Degraded || !errors.Is(d.Err, down) {
				t.Fatalf("AllowAt = allowed %v, degraded %v, Err %v, error %v; want allowed %v, degraded, Err %v, error %v", d.Allowed, d.Degraded, d.Err, err, tc.allowed, down, tc.err)
			}
		})
	}
	t.Run("fallback_decides", func(t *testing.T) {
		s := newLeaseStore(nil)
		s.setFail(down)
		l := leaseLimiter(t, leasePolicy(t, globalLeased(10)), WithStore(s), WithFailureMode(FailFallback))
		admitted := 0
		for range 120 {
			if d, _ := l.AllowAt(ctx, t0, Request{}, 1); d.Allowed {
				admitted++
			}
		}
		if admitted != 100 {
			t.Fatalf("fallback admitted %d at one instant, want the burst, 100", admitted)
		}
	})
}

// TestLeaseOneRefillInFlight: requests that find the lease empty while a
// refill is in flight wait for it instead of calling the store.
func TestLeaseOneRefillInFlight(t *testing.T) {
	ctx := context.Background()
	s := newLeaseStore(nil)
	l := leaseLimiter(t, leasePolicy(t, globalLeased(100)), WithStore(s))
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	s.mu.Lock()
	s.gate, s.entered = gate, entered
	s.mu.Unlock()
	const n = 16
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for range n {
		wg.Go(func() {
			if d, err := l.AllowAt(ctx, t0, Request{}, 1); err == nil && d.Allowed {
				admitted.Add(1)
			}
		})
	}
	// Let the first refill through once the others queue behind it; the
	// refills after it are not held.
	<-entered
	s.mu.Lock()
	s.gate = nil
	s.mu.Unlock()
	close(gate)
	wg.Wait()
	if admitted.Load() != n {
		t.Fatalf("admitted %d of %d", admitted.Load(), n)
	}
	// Each refill serves the requests that queued behind it: far fewer
	// calls than requests (the first lease is 1 token, the next one Max).
	if got := s.leases.Load(); got > 3 {
		t.Fatalf("%d TakeLease calls for %d requests, want at most 3", got, n)
	}
}

// TestLeaseSize: the lease follows the use of the last TTL, between 1 and
// Max.
func TestLeaseSize(t *testing.T) {
	ls := Lease{Max: 1000, TTL: time.Second}
	base := t0.UnixNano()
	for _, tc := range []struct {
		name            string
		age, sinceStart int64 // of the lease record, and of its window, ns
		cur, prev       int64
		want            int64
	}{
		{"new", 0, 0, 0, 0, 1},
		{"young_extrapolated", int64(100 * time.Millisecond), int64(100 * time.Millisecond), 50, 0, 500},
		{"young_capped", int64(time.Millisecond), int64(time.Millisecond), 50, 0, 1000},
		{"steady", int64(10 * time.Second), int64(500 * time.Millisecond), 100, 200, 200},
		{"idle", int64(10 * time.Second), int64(500 * time.Millisecond), 0, 0, 1},
	} {
		e := &lease{born: base - tc.age, winStart: base - tc.sinceStart, cur: tc.cur, prev: tc.prev}
		if got := e.size(base, ls); got != tc.want {
			t.Errorf("%s: size = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestLeasePolicyChange: a new policy with the same numbers keeps the
// lease; other numbers end it, giving its tokens back.
func TestLeasePolicyChange(t *testing.T) {
	ctx := context.Background()
	s := newLeaseStore(nil)
	l := leaseLimiter(t, leasePolicy(t, globalLeased(10)), WithStore(s))
	l.AllowAt(ctx, t0, Request{}, 1)
	l.AllowAt(ctx, t0, Request{}, 1) // 9 held
	if err := l.SetPolicy(leasePolicy(t, globalLeased(10))); err != nil {
		t.Fatal(err)
	}
	calls := s.leases.Load()
	if d, _ := l.AllowAt(ctx, t0, Request{}, 1); !d.Allowed || d.Remaining != 8 || s.leases.Load() != calls {
		t.Fatalf("same numbers: Remaining %d, %d more store calls; want 8 from the same lease, none", d.Remaining, s.leases.Load()-calls)
	}
	r := globalLeased(10)
	r.Limit = TokenBucket(PerSecond(20), 100)
	if err := l.SetPolicy(leasePolicy(t, r)); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.AllowAt(ctx, t0, Request{}, 1); !d.Allowed || s.returned.Load() != 8 {
		t.Fatalf("new numbers: allowed %v, %d tokens returned; want allowed, the 8 held returned", d.Allowed, s.returned.Load())
	}
}

// TestLeasePolicyChangeReturnsUnderOldLimit: tokens a lease holds when a
// new policy changes its limit go back under the limit they were taken
// under. Half of a burst of 100 at 100/s used, then burst 10 at 10/s (the
// same fill time of 1s): the bucket is half full, 5 tokens, as an
// unleased one would be; given back as tokens of the new limit, the
// unused ones would fill it.
func TestLeasePolicyChangeReturnsUnderOldLimit(t *testing.T) {
	ctx := context.Background()
	s := newLeaseStore(nil)
	rule := func(rate, burst int64) Rule {
		return Rule{Name: "global", Scope: ScopeGlobal, Limit: TokenBucket(PerSecond(rate), burst), Lease: Lease{Max: burst, TTL: time.Minute}}
	}
	l := leaseLimiter(t, leasePolicy(t, rule(100, 100)), WithStore(s))
	for i := range 50 {
		if d, err := l.AllowAt(ctx, t0, Request{}, 1); err != nil || !d.Allowed {
			t.Fatalf("request %d under the old limit: AllowAt(t0, 1) = %+v, %v; want allowed", i, d, err)
		}
	}
	if err := l.SetPolicy(leasePolicy(t, rule(10, 10))); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 30 {
		d, err := l.AllowAt(ctx, t0, Request{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("under the new limit, at t0: %d of 30 admitted, want 5 (half the burst of 10)", admitted)
	}
}

// TestLeaseCostAboveBurst: a cost the bucket can never hold is denied at
// once, without a store call.
func TestLeaseCostAboveBurst(t *testing.T) {
	s := newLeaseStore(nil)
	l := leaseLimiter(t, leasePolicy(t, globalLeased(10)), WithStore(s))
	d, err := l.AllowAt(context.Background(), t0, Request{}, 101)
	if err != nil || d.Allowed || d.Reason != ReasonCostExceedsLimit || s.leases.Load() != 0 {
		t.Fatalf("AllowAt(cost 101) = %+v, %v, %d store calls; want cost_exceeds_limit, no call", d, err, s.leases.Load())
	}
}

// TestLeaseReadAndReturn: a read reports what the instance holds without a
// store call; ReturnLeases gives every held token back.
func TestLeaseReadAndReturn(t *testing.T) {
	ctx := context.Background()
	s := newLeaseStore(NewManualClock(t0))
	l := leaseLimiter(t, leasePolicy(t, globalLeased(10)), WithStore(s))
	rule := l.Policy().Rules()[0]
	l.AllowAt(ctx, t0, Request{}, 1)
	l.AllowAt(ctx, t0, Request{}, 1)
	calls := s.leases.Load()
	if d, err := l.AllowAt(ctx, t0, Request{}, 0); err != nil || !d.Allowed || d.Remaining != 9 || s.leases.Load() != calls {
		t.Fatalf("read = %+v, %v; want allowed, Remaining 9, no store call", d, err)
	}
	if err := l.ReturnLeases(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.tokens(&rule.Limit, "global", "*", t0); got != 98 {
		t.Fatalf("after ReturnLeases the bucket holds %d, want 98 (2 used)", got)
	}
}
