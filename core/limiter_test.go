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
