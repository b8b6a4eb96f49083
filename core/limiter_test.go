package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
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
	type seen struct {
		user    string
		allowed bool
		err     error
		timed   bool
		latency time.Duration
	}
	var first, second []seen
	record := func(into *[]seen) Observer {
		return func(_ context.Context, e *Event) {
			*into = append(*into, seen{e.Request.User, e.Decision.Allowed, e.Err, e.Timed, e.Latency})
		}
	}
	l := newTestLimiter(t, []Option{WithObserver(record(&first)), WithObserver(record(&second)), WithLatencySampling(1)},
		Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)})
	ctx := context.Background()
	l.AllowAt(ctx, t0, Request{User: "a"}, 1)
	l.AllowAt(ctx, t0, Request{User: "a"}, 1)
	l.AllowAt(ctx, t0, Request{User: "a\x00"}, 1) // bad input: observed with its error
	if _, err := l.Inspect(ctx, Request{User: "a"}); err != nil {
		t.Fatal(err)
	}
	if len(first) != 3 || !first[0].allowed || first[1].allowed || first[1].user != "a" || !errors.Is(first[2].err, ErrInvalidKey) {
		t.Fatalf("first observer saw %+v", first)
	}
	if !slices.Equal(first, second) {
		t.Fatalf("second observer saw %+v, first %+v", second, first)
	}
	for i, s := range first {
		if !s.timed || s.latency <= 0 {
			t.Errorf("decision %d: Timed = %v, Latency = %v with sampling 1, want timed and > 0", i, s.timed, s.latency)
		}
	}
}

// TestLatencySampling: with sampling n, about one decision in n is timed.
func TestLatencySampling(t *testing.T) {
	for _, n := range []int{4, DefaultLatencySampling} {
		var timed, all int
		opts := []Option{WithObserver(func(_ context.Context, e *Event) {
			all++
			if e.Timed {
				timed++
				if e.Latency <= 0 {
					t.Errorf("timed decision with Latency %v", e.Latency)
				}
			} else if e.Latency != 0 {
				t.Errorf("untimed decision with Latency %v", e.Latency)
			}
		})}
		if n != DefaultLatencySampling {
			opts = append(opts, WithLatencySampling(n))
		}
		l := newTestLimiter(t, opts, Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1<<20), 1<<30)})
		const decisions = 20000
		for range decisions {
			l.Allow(context.Background(), Request{User: "u"})
		}
		// Binomial(20000, 1/n): 6 standard deviations either side.
		want := float64(decisions) / float64(n)
		sd := math.Sqrt(want * (1 - 1/float64(n)))
		if all != decisions || math.Abs(float64(timed)-want) > 6*sd {
			t.Errorf("sampling %d: %d of %d decisions timed, want %.0f ± %.0f", n, timed, all, want, 6*sd)
		}
	}
}

// TestShadow: shadow tiers are decided and reported and never deny; they
// take tokens as if enforced, the enforced tiers as for any admitted
// request.
func TestShadow(t *testing.T) {
	ctx := context.Background()
	enforced := Rule{Name: "enforced", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 10)}
	shadow := Rule{Name: "shadow", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 2), Shadow: true}
	type step struct {
		allowed, shadowDenied bool
		enforcedLeft          int64 // the enforced tier's Remaining
		shadowLeft            int64
		shadowAllowed         bool
	}
	for _, tc := range []struct {
		name  string
		opts  []Option
		rules []Rule
		steps []step
	}{
		{"shadow rule", nil, []Rule{enforced, shadow}, []step{
			{true, false, 9, 1, true},
			{true, false, 8, 0, true},
			// The shadow tier denies: allowed, the enforced tier charged,
			// the shadow tier not (a denied request takes nothing).
			{true, true, 7, 0, false},
			{true, true, 6, 0, false},
		}},
		{"whole limiter", []Option{WithShadow(true)}, []Rule{enforced, {Name: "small", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 2)}}, []step{
			{true, false, 9, 1, true},
			{true, false, 8, 0, true},
			// Every tier is in shadow: nothing is taken from any.
			{true, true, 8, 0, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLimiter(t, tc.opts, tc.rules...)
			for i, st := range tc.steps {
				d, err := l.AllowAt(ctx, t0, Request{User: "u"}, 1)
				if err != nil {
					t.Fatal(err)
				}
				tiers := d.Tiers()
				if len(tiers) != 2 {
					t.Fatalf("step %d: %d tiers, want 2", i, len(tiers))
				}
				if d.Allowed != st.allowed || d.ShadowDenied != st.shadowDenied || tiers[0].Remaining != st.enforcedLeft ||
					tiers[1].Remaining != st.shadowLeft || tiers[1].Allowed != st.shadowAllowed || !tiers[1].Shadow {
					t.Errorf("step %d: Allowed %v ShadowDenied %v, tiers %+v; want %+v", i, d.Allowed, d.ShadowDenied, tiers, st)
				}
			}
		})
	}
	// An enforced tier still denies, whatever the shadow tiers say.
	l := newTestLimiter(t, nil, Rule{Name: "tight", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)}, shadow)
	l.AllowAt(ctx, t0, Request{User: "u"}, 1)
	if d, _ := l.AllowAt(ctx, t0, Request{User: "u"}, 1); d.Allowed || d.ShadowDenied || d.Rule != "tight" {
		t.Errorf("enforced denial: Allowed %v ShadowDenied %v Rule %q, want denied by tight", d.Allowed, d.ShadowDenied, d.Rule)
	}
}

