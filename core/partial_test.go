package core

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// domainStore is a store of two failure domains on one MemoryStore: while
// down is set, a take with any bucket of a rule named "far*" fails for those
// buckets with a PartialError and changes nothing; the rest of the take is
// never applied. bad, when set, replaces the failed indices.
type domainStore struct {
	m     *MemoryStore
	down  atomic.Bool
	bad   []int
	calls atomic.Int64
}

func (s *domainStore) Take(ctx context.Context, t *Take) error {
	s.calls.Add(1)
	if s.down.Load() {
		failed := farBuckets(t)
		if s.bad != nil {
			failed = s.bad
		}
		if len(failed) > 0 {
			return &PartialError{Failed: failed, Err: errDown}
		}
	}
	return s.m.Take(ctx, t)
}

// farBuckets returns the indices of t's buckets of rules named "far*",
// those of the failed domain.
func farBuckets(t *Take) []int {
	var failed []int
	for i, b := range t.Buckets {
		if strings.HasPrefix(b.Rule, "far") {
			failed = append(failed, i)
		}
	}
	return failed
}

// allowedOf returns how many of n requests like req, at t0, l allows.
func allowedOf(l *Limiter, n int, req Request) int {
	allowed := 0
	for range n {
		if d, _ := l.AllowAt(context.Background(), t0, req, 1); d.Allowed {
			allowed++
		}
	}
	return allowed
}

// TestPartialFailure: a request whose tiers span a failed domain ("far",
// burst 1 on the fallback) and a healthy one ("near", burst 2 on the store)
// is decided by the failure mode for the failed tier only.
func TestPartialFailure(t *testing.T) {
	rules := []Rule{
		{Name: "near", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(1), 2)},
		{Name: "far", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)},
	}
	type want struct {
		allowed bool
		reason  Reason
		tiers   []string // the rules of Decision.Tiers
		err     error    // from AllowAt
	}
	for _, tc := range []struct {
		mode  FailureMode
		steps []want // three decisions by different users, then a fourth after the domain is back
	}{
		{FailOpen, []want{
			// far counts as allowing; near's burst of 2 still applies.
			{true, ReasonNone, []string{"near"}, nil},
			{true, ReasonNone, []string{"near"}, nil},
			{false, ReasonLimited, []string{"near"}, nil},
		}},
		{FailClosed, []want{
			{false, ReasonUnavailable, nil, ErrUnavailable},
			{false, ReasonUnavailable, nil, ErrUnavailable},
			{false, ReasonUnavailable, nil, ErrUnavailable},
		}},
		{FailFallback, []want{
			// Each user's far bucket is new on the fallback; near limits.
			{true, ReasonNone, []string{"near", "far"}, nil},
			{true, ReasonNone, []string{"near", "far"}, nil},
			{false, ReasonLimited, []string{"near", "far"}, nil},
		}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			m, _ := NewMemoryStore()
			s := &domainStore{m: m}
			s.down.Store(true)
			l := newTestLimiter(t, []Option{WithStore(s), WithFailureMode(tc.mode)}, rules...)
			ctx := context.Background()
			for i, w := range tc.steps {
				d, err := l.AllowAt(ctx, t0, Request{User: string(rune('a' + i))}, 1)
				if !errors.Is(err, w.err) || (w.err == nil && err != nil) {
					t.Fatalf("step %d: err = %v, want %v", i, err, w.err)
				}
				if d.Allowed != w.allowed || d.Reason != w.reason || !d.Degraded || !errors.Is(d.Err, errDown) {
					t.Fatalf("step %d: %+v; want allowed %v, reason %v, degraded with the store's error", i, d, w.allowed, w.reason)
				}
				var got []string
				for _, ts := range d.Tiers() {
					got = append(got, ts.Rule.Name)
				}
				if strings.Join(got, ",") != strings.Join(w.tiers, ",") {
					t.Fatalf("step %d: tiers %v, want %v", i, got, w.tiers)
				}
			}
			// What the healthy domain holds now: near consumed only by
			// admitted requests.
			s.down.Store(false)
			wantLeft := int64(0)
			if tc.mode == FailClosed {
				wantLeft = 2
			}
			if got := nearLeft(t, m, l); got != wantLeft {
				t.Fatalf("near has %d tokens left on the store, want %d", got, wantLeft)
			}
		})
	}
}

// TestPartialFallbackDenies: when the fallback denies the failed tier, the
// healthy tier is not called, so consumes nothing.
func TestPartialFallbackDenies(t *testing.T) {
	m, _ := NewMemoryStore()
	s := &domainStore{m: m}
	s.down.Store(true)
	l := newTestLimiter(t, []Option{WithStore(s), WithFailureMode(FailFallback)},
		Rule{Name: "near", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(1), 5)},
		Rule{Name: "far", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)})
	ctx := context.Background()
	if d, err := l.AllowAt(ctx, t0, Request{User: "u"}, 1); err != nil || !d.Allowed {
		t.Fatalf("first: %+v, %v; want allowed", d, err)
	}
	calls := s.calls.Load()
	d, err := l.AllowAt(ctx, t0, Request{User: "u"}, 1)
	if err != nil || d.Allowed || d.Rule != "far" || !d.Degraded {
		t.Fatalf("second: %+v, %v; want denied by far on the fallback", d, err)
	}
	if got := s.calls.Load() - calls; got != 1 {
		t.Fatalf("second: %d store calls, want 1 (the failing one; near is not asked)", got)
	}
	if got := nearLeft(t, m, l); got != 4 {
		t.Fatalf("near has %d tokens left on the store, want 4", got)
	}
}

