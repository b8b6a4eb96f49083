package core

import (
	"context"
	"errors"
	"testing"
	"time"
)

// t0 is the first named instant of the timelines below.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestLimiter(t *testing.T, opts []Option, rules ...Rule) *Limiter {
	t.Helper()
	p, err := NewPolicy(rules...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLimiter(p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestSeedTimeline is the corrected timeline of the seed notes: capacity 4,
// rate 2/s, starting full.
func TestSeedTimeline(t *testing.T) {
	l := newTestLimiter(t, nil, Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(2), 4)})
	req := Request{User: "alice"}
	steps := []struct {
		at        time.Duration
		allowed   bool
		remaining int64
		retry     time.Duration
	}{
		{0, true, 3, 0}, {0, true, 2, 0}, {0, true, 1, 0}, {0, true, 0, 0},
		{500 * time.Millisecond, true, 0, 0},
		{time.Second, true, 0, 0},
		{2 * time.Second, true, 1, 0}, {2 * time.Second, true, 0, 0}, {2 * time.Second, false, 0, 500 * time.Millisecond},
	}
	for i, s := range steps {
		d, err := l.AllowAt(context.Background(), t0.Add(s.at), req, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != s.allowed || d.Remaining != s.remaining || d.RetryAfter != s.retry {
			t.Errorf("step %d: AllowAt(t0+%v) = {Allowed:%v Remaining:%d RetryAfter:%v}, want {%v %d %v}",
				i, s.at, d.Allowed, d.Remaining, d.RetryAfter, s.allowed, s.remaining, s.retry)
		}
	}
}

func TestMultiTierAllOrNothing(t *testing.T) {
	l := newTestLimiter(t, nil,
		Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 10)},
		Rule{Name: "per-endpoint", Scope: ScopeEndpoint, Limit: TokenBucket(PerSecond(1), 2)},
	)
	ctx := context.Background()
	a := Request{User: "a", Endpoint: "/x"}
	for i := 0; i < 2; i++ {
		if d, _ := l.AllowAt(ctx, t0, a, 1); !d.Allowed {
			t.Fatalf("request %d denied", i)
		}
	}
	d, _ := l.AllowAt(ctx, t0, a, 1)
	if d.Allowed || d.Rule != "per-endpoint" || d.Scope != ScopeEndpoint {
		t.Fatalf("third request: %+v, want denied by per-endpoint", d)
	}
	// The denied request took nothing from per-user: 8 left, not 7.
	d, _ = l.AllowAt(ctx, t0, Request{User: "a"}, 0)
	if d.Remaining != 8 {
		t.Fatalf("per-user remaining = %d, want 8", d.Remaining)
	}
}

type failingStore struct{ err error }

func (f failingStore) Take(context.Context, *Take) error { return f.err }

func TestFailureModes(t *testing.T) {
	boom := errors.New("boom")
	rule := Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)}
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
			l := newTestLimiter(t, []Option{WithStore(failingStore{boom}), WithFailureMode(tc.mode)}, rule)
			d, err := l.Allow(context.Background(), Request{User: "u"})
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if d.Allowed != tc.allowed || !d.Degraded || !errors.Is(d.Err, boom) {
				t.Fatalf("decision = %+v, want allowed=%v degraded with boom", d, tc.allowed)
			}
		})
	}
}

func TestDecidingTier(t *testing.T) {
	l := newTestLimiter(t, nil,
		Rule{Name: "fast", Scope: ScopeUser, Limit: TokenBucket(PerSecond(10), 1)},
		Rule{Name: "slow", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)},
		Rule{Name: "roomy", Scope: ScopeGlobal, Limit: TokenBucket(PerSecond(1), 100)},
	)
	ctx := context.Background()
	req := Request{User: "u"}
	d, _ := l.AllowAt(ctx, t0, req, 1)
	if !d.Allowed || d.Rule != "fast" || d.Remaining != 0 || len(d.Tiers()) != 3 {
		t.Fatalf("first: %+v, want allowed, decided by the first tier with least remaining", d)
	}
	d, _ = l.AllowAt(ctx, t0, req, 1)
	// Both per-user tiers deny; the one with the longest RetryAfter decides.
	if d.Allowed || d.Rule != "slow" || d.RetryAfter != time.Second || d.Reason != ReasonLimited {
		t.Fatalf("second: %+v, want denied by slow after 1s", d)
	}
	tiers := d.Tiers()
	if tiers[0].Allowed || tiers[0].RetryAfter != 100*time.Millisecond || !tiers[2].Allowed || tiers[2].Remaining != 99 {
		t.Fatalf("tiers = %+v", tiers)
	}
	if ts, ok := d.Tier(); !ok || ts.Rule.Name != "slow" {
		t.Fatalf("Tier() = %+v, %v", ts, ok)
	}
	// A cost no tier can ever hold decides over any retry time.
	d, _ = l.AllowAt(ctx, t0, req, 5)
	if d.Allowed || d.Reason != ReasonCostExceedsLimit || d.RetryAfter != 0 {
		t.Fatalf("cost 5: %+v, want cost exceeds limit", d)
	}
}