// TestShadowManyTiers: more tiers than a Decision holds inline.
func TestShadowManyTiers(t *testing.T) {
	var rules []Rule
	for i := range 6 {
		rules = append(rules, Rule{Name: fmt.Sprintf("r%d", i), Scope: ScopeUser, Limit: TokenBucket(PerHour(1), int64(10+i)), Shadow: i%2 == 1})
	}
	rules[3].Limit = TokenBucket(PerHour(1), 1)
	l := newTestLimiter(t, nil, rules...)
	ctx := context.Background()
	l.AllowAt(ctx, t0, Request{User: "u"}, 1)
	d, err := l.AllowAt(ctx, t0, Request{User: "u"}, 1)
	if err != nil || !d.Allowed || !d.ShadowDenied {
		t.Fatalf("AllowAt = %+v, %v; want allowed, ShadowDenied", d, err)
	}
	for i, ts := range d.Tiers() {
		wantLeft := int64(10+i) - 2
		if i == 3 {
			wantLeft = 0
		} else if i%2 == 1 {
			wantLeft = int64(10+i) - 1 // a shadow tier takes nothing when the request is shadow-denied
		}
		if ts.Rule.Name != rules[i].Name || ts.Remaining != wantLeft || ts.Shadow != (i%2 == 1) {
			t.Errorf("tier %d: %s Remaining %d Shadow %v, want %s %d %v", i, ts.Rule.Name, ts.Remaining, ts.Shadow, rules[i].Name, wantLeft, i%2 == 1)
		}
	}
}