// nearLeft reads the tokens left in rule near's global bucket on m.
func nearLeft(t *testing.T, m *MemoryStore, l *Limiter) int64 {
	t.Helper()
	st := make([]BucketState, 1)
	b := []Bucket{{Rule: "near", Key: globalKey, Limit: &l.Policy().rules[0].Limit}}
	if err := m.Take(context.Background(), &Take{Now: t0, Buckets: b, States: st}); err != nil {
		t.Fatal(err)
	}
	return st[0].Remaining
}

// TestPartialErrorInvalid: a PartialError that does not name a proper subset
// of the buckets counts as a failure of the whole take.
func TestPartialErrorInvalid(t *testing.T) {
	for _, bad := range [][]int{{0, 1}, {2}, {-1}, {1, 1}, {1, 0}} {
		m, _ := NewMemoryStore()
		s := &domainStore{m: m, bad: bad}
		s.down.Store(true)
		l := newTestLimiter(t, []Option{WithStore(s), WithFailureMode(FailOpen)},
			Rule{Name: "near", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(1), 1)},
			Rule{Name: "far", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)})
		for range 2 {
			d, err := l.AllowAt(context.Background(), t0, Request{User: "u"}, 1)
			if err != nil || !d.Allowed || !d.Degraded || len(d.Tiers()) != 0 {
				t.Fatalf("Failed %v: %+v, %v; want allowed as a whole failure, no tiers", bad, d, err)
			}
		}
		if s.calls.Load() != 2 {
			t.Fatalf("Failed %v: %d store calls, want 2 (no second call per decision)", bad, s.calls.Load())
		}
	}
}

// TestPartialFailureWithShadowTiers: a partial failure beside a shadow tier
// that denies. The shadow tier never denies the client, whatever the
// failure mode left of the decision; the enforced tiers still limit; the
// fallback charges a request once; Degraded and Err say that a failure
// mode decided.
func TestPartialFailureWithShadowTiers(t *testing.T) {
	ctx := context.Background()
	newLimiter := func(mode FailureMode, rules ...Rule) (*Limiter, *domainStore) {
		m, _ := NewMemoryStore()
		s := &domainStore{m: m}
		s.down.Store(true)
		return newTestLimiter(t, []Option{WithStore(s), WithFailureMode(mode)}, rules...), s
	}
	shadow := Rule{Name: "shadow", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(1), 1), Shadow: true}

	t.Run("FailOpen", func(t *testing.T) {
		// far fails and is left out; shadow denies from the second request.
		l, s := newLimiter(FailOpen,
			Rule{Name: "far", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 100)},
			shadow,
			Rule{Name: "near", Scope: ScopeIP, Limit: TokenBucket(PerHour(1), 10)})
		for i := range 3 {
			d, err := l.AllowAt(ctx, t0, Request{User: "u", IP: "192.0.2.1"}, 1)
			if err != nil || !d.Allowed || d.Rule != "near" || !d.Degraded || !errors.Is(d.Err, errDown) || d.ShadowDenied != (i > 0) {
				t.Fatalf("request %d: %+v, %v; want allowed by near, degraded, shadow-denied from the second", i, d, err)
			}
		}
		tk := &Take{Now: t0, Buckets: []Bucket{{Rule: "near", Key: "192.0.2.1", Limit: &l.Policy().Rules()[2].Limit}}, States: make([]BucketState, 1)}
		if err := s.m.Take(ctx, tk); err != nil || tk.States[0].Remaining != 7 {
			t.Errorf("near holds %d (%v), want 7 after 3 requests", tk.States[0].Remaining, err)
		}
	})
	t.Run("FailFallback, the failed tier in shadow", func(t *testing.T) {
		// far, in shadow, fails; the fallback denies it from the second
		// request; near (burst 2) must still limit.
		l, _ := newLimiter(FailFallback,
			Rule{Name: "near", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(1), 2)},
			Rule{Name: "far", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1), Shadow: true})
		allowed := allowedOf(l, 5, Request{User: "u"})
		if allowed != 2 {
			t.Errorf("%d of 5 requests allowed; near has a burst of 2", allowed)
		}
	})
	t.Run("FailFallback, the failed tier enforced", func(t *testing.T) {
		// far (burst 2) fails and the fallback decides it; shadow denies
		// from the second request, which goes ahead and takes far's
		// second token, once.
		l, _ := newLimiter(FailFallback,
			Rule{Name: "far", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 2)},
			shadow)
		for i := range 3 {
			d, err := l.AllowAt(ctx, t0, Request{User: "u"}, 1)
			want := i < 2
			if err != nil || d.Allowed != want || d.Rule != "far" || !d.Degraded {
				t.Fatalf("request %d: %+v, %v; want allowed %v by far, degraded", i, d, err, want)
			}
			if want && d.Remaining != int64(1-i) {
				t.Errorf("request %d: far has %d left, want %d", i, d.Remaining, 1-i)
			}
		}
	})
	t.Run("FailFallback, a malformed partial failure", func(t *testing.T) {
		// Failed out of order: a whole failure, which the fallback
		// decides all or nothing, so a shadow denial there took nothing.
		m, _ := NewMemoryStore()
		s := &domainStore{m: m, bad: []int{1, 0}}
		s.down.Store(true)
		l := newTestLimiter(t, []Option{WithStore(s), WithFailureMode(FailFallback)},
			Rule{Name: "a", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(1), 2)},
			Rule{Name: "b", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 100)},
			Rule{Name: "shadow", Scope: ScopeIP, Limit: TokenBucket(PerHour(1), 1), Shadow: true})
		allowed := allowedOf(l, 6, Request{User: "u", IP: "192.0.2.1"})
		if allowed != 2 {
			t.Errorf("%d of 6 requests allowed; a has a burst of 2", allowed)
		}
	})
	t.Run("FailOpen, a leased tier down", func(t *testing.T) {
		s := newLeaseStore(nil)
		s.setDown(errDown)
		l := newTestLimiter(t, []Option{WithStore(s), WithFailureMode(FailOpen)},
			Rule{Name: "leased", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 100), Lease: Lease{Max: 10, TTL: time.Minute}},
			shadow,
			Rule{Name: "near", Scope: ScopeIP, Limit: TokenBucket(PerHour(1), 10)})
		for i := range 3 {
			if d, err := l.AllowAt(ctx, t0, Request{User: "u", IP: "192.0.2.1"}, 1); err != nil || !d.Allowed || d.Rule == "shadow" {
				t.Fatalf("request %d: %+v, %v; want allowed, never decided by the shadow tier", i, d, err)
			}
		}
	})
}