func TestManyTiers(t *testing.T) {
	var rules []Rule
	for i := range 6 {
		rules = append(rules, Rule{Name: "r" + string(rune('a'+i)), Scope: ScopeGlobal, Limit: TokenBucket(PerSecond(1), int64(10+i))})
	}
	l := newTestLimiter(t, nil, rules...)
	d, err := l.AllowAt(context.Background(), t0, Request{}, 3)
	if err != nil || !d.Allowed || len(d.Tiers()) != 6 || d.Rule != "ra" || d.Remaining != 7 {
		t.Fatalf("AllowAt = %+v, %v", d, err)
	}
	for i, ts := range d.Tiers() {
		if want := int64(10 + i - 3); ts.Remaining != want {
			t.Errorf("tier %d remaining = %d, want %d", i, ts.Remaining, want)
		}
	}
}

func TestNoRuleApplies(t *testing.T) {
	l := newTestLimiter(t, nil, Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)})
	d, err := l.Allow(context.Background(), Request{IP: "1.2.3.4"})
	if err != nil || !d.Allowed || d.Limit != 0 || len(d.Tiers()) != 0 || d.Rule != "" {
		t.Fatalf("Allow = %+v, %v; want allowed with no tiers", d, err)
	}
}

func TestBadInput(t *testing.T) {
	l := newTestLimiter(t, nil, Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)})
	ctx := context.Background()
	tests := []struct {
		name string
		do   func() error
		want error
	}{
		{"negative cost", func() error { _, err := l.AllowN(ctx, Request{User: "u"}, -1); return err }, ErrInvalidCost},
		{"huge cost", func() error { _, err := l.AllowN(ctx, Request{User: "u"}, MaxCost+1); return err }, ErrInvalidCost},
		{"oversized key", func() error {
			_, err := l.Allow(ctx, Request{User: string(make([]byte, MaxKeyLen+1))})
			return err
		}, ErrInvalidKey},
		{"control character", func() error { _, err := l.Allow(ctx, Request{User: "a\nb"}); return err }, ErrInvalidKey},
		{"time before 1970", func() error { _, err := l.AllowAt(ctx, time.Unix(-1, 0), Request{User: "u"}, 1); return err }, ErrInvalidTime},
		{"zero time", func() error { _, err := l.AllowAt(ctx, time.Time{}, Request{User: "u"}, 1); return err }, ErrInvalidTime},
		{"time past MaxTime", func() error { _, err := l.AllowAt(ctx, MaxTime().Add(1), Request{User: "u"}, 1); return err }, ErrInvalidTime},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestBadInputUnderFailOpen(t *testing.T) {
	// Bad input is an error whatever the failure mode: it is not a store
	// failure to be allowed through.
	l := newTestLimiter(t, []Option{WithStore(failingStore{errors.New("down")})},
		Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)})
	if _, err := l.Allow(context.Background(), Request{User: "a\x00b"}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("error = %v, want ErrInvalidKey", err)
	}
}

func TestObserver(t *testing.T) {
	var seen []Decision
	var users []string
	obs := func(_ context.Context, req *Request, d *Decision) {
		seen = append(seen, *d)
		users = append(users, req.User)
	}
	l := newTestLimiter(t, []Option{WithObserver(obs)}, Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)})
	ctx := context.Background()
	l.AllowAt(ctx, t0, Request{User: "a"}, 1)
	l.AllowAt(ctx, t0, Request{User: "a"}, 1)
	if len(seen) != 2 || !seen[0].Allowed || seen[1].Allowed || users[1] != "a" {
		t.Fatalf("observed %+v for %v", seen, users)
	}
}