// TestShadowTiersNeverDecide: a shadow tier never decides what the client
// is told or waits when an enforced tier applies: the summary, the header
// fields and Delay come from the enforced tiers, whatever the shadow tiers
// say. Only when every tier is in shadow mode do they make the summary,
// and even then they set no Delay.
func TestShadowTiersNeverDecide(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		opts    []Option
		rules   []Rule
		before  int // requests made at t0 before the one checked
		allowed bool
		rule    string
		left    int64
		retry   time.Duration
		headers map[string]string // fields the default HeaderFormat sets, "" for absent
	}{
		{
			name: "both deny, the shadow tier longer",
			rules: []Rule{
				{Name: "tight", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)},
				{Name: "trial", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1), Shadow: true},
			},
			before: 1, allowed: false, rule: "tight", left: 0, retry: time.Second,
			headers: map[string]string{"Retry-After": "1", "X-RateLimit-Limit": "1", "RateLimit-Policy": `"tight";q=1;w=1`},
		},
		{
			name: "the shadow tier has the least left",
			rules: []Rule{
				{Name: "enforced", Scope: ScopeUser, Limit: TokenBucket(PerHour(10), 10)},
				{Name: "trial", Scope: ScopeUser, Limit: TokenBucket(PerHour(5), 5), Shadow: true},
			},
			allowed: true, rule: "enforced", left: 9,
			headers: map[string]string{"X-RateLimit-Remaining": "9", "RateLimit-Policy": `"enforced";q=10;w=3600`, "RateLimit": `"enforced";r=9;t=360`},
		},
		{
			name: "a shadow shaping tier would delay",
			rules: []Rule{
				{Name: "enforced", Scope: ScopeUser, Limit: TokenBucket(PerHour(100), 100)},
				{Name: "trial", Scope: ScopeUser, Limit: Shaping(PerMinute(1), 1, time.Hour), Shadow: true},
			},
			before: 1, allowed: true, rule: "enforced", left: 98,
			headers: map[string]string{"X-RateLimit-Remaining": "98", "RateLimit-Policy": `"enforced";q=100;w=3600`},
		},
		{
			name:  "WithShadow, one shaping tier",
			opts:  []Option{WithShadow(true)},
			rules: []Rule{{Name: "paced", Scope: ScopeUser, Limit: Shaping(PerMinute(1), 1, time.Hour)}},
			// Every tier is in shadow mode: the summary is the shadow
			// tier's, and the default format reports no tier.
			before: 1, allowed: true, rule: "paced", left: 0,
			headers: map[string]string{"X-RateLimit-Remaining": "", "RateLimit-Policy": ""},
		},
		{
			name: "every rule in shadow mode, one shaping",
			rules: []Rule{
				{Name: "wide", Scope: ScopeUser, Limit: TokenBucket(PerHour(100), 100), Shadow: true},
				{Name: "paced", Scope: ScopeUser, Limit: Shaping(PerMinute(1), 1, time.Hour), Shadow: true},
			},
			before: 1, allowed: true, rule: "paced", left: 0,
			headers: map[string]string{"X-RateLimit-Remaining": "", "RateLimit-Policy": ""},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLimiter(t, tc.opts, tc.rules...)
			for range tc.before {
				l.AllowAt(ctx, t0, Request{User: "u"}, 1)
			}
			d, err := l.AllowAt(ctx, t0, Request{User: "u"}, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != tc.allowed || d.Rule != tc.rule || d.Remaining != tc.left || d.RetryAfter != tc.retry || d.Delay != 0 {
				t.Errorf("AllowAt(t0, 1) = {Allowed:%v Rule:%q Remaining:%d RetryAfter:%v Delay:%v}, want {%v %q %d %v 0s}",
					d.Allowed, d.Rule, d.Remaining, d.RetryAfter, d.Delay, tc.allowed, tc.rule, tc.left, tc.retry)
			}
			f, err := NewHeaderFormat()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			f.Headers(&d, func(name, value string) { got[name] = value })
			for name, want := range tc.headers {
				if got[name] != want {
					t.Errorf("header %s = %q, want %q (all: %v)", name, got[name], want, got)
				}
			}
		})
	}
}

