package core

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// Limits longer than 100 days (quarterly and yearly quotas) decide in whole
// microseconds, up to MaxSpan (400 days).

const lgDay = 24 * time.Hour

// TestResolution: a limit whose span is at most 100 days decides in
// nanoseconds, a longer one in microseconds, with its interval rounded up
// and its MaxWait down.
func TestResolution(t *testing.T) {
	us, ns := time.Microsecond, time.Nanosecond
	cases := []struct {
		name     string
		limit    Limit
		res      time.Duration
		interval time.Duration // 0: not a token bucket
		maxWait  time.Duration
	}{
		{"token bucket of 100 days", TokenBucket(PerDay(1), 100), ns, lgDay, 0},
		{"token bucket of 101 days", TokenBucket(PerDay(1), 101), us, lgDay, 0},
		{"token bucket of 400 days", TokenBucket(PerDay(1), 400), us, lgDay, 0},
		// (300 days + 1ns)/3 = 100 days + 1ns (rounded up), then to the µs.
		{"interval rounded up", TokenBucket(Rate{N: 3, Per: 300*lgDay + 1}, 3), us, 100*lgDay + us, 0},
		{"interval kept below 100 days", TokenBucket(Rate{N: 3, Per: 90*lgDay + 1}, 3), ns, 30*lgDay + ns, 0},
		{"shaping of 100 days", Shaping(PerDay(1), 50, 50*lgDay), ns, lgDay, 50 * lgDay},
		{"shaping of 100 days and 1ns", Shaping(PerDay(1), 50, 50*lgDay+1), us, lgDay, 50 * lgDay},
		{"shaping wait rounded down", Shaping(PerDay(1), 10, 200*lgDay+1999), us, lgDay, 200*lgDay + us},
		{"fixed window of 100 days", FixedWindow(5, 100*lgDay), ns, 0, 0},
		{"fixed window of 100 days and 1ms", FixedWindow(5, 100*lgDay+time.Millisecond), us, 0, 0},
		{"sliding window of 400 days", SlidingWindow(5, 400*lgDay), us, 0, 0},
		{"sliding log of 150 days", SlidingLog(5, 150*lgDay), us, 0, 0},
		{"one second", TokenBucket(PerSecond(1), 1), ns, time.Second, 0},
	}
	for _, tc := range cases {
		l := chLimit(t, tc.limit)
		if got := l.Resolution(); got != tc.res {
			t.Errorf("%s: Resolution() = %v, want %v", tc.name, got, tc.res)
		}
		if got := l.Interval(); got != tc.interval {
			t.Errorf("%s: Interval() = %v, want %v", tc.name, got, tc.interval)
		}
		if got := l.MaxWait(); got != tc.maxWait {
			t.Errorf("%s: MaxWait() = %v, want %v", tc.name, got, tc.maxWait)
		}
		if l.isBucket() && l.Window() != time.Duration(l.Burst())*tc.interval {
			t.Errorf("%s: Window() = %v, want %v", tc.name, l.Window(), time.Duration(l.Burst())*tc.interval)
		}
		// Validating a validated limit again changes nothing.
		if again := chLimit(t, *l); *again != *l {
			t.Errorf("%s: validated twice, %+v; once, %+v", tc.name, *again, *l)
		}
	}
	var zero Limit
	if zero.Resolution() != ns || TokenBucket(PerDay(1), 300).Resolution() != ns {
		t.Errorf("the zero Limit and unvalidated limits: Resolution() = %v, %v; want 1ns", zero.Resolution(), TokenBucket(PerDay(1), 300).Resolution())
	}
}

// TestLongLimitRejects: spans above 400 days are rejected, and so are those
// that the rounding to the microsecond takes above 400 days.
func TestLongLimitRejects(t *testing.T) {
	cases := []struct {
		name  string
		limit Limit
		err   error
		msg   string
	}{
		{"token bucket of 401 days", TokenBucket(PerDay(1), 401), ErrInvalidBurst, "longer than 400 days"},
		{"a year per token", TokenBucket(Every(365*lgDay), 2), ErrInvalidBurst, "longer than 400 days"},
		{"shaping of 400 days and 1ns", Shaping(PerDay(1), 300, 100*lgDay+1), ErrInvalidWindow, "at most 400 days"},
		{"fixed window of 400 days and 1ms", FixedWindow(1, 400*lgDay+time.Millisecond), ErrInvalidWindow, "at most 400 days"},
		{"sliding window of 401 days", SlidingWindow(1, 401*lgDay), ErrInvalidWindow, "at most 400 days"},
		{"sliding log of 500 days", SlidingLog(1, 500*lgDay), ErrInvalidWindow, "at most 400 days"},
		// 334ns per token: 386 days in nanoseconds, 1157 days once rounded
		// up to the microsecond that a span above 100 days counts in.
		{"rounded beyond 400 days", TokenBucket(Rate{N: 3, Per: time.Microsecond}, 1e14), ErrInvalidBurst, "microsecond resolution"},
		// 3 tokens of 100 days and 1ns and a wait of 100 days less 3ns: 400
		// days; at the microsecond, 400 days and 2µs.
		{"shaping rounded beyond 400 days", Shaping(Every(100*lgDay+1), 3, 100*lgDay-3), ErrInvalidWindow, "microsecond resolution"},
		{"wait below a microsecond", Shaping(PerDay(1), 150, 999), ErrInvalidWindow, "at least 1µs"},
	}
	for _, tc := range cases {
		_, err := NewPolicy(Rule{Name: "r", Scope: ScopeUser, Limit: tc.limit})
		if !errors.Is(err, tc.err) || err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: NewPolicy = %v, want %v containing %q", tc.name, err, tc.err, tc.msg)
		}
	}
	for _, l := range []Limit{TokenBucket(PerDay(1), 400), Shaping(PerDay(1), 300, 100*lgDay), FixedWindow(1, 400*lgDay), Shaping(PerDay(1), 150, time.Microsecond)} {
		if _, err := NewPolicy(Rule{Name: "r", Scope: ScopeUser, Limit: l}); err != nil {
			t.Errorf("NewPolicy(%v) = %v, want it accepted", l, err)
		}
	}
}