func TestSetPolicy(t *testing.T) {
	l := newTestLimiter(t, nil, Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)})
	ctx := context.Background()
	req := Request{User: "u"}
	l.AllowAt(ctx, t0, req, 1)
	p, _ := NewPolicy(Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 3)})
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	// Same name, same bucket: it was empty, and keeps its share of the
	// burst, none. Nothing is written until a take under the new limit is
	// allowed, so the stored state refills as written, under the old
	// limit: full a second later, and so 3 of 3.
	d, _ := l.AllowAt(ctx, t0, req, 0)
	if d.Remaining != 0 || d.Limit != 3 {
		t.Fatalf("after SetPolicy: remaining %d limit %d, want 0 and 3", d.Remaining, d.Limit)
	}
	if d, _ = l.AllowAt(ctx, t0.Add(time.Second), req, 0); d.Remaining != 3 {
		t.Fatalf("a second after SetPolicy: remaining %d, want 3", d.Remaining)
	}
	if err := l.SetPolicy(nil); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("SetPolicy(nil) = %v", err)
	}
}

func TestNewLimiterRejects(t *testing.T) {
	if _, err := NewLimiter(nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NewLimiter(nil) = %v", err)
	}
	p, _ := NewPolicy()
	if _, err := NewLimiter(p, WithFailureMode(FailureMode(9))); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("unknown failure mode: %v", err)
	}
}

func TestFallbackKeepsLimits(t *testing.T) {
	l := newTestLimiter(t, []Option{WithStore(failingStore{errors.New("down")}), WithFailureMode(FailFallback)},
		Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 2)})
	ctx := context.Background()
	var allowed int
	for range 5 {
		d, err := l.AllowAt(ctx, t0, Request{User: "u"}, 1)
		if err != nil || !d.Degraded {
			t.Fatalf("AllowAt = %+v, %v", d, err)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("fallback admitted %d, want the burst of 2", allowed)
	}
}

func TestContextCanceledIsNotAFailure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l := newTestLimiter(t, []Option{WithStore(failingStore{context.Canceled})}, Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)})
	if _, err := l.Allow(ctx, Request{User: "u"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
}

// TestReclaimDelay: a bucket reclaimed at a later time is found new at an
// earlier one unless the store keeps it for the step back.
func TestReclaimDelay(t *testing.T) {
	rule := Rule{Name: "fw", Scope: ScopeUser, Limit: FixedWindow(5, time.Second)}
	p, err := NewPolicy(rule)
	if err != nil {
		t.Fatal(err)
	}
	lim := &p.Rules()[0].Limit
	for _, tc := range []struct {
		name  string
		delay time.Duration
		want  bool // the step back still sees the window's count
	}{
		{"no delay", 0, false},
		{"an hour", time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewMemoryStore(WithShards(1), WithReclaimDelay(tc.delay))
			if err != nil {
				t.Fatal(err)
			}
			take := func(at time.Duration, key string, cost int64) BucketState {
				tk := &Take{Now: t0.Add(at), Cost: cost, Buckets: []Bucket{{Rule: "fw", Key: key, Limit: lim}}, States: make([]BucketState, 1)}
				if err := s.Take(context.Background(), tk); err != nil {
					t.Fatal(err)
				}
				return tk.States[0]
			}
			take(0, "a", 5) // the window [t0, t0+1s) is used up
			// Later inserts sweep the shard at t0+2s, when "a" has expired.
			for i := range 20 {
				take(2*time.Second, "k"+string(rune('a'+i)), 1)
			}
			st := take(500*time.Millisecond, "a", 0) // back inside the first window
			if got := st.Remaining == 0; got != tc.want {
				t.Fatalf("back at t0+500ms: Remaining = %d; want the used-up window kept: %v", st.Remaining, tc.want)
			}
		})
	}
	if _, err := NewMemoryStore(WithReclaimDelay(-time.Second)); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("negative delay: %v", err)
	}
}