// TestLoggerThrottlesStoreFailures: a store outage logs one record per
// kind per interval, with the count of those left out.
func TestLoggerThrottlesStoreFailures(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	l := newTestLimiter(t, []Option{WithStore(failingStore{errDown}), WithLogger(logger)}, breakerRule)
	for range 100 {
		if d, err := l.Allow(context.Background(), Request{User: "u"}); err != nil || !d.Degraded {
			t.Fatalf("Allow = %+v, %v; want degraded", d, err)
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"kind":"unavailable"`) || !strings.Contains(lines[0], "store failure") {
		t.Fatalf("logged %d records, want 1 store failure: %s", len(lines), buf.String())
	}
}

func TestLogThrottle(t *testing.T) {
	var buf bytes.Buffer
	lt := NewLogThrottle(slog.New(slog.NewTextHandler(&buf, nil)), time.Minute)
	now := t0
	lt.now = func() time.Time { return now }
	ctx := context.Background()
	for i, st := range []struct {
		at   time.Duration
		key  string
		want bool
	}{
		{0, "a", true}, {time.Second, "a", false}, {2 * time.Second, "b", true}, {59 * time.Second, "a", false},
		{time.Minute, "a", true}, {time.Minute, "a", false},
	} {
		now = t0.Add(st.at)
		if got := lt.Log(ctx, slog.LevelWarn, st.key, "m"); got != st.want {
			t.Errorf("step %d: Log(%s) at %v = %v, want %v", i, st.key, st.at, got, st.want)
		}
	}
	if !strings.Contains(buf.String(), "suppressed=2") {
		t.Errorf("the record after the interval does not count the 2 left out: %s", buf.String())
	}
	var nilT *LogThrottle
	if nilT.Log(ctx, slog.LevelError, "k", "m") || NewLogThrottle(nil, time.Second) != nil {
		t.Error("a nil LogThrottle logs")
	}
}

func TestErrorKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("x: %w", ErrBreakerOpen), "breaker_open"},
		{fmt.Errorf("bound: %w", context.DeadlineExceeded), "timeout"},
		{context.Canceled, "canceled"},
		{fmt.Errorf("%w: empty", ErrInvalidKey), "invalid_input"},
		{ErrUnknownPlan, "invalid_input"},
		{&PartialError{Failed: []int{0}, Err: errDown}, "partial"},
		{errDown, "unavailable"},
	} {
		if got := ErrorKind(tc.err); got != tc.want {
			t.Errorf("ErrorKind(%v) = %q, want %q", tc.err, got, tc.want)
		}
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

// TestInspectAndReset: Inspect reads without taking; Reset makes every
// bucket of the request full again, on the memory store and its fallback;
// a store that cannot reset says so.
func TestInspectAndReset(t *testing.T) {
	ctx := context.Background()
	rules := []Rule{
		{Name: "user", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 3)},
		{Name: "ip", Scope: ScopeIP, Limit: TokenBucket(PerHour(1), 5)},
	}
	req := Request{User: "u", IP: "192.0.2.1"}
	l := newTestLimiter(t, nil, rules...)
	for range 3 {
		l.Allow(ctx, req)
	}
	for range 2 {
		d, err := l.Inspect(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if tiers := d.Tiers(); len(tiers) != 2 || tiers[0].Remaining != 0 || tiers[1].Remaining != 2 {
			t.Fatalf("Inspect: tiers %+v, want user 0 and ip 2 left", tiers)
		}
	}
	if err := l.Reset(ctx, req); err != nil {
		t.Fatal(err)
	}
	d, _ := l.Inspect(ctx, req)
	if tiers := d.Tiers(); tiers[0].Remaining != 3 || tiers[1].Remaining != 5 {
		t.Fatalf("after Reset: tiers %+v, want full (3 and 5)", tiers)
	}
	if err := l.Reset(ctx, Request{User: "u\x00"}); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("Reset of a bad key = %v, want ErrInvalidKey", err)
	}
	other := newTestLimiter(t, []Option{WithStore(okStore{})}, rules...)
	if err := other.Reset(ctx, req); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reset on a store that cannot = %v, want errors.ErrUnsupported", err)
	}
}

func TestMemoryStoreMetrics(t *testing.T) {
	m, err := NewMemoryStore(WithMaxKeys(64), WithShards(1))
	if err != nil {
		t.Fatal(err)
	}
	l := newTestLimiter(t, []Option{WithStore(m)}, Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)})
	for i := range 100 {
		l.AllowAt(context.Background(), t0, Request{User: fmt.Sprint(i)}, 1)
	}
	got := map[string]float64{}
	m.CollectMetrics(func(mt Metric) { got[mt.Name] = mt.Value })
	st := m.Stats()
	want := map[string]float64{"memory_keys": float64(st.Keys), "memory_reclaimed_total": float64(st.Reclaimed), "memory_evictions_total": float64(st.Evictions)}
	if fmt.Sprint(got) != fmt.Sprint(want) || st.Evictions == 0 || st.Keys == 0 {
		t.Errorf("CollectMetrics = %v, want %v with keys and evictions", got, want)
	}
}

// TestDecide: Decide decides as AllowN does, on two limiters with the same
// rules and clock, overwriting whatever the decision held (one decision
// reused for both policies, of one rule, which Decide decides without
// run's layers, and of two), and refuses nil arguments.
func TestDecide(t *testing.T) {
	rules := []Rule{
		{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 3)},
		{Name: "per-endpoint", Scope: ScopeEndpoint, Limit: TokenBucket(PerSecond(2), 2)},
	}
	clock := NewManualClock(t0)
	limiter := onClock(t, clock)
	a, b := limiter(rules...), limiter(rules...)
	a1, b1 := limiter(rules[0]), limiter(rules[0])
	ctx := context.Background()
	reqs := []Request{{User: "u", Endpoint: "/x"}, {User: "u"}, {Endpoint: "/x"}, {}, {User: "v", Endpoint: "/x"}, {User: "a\x00"}, {User: "w", Endpoint: "/y"}}
	var d Decision
	for i := range 80 {
		req := reqs[i%len(reqs)]
		n := int64(i%4) - 1 + int64(i%5/4)*MaxCost
		one, other := a, b
		if i%2 == 1 {
			one, other = a1, b1
		}
		want, wantErr := one.AllowN(ctx, req, n)
		err := other.Decide(ctx, &req, n, &d)
		if (wantErr == nil) != (err == nil) || !sameDecision(&d, &want) || !clearPast(&d) {
			t.Fatalf("request %d (%+v, cost %d): Decide = %+v, %v; AllowN = %+v, %v", i, req, n, d, err, want, wantErr)
		}
		if i%4 == 3 {
			clock.Advance(300 * time.Millisecond)
		}
	}
	req := Request{User: "u"}
	d = Decision{Allowed: true, Rule: "stale"}
	if err := b.Decide(ctx, nil, 1, &d); !errors.Is(err, ErrNilArgument) || d.Allowed || d.Rule != "" {
		t.Errorf("Decide(nil request) = %v, %+v; want ErrNilArgument and a zero decision", err, d)
	}
	if err := b.Decide(ctx, &req, 1, nil); !errors.Is(err, ErrNilArgument) {
		t.Errorf("Decide(nil decision) = %v, want ErrNilArgument", err)
	}
	var zero Limiter
	if err := zero.Decide(ctx, &req, 1, &d); !errors.Is(err, ErrNotConstructed) {
		t.Errorf("Decide on a zero Limiter = %v, want ErrNotConstructed", err)
	}
}

// TestDecideUnder: DecideUnder decides under the policy it is given, not
// the one in force, on the direct path and through run's layers, without
// allocating; it refuses a nil policy, and a leased one the store cannot
// lease.
func TestDecideUnder(t *testing.T) {
	many := TokenBucket(PerSecond(1<<20), 1<<30)
	perIP := Rule{Name: "per-ip", Scope: ScopeIP, Limit: many}
	perUser := Rule{Name: "per-user", Scope: ScopeUser, Limit: many}
	old, err := NewPolicy(perIP, Rule{Name: "global", Scope: ScopeGlobal, Limit: many})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := Request{User: "u", IP: "192.0.2.1"}
	for _, opts := range [][]Option{nil, {WithObserver(func(context.Context, *Event) {})}} {
		l := newTestLimiter(t, opts, perUser)
		for _, p := range []*Policy{old, l.Policy()} {
			var d Decision
			if err := l.DecideUnder(ctx, p, &req, 1, &d); err != nil || d.NumTiers() != len(p.Rules()) || d.TierAt(0).Rule.Name != p.Rules()[0].Name {
				t.Errorf("observed %v: DecideUnder(%v) = %d tiers, first %v, %v; want the policy's own", opts != nil, p.Rules()[0].Name, d.NumTiers(), d.TierAt(0).Rule, err)
			}
			if got := testing.AllocsPerRun(100, func() { l.DecideUnder(ctx, p, &req, 1, &d) }); got != 0 && opts == nil {
				t.Errorf("DecideUnder(%v) makes %v allocations, want 0", p.Rules()[0].Name, got)
			}
		}
		d := Decision{Allowed: true, Rule: "stale"}
		if err := l.DecideUnder(ctx, nil, &req, 1, &d); !errors.Is(err, ErrNilArgument) || d.Allowed || d.Rule != "" {
			t.Errorf("DecideUnder(nil policy) = %v, %+v; want ErrNilArgument and a zero decision", err, d)
		}
	}
	leased, err := NewPolicy(Rule{Name: "global", Scope: ScopeGlobal, Limit: many, Lease: Lease{Max: 10, TTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	l := newTestLimiter(t, []Option{WithStore(failingStore{errors.New("unused")})}, perUser)
	var d Decision
	if err := l.DecideUnder(ctx, leased, &req, 1, &d); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("DecideUnder(a leased policy) on a store that cannot lease = %v, want ErrInvalidOption", err)
	}
}

// poisonDecision sets every field of d (found by reflection, so that a
// field added later is covered) to a value no decision has, its tier
// records up to n.
func poisonDecision(t *testing.T, d *Decision, n int) {
	t.Helper()
	v := reflect.ValueOf(d).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem() // unexported too
		switch name := v.Type().Field(i).Name; name {
		case "n":
			f.SetInt(int64(n))
		case "tiers", "flags":
			for j := range n {
				poison(t, f.Index(j))
			}
		case "more":
			// A decision of more than maxInlineTiers tiers holds them
			// there, and no inline records.
		default:
			poison(t, f)
		}
	}
}

// onClock returns a maker of limiters, each on its own memory store, all
// on clock.
func onClock(t *testing.T, clock Clock) func(rules ...Rule) *Limiter {
	return func(rules ...Rule) *Limiter {
		s, err := NewMemoryStore(WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return newTestLimiter(t, []Option{WithStore(s)}, rules...)
	}
}

// TestDecideOverwritesStale: Decide over a decision holding stale values
// in every field decides as over a zero one, on a policy of one rule
// (decided without run's layers) and of two, allowed and denied.
func TestDecideOverwritesStale(t *testing.T) {
	clock := NewManualClock(t0)
	limiter := onClock(t, clock)
	user := Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 2)}
	endpoint := Rule{Name: "per-endpoint", Scope: ScopeEndpoint, Limit: TokenBucket(PerSecond(1), 3)}
	ctx := context.Background()
	for _, rules := range [][]Rule{{user}, {user, endpoint}} {
		a, b := limiter(rules...), limiter(rules...)
		for i, req := range []Request{{User: "u", Endpoint: "/x"}, {User: "u", Endpoint: "/x"}, {User: "u", Endpoint: "/x"}, {}, {User: "a\x00"}} {
			for _, held := range []int{0, 1, 3} {
				// a and b decide the same requests at the same times.
				want, wantErr := a.Allow(ctx, req)
				var d Decision
				poisonDecision(t, &d, held)
				err := b.Decide(ctx, &req, 1, &d)
				if (err == nil) != (wantErr == nil) || !sameDecision(&d, &want) || !clearPast(&d) {
					t.Errorf("%d rules, request %d (%+v), over %d stale tiers: Decide = %+v, %v; AllowN = %+v, %v", len(rules), i, req, held, d, err, want, wantErr)
				}
			}
		}
	}
}

// clearPast reports whether d's tier records past those it holds are zero,
// as in a Decision made afresh.
func clearPast(d *Decision) bool {
	for i := d.n; i < maxInlineTiers; i++ {
		if d.tiers[i] != (tierRec{}) || d.flags[i] != 0 {
			return false
		}
	}
	return true
}

// TestDecisionClear: clear leaves a Decision equal to the zero one, every
// field of it (found by reflection, so that a field added later is
// covered) set before, its tier records up to n.
func TestDecisionClear(t *testing.T) {
	for _, n := range []int{0, 1, 3, maxInlineTiers} {
		var d Decision
		poisonDecision(t, &d, n)
		d.clear()
		if !reflect.DeepEqual(d, Decision{}) {
			t.Errorf("n = %d: clear left %+v, want the zero Decision", n, d)
		}
	}
	// A decision filled again with fewer tiers (as when shadow tiers are
	// decided apart) keeps no record of the tiers it had past those.
	r := Rule{Name: "r", Limit: TokenBucket(PerSecond(1), 1)}
	states := make([]BucketState, maxInlineTiers)
	rules, buckets := make([]*Rule, maxInlineTiers), make([]Bucket, maxInlineTiers)
	for i := range states {
		states[i] = BucketState{Allowed: true, Remaining: int64(i + 1)}
		rules[i], buckets[i] = &r, Bucket{Rule: "r", Key: "k", Limit: &r.Limit}
	}
	for _, n := range []int{maxInlineTiers, 3, 2, 1} {
		var d Decision
		d.fill(states, rules, buckets, false)
		d.fill(states[:n], rules[:n], buckets[:n], false)
		if !clearPast(&d) || d.NumTiers() != n {
			t.Errorf("filled with %d tiers, then %d: %d tiers, records past them %+v", maxInlineTiers, n, d.NumTiers(), d.tiers[n:])
		}
		d.clear()
		if !reflect.DeepEqual(d, Decision{}) {
			t.Errorf("filled with %d tiers, then %d, then cleared: %+v, want the zero Decision", maxInlineTiers, n, d)
		}
	}
}

// poison sets v, settable, to a value other than its zero value.
func poison(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.String:
		v.SetString("x")
	case reflect.Interface:
		v.Set(reflect.ValueOf(errors.New("x")))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Field(i)
			poison(t, reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem())
		}
	default:
		t.Fatalf("poison: no value for a %v", v.Type())
	}
}

// sameDecision reports whether a and b, perhaps from two limiters of the
// same rules, say the same: summary fields, and every tier's rule, limit
// and state.
func sameDecision(a, b *Decision) bool {
	as, bs := *a, *b
	as.tiers, bs.tiers, as.more, bs.more = [maxInlineTiers]tierRec{}, [maxInlineTiers]tierRec{}, nil, nil
	if !reflect.DeepEqual(as, bs) || a.NumTiers() != b.NumTiers() {
		return false
	}
	for i := range a.NumTiers() {
		ta, tb := a.TierAt(i), b.TierAt(i)
		if ta.Rule.Name != tb.Rule.Name || *ta.limit() != *tb.limit() || ta.BucketState != tb.BucketState || ta.Shadow != tb.Shadow {
			return false
		}
	}
	return true
}