// lgStep is one decision of a long timeline at lgBase+at.
type lgStep struct {
	name string
	at   time.Duration
	cost int64
	want BucketState
}

// lgRun runs steps on one state of l from base, committing what is allowed.
func lgRun(t *testing.T, l *Limit, base int64, steps []lgStep) {
	t.Helper()
	var s State
	for _, st := range steps {
		got, next := l.Decide(&s, base+int64(st.at), st.cost)
		if got != st.want {
			t.Fatalf("%s: Decide(base+%v, %d) = %+v, want %+v", st.name, st.at, st.cost, got, st.want)
		}
		if got.Allowed && st.cost > 0 {
			l.Commit(&s, next, st.cost)
		}
	}
}

// TestLongTokenBucket: a yearly quota of 400 tokens, one a day, decides
// at the time truncated to the microsecond; a short limit beside it still
// counts every nanosecond.
func TestLongTokenBucket(t *testing.T) {
	const us = time.Microsecond
	base := chT0.UnixNano()
	day := lgDay
	lgRun(t, chLimit(t, TokenBucket(PerDay(1), 400)), base, []lgStep{
		{"t1: the whole quota, 123ns into t0", 123, 400, chAllowed(0, 400*day)},
		{"t2: 1ns before a day, a microsecond short", day - 1, 0, chAllowed(0, 399*day+us)},
		{"t2: denied a microsecond before the token", day - 1, 1, chLimited(0, 399*day+us, us)},
		{"t3: the day's token, 999ns late", day + 999, 1, chAllowed(0, 400*day)},
		{"t3: the next is a day away, counted from t0+1d", day + 999, 1, chLimited(0, 400*day, day)},
		{"t4: 200 days on", 201*day + 5, 0, chAllowed(200, 200*day)},
		{"t5: a year and 35 days on, full", 401*day + 1, 0, chAllowed(400, 0)},
	})
	// The same numbers over 100 days count nanoseconds.
	lgRun(t, chLimit(t, TokenBucket(PerDay(1), 100)), base, []lgStep{
		{"t1", 123, 100, chAllowed(0, 100*day)},
		{"t2", day - 1, 1, chLimited(0, 99*day+124, 124)},
	})
	// Shaping: 100 tokens and up to 150 days and 1µs of wait (rounded down
	// from 1999ns).
	lgRun(t, chLimit(t, Shaping(PerDay(1), 100, 150*day+1999)), base, []lgStep{
		{"the burst", 500, 100, chAllowed(0, 100*day)},
		{"100 more, waiting 100 days", 700, 100, BucketState{Allowed: true, ResetAfter: 200 * day, Delay: 100 * day}},
		{"50 more, waiting 150 days", 800, 50, BucketState{Allowed: true, ResetAfter: 250 * day, Delay: 150 * day}},
		{"one more would wait 151 days", 900, 1, chLimited(0, 250*day, day-us)},
	})
}

