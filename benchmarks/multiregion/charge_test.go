package multiregion

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/adapters/goredis"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// clockLimiter returns a limiter for g on srv whose store decides at
// clock's time.
func clockLimiter(t *testing.T, srv *redistest.Server, g Global, clock core.Clock) *core.Limiter {
	t.Helper()
	s, err := goredis.Open(&redis.UniversalOptions{Addrs: []string{srv.Addr}}, goredis.WithClientClock(clock), goredis.WithMinTTL(minTTL), goredis.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	p, err := policy(g.Rate, g.Burst)
	if err != nil {
		t.Fatal(err)
	}
	l, err := core.NewLimiter(p, core.WithStore(s), core.WithFailureMode(core.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestCharge: a charge takes exactly its cost, past empty, on a real
// Redis, and the bucket then denies until time has refilled the debt, to
// the nanosecond.
func TestCharge(t *testing.T) {
	srv := redistest.Standalone(t)
	g := Global{Rate: 10, Burst: 5} // a token every 100ms, full in 500ms
	t0 := time.Unix(1_700_000_000, 0)
	clock := core.NewManualClock(t0)
	l := clockLimiter(t, srv, g, clock)
	ctx := context.Background()

	steps := []struct {
		name      string
		cost      int64
		wantCalls int64
		wantReset time.Duration // the bucket's time until full, after
	}{
		{"fits: one call", 3, 1, 300 * time.Millisecond},
		{"past empty, in two pieces of at most the burst", 7, 2 + 2, time.Second},
		{"deeper in debt", 12, 2 + 2 + 2, 2200 * time.Millisecond},
	}
	for _, s := range steps {
		calls, err := charge(ctx, l, g, s.cost)
		if err != nil {
			t.Fatalf("%s: charge(%d) = %v", s.name, s.cost, err)
		}
		if calls != s.wantCalls {
			t.Errorf("%s: charge(%d) made %d calls, want %d", s.name, s.cost, calls, s.wantCalls)
		}
		d, err := l.Inspect(ctx, core.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if d.ResetAfter != s.wantReset {
			t.Errorf("%s: after charge(%d), ResetAfter = %v, want %v", s.name, s.cost, d.ResetAfter, s.wantReset)
		}
	}

	// 22 tokens taken from a bucket of 5 at t0: 17 owed, repaid at
	// 100ms each; the first request passes when one token is back, at
	// t0 + 1.8s, and not a nanosecond before.
	for _, tc := range []struct {
		name string
		at   time.Duration
		want bool
	}{
		{"t0", 0, false},
		{"owed tokens repaid, none yet", 1700 * time.Millisecond, false},
		{"a nanosecond early", 1800*time.Millisecond - 1, false},
		{"one token back", 1800 * time.Millisecond, true},
	} {
		clock.Set(t0.Add(tc.at))
		d, err := l.Allow(ctx, core.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != tc.want {
			t.Errorf("%s: Allow at t0+%v = %v, want %v", tc.name, tc.at, d.Allowed, tc.want)
		}
	}
}

// TestChargeContended: charges race with local requests on a frozen clock
// (no refill); however they interleave, the bucket ends owing exactly what
// was taken, the charges and every admitted request.
func TestChargeContended(t *testing.T) {
	srv := redistest.Standalone(t)
	g := Global{Rate: 100, Burst: 20} // a token every 10ms
	t0 := time.Unix(1_700_000_000, 0)
	clock := core.NewManualClock(t0)
	charger := clockLimiter(t, srv, g, clock)
	local := clockLimiter(t, srv, g, clock)
	ctx := context.Background()

	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				d, err := local.Allow(ctx, core.Request{})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	var charged int64
	for _, n := range []int64{3, 7, 25, 1, 40} {
		if _, err := charge(ctx, charger, g, n); err != nil {
			t.Fatalf("charge(%d) = %v", n, err)
		}
		charged += n
	}
	wg.Wait()
	d, err := local.Inspect(ctx, core.Request{})
	if err != nil {
		t.Fatal(err)
	}
	taken := charged + admitted.Load()
	if want := time.Duration(taken) * g.interval(); d.ResetAfter != want {
		t.Errorf("after %d charged and %d admitted, ResetAfter = %v, want %v", charged, admitted.Load(), d.ResetAfter, want)
	}
	if admitted.Load() > g.Burst {
		t.Errorf("%d local requests admitted on a frozen clock, more than the burst %d", admitted.Load(), g.Burst)
	}
}
