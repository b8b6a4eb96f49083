package core

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// The Wait tests run in a synctest bubble: timers and the memory store's
// monotonic clock both read the bubble's fake time, so nothing sleeps.

func TestWaitShaping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newTestLimiter(t, nil, Rule{Name: "queue", Scope: ScopeGlobal, Limit: Shaping(PerSecond(10), 1, time.Second)})
		ctx := context.Background()
		start := time.Now()
		var delays []time.Duration
		for range 4 {
			d, err := l.Wait(ctx, Request{})
			if err != nil {
				t.Fatal(err)
			}
			delays = append(delays, d.Delay)
		}
		// One token at once, then one every 100ms, in order.
		want := []time.Duration{0, 100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}
		for i := range want {
			if delays[i] != want[i] {
				t.Errorf("Wait %d delay = %v, want %v", i, delays[i], want[i])
			}
		}
		if got := time.Since(start); got != 300*time.Millisecond {
			t.Errorf("four Waits took %v, want 300ms", got)
		}
	})
}

func TestWaitRetriesDenials(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newTestLimiter(t, nil, Rule{Name: "r", Scope: ScopeGlobal, Limit: TokenBucket(PerSecond(2), 1)})
		ctx := context.Background()
		start := time.Now()
		for range 3 {
			if _, err := l.Wait(ctx, Request{}); err != nil {
				t.Fatal(err)
			}
		}
		if got := time.Since(start); got != time.Second {
			t.Errorf("three Waits at 2/s with burst 1 took %v, want 1s", got)
		}
	})
}

func TestWaitDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newTestLimiter(t, nil, Rule{Name: "r", Scope: ScopeGlobal, Limit: TokenBucket(PerMinute(1), 1)})
		l.Allow(context.Background(), Request{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := l.Wait(ctx, Request{})
		if !errors.Is(err, ErrLimited) || time.Since(start) != 0 {
			t.Fatalf("Wait = %v after %v, want ErrLimited at once", err, time.Since(start))
		}
		if _, err := l.WaitN(context.Background(), Request{}, 2); !errors.Is(err, ErrLimited) {
			t.Fatalf("WaitN above burst = %v, want ErrLimited", err)
		}
	})
}

// TestWaitShapingDeadline: a shaping delay that would outlast the deadline
// is ErrLimited at once, with a denial; the slot it took stays taken.
func TestWaitShapingDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newTestLimiter(t, nil, Rule{Name: "queue", Scope: ScopeGlobal, Limit: Shaping(Every(2*time.Second), 1, time.Minute)})
		l.Allow(context.Background(), Request{})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		d, err := l.Wait(ctx, Request{})
		if !errors.Is(err, ErrLimited) || time.Since(start) != 0 {
			t.Fatalf("Wait = %v after %v, want ErrLimited at once", err, time.Since(start))
		}
		if d.Allowed || d.Reason != ReasonLimited || d.RetryAfter != 2*time.Second || d.Delay != 0 {
			t.Errorf("Wait decision: allowed %v, reason %v, RetryAfter %v, Delay %v; want false, limited, 2s, 0", d.Allowed, d.Reason, d.RetryAfter, d.Delay)
		}
		// The slot the refused Wait took stays reserved.
		if d, err := l.Wait(context.Background(), Request{}); err != nil || d.Delay != 4*time.Second {
			t.Errorf("next Wait: delay %v, %v; want 4s, nil", d.Delay, err)
		}
	})
}

func TestWaitCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newTestLimiter(t, nil, Rule{Name: "r", Scope: ScopeGlobal, Limit: TokenBucket(PerMinute(1), 1)})
		l.Allow(context.Background(), Request{})
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(time.Second) // fake time inside the bubble
			cancel()
		}()
		if _, err := l.Wait(ctx, Request{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
	})
}