// TestLongWindows: windows of 150 to 200 days, exact to the microsecond.
func TestLongWindows(t *testing.T) {
	const us = time.Microsecond
	day := lgDay
	t.Run("fixed_window", func(t *testing.T) {
		w := int64(200 * day)
		now := chT0.UnixNano()
		start := now - now%w // epoch-aligned
		lgRun(t, chLimit(t, FixedWindow(3, 200*day)), start, []lgStep{
			{"150 days and 777ns in", 150*day + 777, 3, chAllowed(0, 50*day)},
			{"denied until the window ends", 150*day + 777, 1, chLimited(0, 50*day, 50*day)},
			{"a microsecond before", 200*day - 1, 1, chLimited(0, us, us)},
			{"the next window", 200 * day, 1, chAllowed(2, 200*day)},
		})
		// The same over 100 days counts nanoseconds.
		w = int64(100 * day)
		lgRun(t, chLimit(t, FixedWindow(3, 100*day)), now-now%w, []lgStep{
			{"50 days and 777ns in", 50*day + 777, 3, chAllowed(0, 50*day-777)},
		})
	})
	t.Run("sliding_window", func(t *testing.T) {
		w := int64(150 * day)
		now := chT0.UnixNano()
		start := now - now%w
		lgRun(t, chLimit(t, SlidingWindow(4, 150*day)), start, []lgStep{
			{"10 days and 5ns in", 10*day + 5, 4, chAllowed(0, 290*day)},
			// Half the next window: 4*(1/2) = 2 weigh, 2 remain.
			{"half the next window", 225*day + 999, 0, chAllowed(2, 75*day)},
			// 3 fit once 4*(1-x) <= 1, at x = 3/4: 112.5 days in.
			{"3 wait for three quarters", 225*day + 999, 3, chLimited(2, 75*day, 37*day+12*time.Hour)},
			{"at three quarters", 262*day + 12*time.Hour, 3, chAllowed(0, 187*day+12*time.Hour)},
		})
	})
	t.Run("sliding_log", func(t *testing.T) {
		base := chT0.UnixNano()
		lgRun(t, chLimit(t, SlidingLog(2, 120*day)), base, []lgStep{
			{"t1", 1, 1, chAllowed(1, 120*day)},
			{"t2", 10*day + 1500, 1, chAllowed(0, 120*day)},
			{"t3: the first leaves at t0+120d", 10*day + 1500, 1, chLimited(0, 120*day, 110*day-us)},
			{"t4: a microsecond before", 120*day - 1, 1, chLimited(0, 10*day+2*us, us)},
			{"t5: it has left", 120 * day, 1, chAllowed(0, 120*day)},
		})
	})
}

// TestLongMemoryStore: the memory store keeps a yearly bucket until it is
// full again, and a 400-day sliding window decided at MaxTime, whose expiry
// lies at the very end of int64, with a reclaim delay of MaxSpan.
func TestLongMemoryStore(t *testing.T) {
	clock := NewManualClock(chT0)
	s, err := NewMemoryStore(WithClock(clock), WithReclaimDelay(MaxSpan))
	if err != nil {
		t.Fatal(err)
	}
	yearly := chLimit(t, TokenBucket(PerDay(1), 365))
	window := chLimit(t, SlidingWindow(1, MaxSpan))
	take := func(l *Limit, key string, at time.Time, cost int64) BucketState {
		t.Helper()
		tk := &Take{Now: at, Cost: cost, Buckets: []Bucket{{Rule: "r", Key: key, Limit: l}}, States: make([]BucketState, 1)}
		if err := s.Take(context.Background(), tk); err != nil {
			t.Fatal(err)
		}
		return tk.States[0]
	}
	keys := func(at time.Time) int {
		clock.Set(at)
		s.Reclaim()
		return s.Stats().Keys
	}
	if st := take(yearly, "y", chT0.Add(7), 365); !st.Allowed || st.ResetAfter != 365*lgDay {
		t.Fatalf("yearly: %+v", st)
	}
	full := chT0.Add(365*lgDay + MaxSpan) // the TAT, plus the reclaim delay
	if n := keys(full.Add(-1)); n != 1 {
		t.Fatalf("Keys before the yearly bucket is full and the delay passed = %d, want 1", n)
	}
	if n := keys(full); n != 0 {
		t.Fatalf("Keys once the yearly bucket is full and the delay passed = %d, want 0", n)
	}
	if st := take(window, "w", MaxTime(), 1); !st.Allowed {
		t.Fatalf("400-day window at MaxTime: %+v", st)
	}
	if n := keys(MaxTime()); n != 1 {
		t.Fatalf("Keys right after a take at MaxTime = %d, want 1: its expiry plus the delay overflowed", n)
	}
	if st := take(window, "w", MaxTime(), 1); st.Allowed {
		t.Fatalf("400-day window at MaxTime, second take: %+v, want denied", st)
	}
}

// TestUpDouble: durations beyond 2^53ns round up to the next double.
func TestUpDouble(t *testing.T) {
	for _, x := range []int64{0, 1, 1 << 53, 1<<53 + 1, 1<<53 + 2, 1<<56 + 3, 1<<62 + 1, math.MaxInt64 - 1<<12} {
		got := upDouble(x)
		if got < x || (x <= 1<<53 && got != x) {
			t.Errorf("upDouble(%d) = %d", x, got)
		}
		if f := float64(got); int64(f) != got || (got > x && int64(math.Nextafter(f, 0)) >= x) {
			t.Errorf("upDouble(%d) = %d: not the least double at or above it", x, got)
		}
	}
}