// farLeaseStore is a leaseStore whose Take fails for the buckets of rules
// named "far*", applying none of the take.
type farLeaseStore struct{ *leaseStore }

func (s farLeaseStore) Take(ctx context.Context, t *Take) error {
	if failed := farBuckets(t); len(failed) > 0 {
		return &PartialError{Failed: failed, Err: errDown}
	}
	return s.leaseStore.Take(ctx, t)
}

// TestLeasedPartialFailureWithShadowTiers: a leased tier beside a tier
// whose store fails and a shadow tier that denies. The leased tier still
// limits under FailFallback, and under FailOpen, with every enforced tier
// left out, the shadow tier's denial is still reported.
func TestLeasedPartialFailureWithShadowTiers(t *testing.T) {
	ctx := context.Background()
	t.Run("FailFallback", func(t *testing.T) {
		l := newTestLimiter(t, []Option{WithStore(farLeaseStore{newLeaseStore(nil)}), WithFailureMode(FailFallback)},
			Rule{Name: "global", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(1), 2), Lease: Lease{Max: 2, TTL: time.Minute}},
			Rule{Name: "far", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 100)},
			Rule{Name: "shadow", Scope: ScopeIP, Limit: TokenBucket(PerHour(1), 1), Shadow: true})
		allowed := allowedOf(l, 6, Request{User: "u", IP: "192.0.2.1"})
		if allowed != 2 {
			t.Errorf("%d of 6 requests allowed; the leased tier global has a burst of 2", allowed)
		}
	})
	shadow := Rule{Name: "shadow", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(1), 1), Shadow: true}
	for _, tc := range []struct {
		name  string
		store Store
		far   Rule
	}{
		{"FailOpen, leased", func() Store { s := newLeaseStore(nil); s.setDown(errDown); return s }(),
			Rule{Name: "far", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 100), Lease: Lease{Max: 10, TTL: time.Minute}}},
		{"FailOpen, partial", func() Store { m, _ := NewMemoryStore(); s := &domainStore{m: m}; s.down.Store(true); return s }(),
			Rule{Name: "far", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 100)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			denials := 0
			l := newTestLimiter(t, []Option{WithStore(tc.store), WithFailureMode(FailOpen), WithDenials(func(context.Context, Denial) { denials++ })}, tc.far, shadow)
			for i := range 3 {
				d, err := l.AllowAt(ctx, t0, Request{User: "u"}, 1)
				if err != nil || !d.Allowed || !d.Degraded || d.ShadowDenied != (i > 0) {
					t.Fatalf("request %d: %+v, %v; want allowed, degraded, shadow-denied from the second", i, d, err)
				}
			}
			if denials != 2 {
				t.Errorf("WithDenials called %d times, want 2: the shadow tier denied the second and third requests", denials)
			}
		})
	}
}
