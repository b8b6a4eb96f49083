package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// hdrT0 is the first named instant of the header timelines: Unix 1767225600.
var hdrT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const hdrT0Unix = 1767225600

func newHdrLimiter(tb testing.TB, opts []Option, rules ...Rule) *Limiter {
	tb.Helper()
	var plans Plans
	for _, r := range rules {
		if r.Plan != "" && plans.Default == "" {
			plans.Default = r.Plan
		}
	}
	p, err := NewPlanPolicy(plans, rules...)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := NewLimiter(p, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

func newHdrFormat(tb testing.TB, opts ...HeaderOption) *HeaderFormat {
	tb.Helper()
	f, err := NewHeaderFormat(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// hdrFailStore is a store that always fails.
type hdrFailStore struct{}

func (hdrFailStore) Take(context.Context, *Take) error { return errors.New("store down") }

// headerLines returns the fields Headers sets, as "Name: value" lines in
// call order.
func headerLines(f *HeaderFormat, d *Decision, now time.Time) []string {
	var lines []string
	f.Headers(d, func(name, value string) { lines = append(lines, name+": "+value) })
	return lines
}

// hdrStep is one request of a timeline.
type hdrStep struct {
	at   time.Duration // after hdrT0
	req  Request
	cost int64
}

// hdrRun decides every step on l and returns the last decision and its time.
func hdrRun(tb testing.TB, l *Limiter, steps ...hdrStep) (Decision, time.Time) {
	tb.Helper()
	var d Decision
	var now time.Time
	for i, s := range steps {
		now = hdrT0.Add(s.at)
		var err error
		d, err = l.AllowAt(context.Background(), now, s.req, s.cost)
		if err != nil && !errors.Is(err, ErrUnavailable) {
			tb.Fatalf("step %d: AllowAt(t0+%v, %+v, %d): %v", i, s.at, s.req, s.cost, err)
		}
	}
	return d, now
}

func hdrTimes(n int, s hdrStep) []hdrStep {
	out := make([]hdrStep, n)
	for i := range out {
		out[i] = s
	}
	return out
}

var (
	hdrAlice    = Request{User: "alice", Endpoint: "/search"}
	hdrSeedRule = Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(2), 4)}
	// The seed timeline up to its denial: t=0 x4, t=0.5, t=1, t=2 x3.
	hdrSeedSteps = slices.Concat(
		hdrTimes(4, hdrStep{0, hdrAlice, 1}),
		[]hdrStep{{500 * time.Millisecond, hdrAlice, 1}, {time.Second, hdrAlice, 1}},
		hdrTimes(3, hdrStep{2 * time.Second, hdrAlice, 1}),
	)
	hdrThreeTiers = []Rule{
		{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 10)},
		{Name: "per-endpoint", Scope: ScopeEndpoint, Limit: TokenBucket(PerSecond(2), 3)},
		{Name: "global", Scope: ScopeGlobal, Limit: FixedWindow(100, time.Minute)},
	}
	hdrThreePolicy = `RateLimit-Policy: "per-user";q=10;w=10, "per-endpoint";q=3;w=2, "global";q=100;w=60`
)

func TestHeaders(t *testing.T) {
	tests := []struct {
		name  string
		rules []Rule
		lopts []Option
		fopts []HeaderOption
		steps []hdrStep
		want  []string
	}{
		{
			name:  "allow/first request",
			rules: []Rule{hdrSeedRule},
			steps: []hdrStep{{0, hdrAlice, 1}},
			want: []string{
				"X-RateLimit-Limit: 4",
				"X-RateLimit-Remaining: 3",
				"X-RateLimit-Reset: 1767225601", // full again at t0+0.5s, rounded up
				`RateLimit-Policy: "per-user";q=4;w=2`,
				`RateLimit: "per-user";r=3;t=1`,
			},
		},
		{
			name:  "allow/read of a full bucket",
			rules: []Rule{hdrSeedRule},
			steps: []hdrStep{{0, hdrAlice, 0}},
			want: []string{
				"X-RateLimit-Limit: 4",
				"X-RateLimit-Remaining: 4",
				"X-RateLimit-Reset: 1767225600",
				`RateLimit-Policy: "per-user";q=4;w=2`,
				`RateLimit: "per-user";r=4;t=0`,
			},
		},
		{
			name:  "allow/reset rounds up past a whole second",
			rules: []Rule{hdrSeedRule},
			steps: []hdrStep{{1500 * time.Millisecond, hdrAlice, 1}},
			want: []string{
				"X-RateLimit-Limit: 4",
				"X-RateLimit-Remaining: 3",
				"X-RateLimit-Reset: 1767225602", // t0+2.0s exactly
				`RateLimit-Policy: "per-user";q=4;w=2`,
				`RateLimit: "per-user";r=3;t=1`,
			},
		},
		{
			name:  "deny/seed timeline",
			rules: []Rule{hdrSeedRule},
			steps: hdrSeedSteps,
			want: []string{
				"X-RateLimit-Limit: 4",
				"X-RateLimit-Remaining: 0",
				"X-RateLimit-Reset: 1767225604", // full again at t0+4s
				`RateLimit-Policy: "per-user";q=4;w=2`,
				`RateLimit: "per-user";r=0;t=1`,
				"Retry-After: 1", // 500ms rounded up
				"Cache-Control: no-store",
			},
		},
		{
			name:  "deny/delta reset",
			rules: []Rule{hdrSeedRule},
			fopts: []HeaderOption{WithResetFormat(ResetDelta)},
			steps: hdrSeedSteps,
			want: []string{
				"X-RateLimit-Limit: 4",
				"X-RateLimit-Remaining: 0",
				"X-RateLimit-Reset: 2",
				`RateLimit-Policy: "per-user";q=4;w=2`,
				`RateLimit: "per-user";r=0;t=1`,
				"Retry-After: 1",
				"Cache-Control: no-store",
			},
		},
		{
			name:  "deny/cost exceeds limit: no Retry-After",
			rules: []Rule{hdrSeedRule},
			steps: []hdrStep{{0, hdrAlice, 1}, {0, hdrAlice, 5}},
			want: []string{
				"X-RateLimit-Limit: 4",
				"X-RateLimit-Remaining: 3",
				"X-RateLimit-Reset: 1767225601",
				`RateLimit-Policy: "per-user";q=4;w=2`,
				`RateLimit: "per-user";r=3;t=1`,
				"Cache-Control: no-store",
			},
		},
		{
			name:  "deny/unavailable, fail closed",
			rules: []Rule{hdrSeedRule},
			lopts: []Option{WithStore(hdrFailStore{}), WithFailureMode(FailClosed)},
			steps: []hdrStep{{0, hdrAlice, 1}},
			want:  []string{"Retry-After: 1", "Cache-Control: no-store"},
		},
		{
			name:  "allow/store failed, fail open: nothing to say",
			rules: []Rule{hdrSeedRule},
			lopts: []Option{WithStore(hdrFailStore{}), WithFailureMode(FailOpen)},
			steps: []hdrStep{{0, hdrAlice, 1}},
			want:  nil,
		},
		{
			name:  "allow/no rule applies",
			rules: []Rule{hdrSeedRule},
			steps: []hdrStep{{0, Request{Endpoint: "/search"}, 1}}, // anonymous
			want:  nil,
		},
		{
			name:  "allow/empty policy",
			rules: nil,
			steps: []hdrStep{{0, hdrAlice, 1}},
			want:  nil,
		},
		{
			name:  "allow/three tiers, deciding tier has least remaining",
			rules: hdrThreeTiers,
			steps: []hdrStep{{0, hdrAlice, 1}},
			want: []string{
				"X-RateLimit-Limit: 3",
				"X-RateLimit-Remaining: 2",
				"X-RateLimit-Reset: 1767225601",
				hdrThreePolicy,
				`RateLimit: "per-endpoint";r=2;t=1`,
			},
		},
		{
			name:  "allow/three tiers, all in RateLimit",
			rules: hdrThreeTiers,
			fopts: []HeaderOption{WithRateLimitTiers(TiersAll)},
			steps: []hdrStep{{0, hdrAlice, 1}},
			want: []string{
				"X-RateLimit-Limit: 3",
				"X-RateLimit-Remaining: 2",
				"X-RateLimit-Reset: 1767225601",
				hdrThreePolicy,
				`RateLimit: "per-user";r=9;t=1, "per-endpoint";r=2;t=1, "global";r=99;t=60`,
			},
		},
		{
			name:  "deny/three tiers, endpoint denies",
			rules: hdrThreeTiers,
			steps: hdrTimes(4, hdrStep{0, hdrAlice, 1}),
			want: []string{
				"X-RateLimit-Limit: 3",
				"X-RateLimit-Remaining: 0",
				"X-RateLimit-Reset: 1767225602", // 3 tokens at 2/s: 1.5s
				hdrThreePolicy,
				`RateLimit: "per-endpoint";r=0;t=1`,
				"Retry-After: 1",
				"Cache-Control: no-store",
			},
		},
		{
			name:  "deny/three tiers, all in RateLimit, t capped at Retry-After",
			rules: hdrThreeTiers,
			fopts: []HeaderOption{WithRateLimitTiers(TiersAll)},
			steps: hdrTimes(4, hdrStep{0, hdrAlice, 1}),
			want: []string{
				"X-RateLimit-Limit: 3",
				"X-RateLimit-Remaining: 0",
				"X-RateLimit-Reset: 1767225602",
				hdrThreePolicy,
				// Nothing consumed on the denial; per-user is full again in
				// 3s and global in 60s, capped at the 1s of Retry-After.
				`RateLimit: "per-user";r=7;t=1, "per-endpoint";r=0;t=1, "global";r=97;t=1`,
				"Retry-After: 1",
				"Cache-Control: no-store",
			},
		},
		{
			name:  "deny/window algorithm",
			rules: []Rule{{Name: "hourly", Scope: ScopeUser, Limit: FixedWindow(2, time.Hour)}},
			steps: []hdrStep{{0, hdrAlice, 1}, {time.Minute, hdrAlice, 1}, {90 * time.Second, hdrAlice, 1}},
			want: []string{
				"X-RateLimit-Limit: 2",
				"X-RateLimit-Remaining: 0",
				"X-RateLimit-Reset: 1767229200",
				`RateLimit-Policy: "hourly";q=2;w=3600`,
				`RateLimit: "hourly";r=0;t=3510`,
				"Retry-After: 3510",
				"Cache-Control: no-store",
			},
		},
		{
			name:  "options/only the draft's fields",
			rules: []Rule{hdrSeedRule},
			fopts: []HeaderOption{WithXRateLimit(false), WithRetryAfter(false), WithCacheControl(false)},
			steps: hdrSeedSteps,
			want: []string{
				`RateLimit-Policy: "per-user";q=4;w=2`,
				`RateLimit: "per-user";r=0;t=1`,
			},
		},
		{
			name:  "options/only the legacy fields, lower case",
			rules: []Rule{hdrSeedRule},
			fopts: []HeaderOption{WithRateLimitPolicy(false), WithRateLimit(false), WithNameCase(NamesLower)},
			steps: hdrSeedSteps,
			want: []string{
				"x-ratelimit-limit: 4",
				"x-ratelimit-remaining: 0",
				"x-ratelimit-reset: 1767225604",
				"retry-after: 1",
				"cache-control: no-store",
			},
		},
		{
			name:  "options/canonical names",
			rules: []Rule{hdrSeedRule},
			fopts: []HeaderOption{WithNameCase(NamesCanonical)},
			steps: hdrSeedSteps,
			want: []string{
				"X-Ratelimit-Limit: 4",
				"X-Ratelimit-Remaining: 0",
				"X-Ratelimit-Reset: 1767225604",
				`Ratelimit-Policy: "per-user";q=4;w=2`,
				`Ratelimit: "per-user";r=0;t=1`,
				"Retry-After: 1",
				"Cache-Control: no-store",
			},
		},
		{
			name:  "options/zero value sets nothing",
			rules: []Rule{hdrSeedRule},
			fopts: nil, // replaced below by &HeaderFormat{}
			steps: hdrSeedSteps,
			want:  nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newHdrLimiter(t, tc.lopts, tc.rules...)
			d, now := hdrRun(t, l, tc.steps...)
			f := newHdrFormat(t, tc.fopts...)
			if strings.HasPrefix(tc.name, "options/zero value") {
				f = &HeaderFormat{}
			}
			got := headerLines(f, &d, now)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Headers(%+v) =\n\t%s\nwant\n\t%s", d, strings.Join(got, "\n\t"), strings.Join(tc.want, "\n\t"))
			}
			checkSameAsReference(t, f, &d, d.Tiers(), d.At)
		})
	}
}

// TestHeadersMultiTierPlans: rules sharing a name on distinct plans report
// the numbers of the caller's plan.
func TestHeadersMultiTierPlans(t *testing.T) {
	l := newHdrLimiter(t, nil,
		Rule{Name: "per-user", Scope: ScopeUser, Plan: "free", Limit: TokenBucket(PerSecond(1), 5)},
		Rule{Name: "per-user", Scope: ScopeUser, Plan: "pro", Limit: TokenBucket(PerSecond(10), 100)},
		Rule{Name: "global", Scope: ScopeGlobal, Limit: TokenBucket(PerSecond(1000), 1000)},
	)
	f := newHdrFormat(t)
	for _, tc := range []struct {
		plan string
		want string
	}{
		{"free", `RateLimit-Policy: "per-user";q=5;w=5, "global";q=1000;w=1`},
		{"pro", `RateLimit-Policy: "per-user";q=100;w=10, "global";q=1000;w=1`},
		{"gold", `RateLimit-Policy: "per-user";q=5;w=5, "global";q=1000;w=1`}, // the default plan
	} {
		d, now := hdrRun(t, l, hdrStep{0, Request{Plan: tc.plan, User: "u-" + tc.plan}, 1})
		got := headerLines(f, &d, now)
		if !slices.Contains(got, tc.want) {
			t.Errorf("plan %q: Headers = %q, want a line %q", tc.plan, got, tc.want)
		}
	}
}

// TestRetryAfterRounding: Retry-After is RetryAfter in whole seconds rounded
// up, at least 1, from real decisions.
func TestRetryAfterRounding(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit Limit
		at    time.Duration // of the denied second request
		retry time.Duration // Decision.RetryAfter expected
		want  string
	}{
		{"1ns", TokenBucket(Every(time.Second), 1), time.Second - 1, 1, "1"},
		{"1s", TokenBucket(Every(time.Second), 1), 0, time.Second, "1"},
		{"1.000000001s", TokenBucket(Every(time.Second+1), 1), 0, time.Second + 1, "2"},
		{"1.5s", TokenBucket(Every(1500*time.Millisecond), 1), 0, 1500 * time.Millisecond, "2"},
		{"2s", TokenBucket(Every(2*time.Second), 1), 0, 2 * time.Second, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newHdrLimiter(t, nil, Rule{Name: "r", Scope: ScopeUser, Limit: tc.limit})
			d, now := hdrRun(t, l, hdrStep{0, hdrAlice, 1}, hdrStep{tc.at, hdrAlice, 1})
			if d.Allowed || d.RetryAfter != tc.retry {
				t.Fatalf("AllowAt(t0+%v) = {Allowed:%v RetryAfter:%v}, want {false %v}", tc.at, d.Allowed, d.RetryAfter, tc.retry)
			}
			got := headerMap(newHdrFormat(t), &d, now)
			if got["Retry-After"] != tc.want {
				t.Errorf("Retry-After for RetryAfter %v = %q, want %q", d.RetryAfter, got["Retry-After"], tc.want)
			}
			if !strings.HasSuffix(got["RateLimit"], ";t="+tc.want) {
				t.Errorf("RateLimit = %q, want t=%s, equal to Retry-After", got["RateLimit"], tc.want)
			}
		})
	}
}

func TestCeilHelpers(t *testing.T) {
	for _, tc := range []struct {
		d           time.Duration
		ceil, retry int64
	}{
		{-time.Second, 0, 1},
		{0, 0, 1},
		{1, 1, 1},
		{time.Second, 1, 1},
		{time.Second + 1, 2, 2},
		{59*time.Second + 999*time.Millisecond, 60, 60},
		{1<<63 - 1, 9223372037, 9223372037},
	} {
		if got := ceilSeconds(tc.d); got != tc.ceil {
			t.Errorf("ceilSeconds(%v) = %d, want %d", tc.d, got, tc.ceil)
		}
		if got := retrySeconds(tc.d); got != tc.retry {
			t.Errorf("retrySeconds(%v) = %d, want %d", tc.d, got, tc.retry)
		}
	}
	for _, tc := range []struct {
		t    time.Time
		want int64
	}{
		{hdrT0, hdrT0Unix},
		{hdrT0.Add(1), hdrT0Unix + 1},
		{hdrT0.Add(time.Second - 1), hdrT0Unix + 1},
		{hdrT0.Add(time.Second), hdrT0Unix + 1},
		{time.Unix(-1, 1), 0},
	} {
		if got := ceilUnix(tc.t); got != tc.want {
			t.Errorf("ceilUnix(%v) = %d, want %d", tc.t, got, tc.want)
		}
	}
	for _, tc := range []struct{ in, want int64 }{
		{-5, 0}, {0, 0}, {42, 42}, {sfMaxInt, sfMaxInt}, {MaxCost, sfMaxInt}, {1<<63 - 1, sfMaxInt},
	} {
		if got := sfInt(tc.in); got != tc.want {
			t.Errorf("sfInt(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func headerMap(f *HeaderFormat, d *Decision, now time.Time) map[string]string {
	m := make(map[string]string)
	f.Headers(d, func(name, value string) {
		if _, dup := m[name]; dup {
			panic("header " + name + " set twice")
		}
		m[name] = value
	})
	return m
}

// handTiers returns a denied decision over tiers named names, built by hand
// because Policy rejects names that need escaping. Every tier denies.
func handTiers(t testing.TB, names ...string) (Decision, []TierState) {
	t.Helper()
	p, err := NewPolicy(Rule{Name: "x", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 5)})
	if err != nil {
		t.Fatal(err)
	}
	tiers := make([]TierState, len(names))
	for i, n := range names {
		r := p.Rules()[0] // a validated limit
		r.Name = n
		tiers[i] = TierState{Rule: &r, BucketState: BucketState{
			Reason: ReasonLimited, Remaining: 0, ResetAfter: 5 * time.Second, RetryAfter: time.Second,
		}}
	}
	d := Decision{
		Reason: ReasonLimited, Limit: 5, ResetAfter: 5 * time.Second, RetryAfter: time.Second,
		Rule: names[0], Scope: ScopeUser,
	}
	return d, tiers
}

func TestHeadersEscaping(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sf, json   string
		jsonDetail string
	}{
		{"plain", `"plain"`, `"plain"`, `plain`},
		{`quo"te`, `"quo\"te"`, `"quo\"te"`, `quo\"te`},
		{`back\slash`, `"back\\slash"`, `"back\\slash"`, `back\\slash`},
		{`a"b\c`, `"a\"b\\c"`, `"a\"b\\c"`, `a\"b\\c`},
		{"ctl\x01\n", `"ctl??"`, `"ctl\u0001\n"`, `ctl\u0001\n`},
		{"é", `"??"`, `"é"`, `é`},
		{"bad\xff", `"bad?"`, `"bad\ufffd"`, `bad\ufffd`},
		{"sep\u2028", `"sep???"`, `"sep\u2028"`, `sep\u2028`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, tiers := handTiers(t, tc.name)
			f := newHdrFormat(t)
			got := make(map[string]string)
			f.headers(&d, tiers, hdrT0, func(n, v string) { got[n] = v })
			if want := tc.sf + ";q=5;w=5"; got["RateLimit-Policy"] != want {
				t.Errorf("RateLimit-Policy = %s, want %s", got["RateLimit-Policy"], want)
			}
			if want := tc.sf + ";r=0;t=1"; got["RateLimit"] != want {
				t.Errorf("RateLimit = %s, want %s", got["RateLimit"], want)
			}
			for _, field := range []string{"RateLimit-Policy", "RateLimit"} {
				if _, err := parseSFList(got[field]); err != nil {
					t.Errorf("%s = %s: not an sf-list: %v", field, got[field], err)
				}
			}
			body := appendProblem(nil, &d, tiers)
			if want := `"violated-policies":[` + tc.json + `]}`; !strings.HasSuffix(string(body), want) {
				t.Errorf("body = %s, want it to end with %s", body, want)
			}
			if want := `Rule \"` + tc.jsonDetail + `\" (scope user)`; !strings.Contains(string(body), want) {
				t.Errorf("body = %s, want detail with %s", body, want)
			}
			var p hdrProblem
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			want := jsonText(tc.name)
			if len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != want {
				t.Errorf("violated-policies = %q, want [%q]", p.ViolatedPolicies, want)
			}
		})
	}
}

// hdrProblem is the body AppendProblem writes.
type hdrProblem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
}

func TestAppendProblem(t *testing.T) {
	tests := []struct {
		name   string
		rules  []Rule
		lopts  []Option
		steps  []hdrStep
		status int
		body   string
	}{
		{
			name:   "allowed: no body",
			rules:  []Rule{hdrSeedRule},
			steps:  []hdrStep{{0, hdrAlice, 1}},
			status: 0,
			body:   "",
		},
		{
			name:   "limited",
			rules:  []Rule{hdrSeedRule},
			steps:  hdrSeedSteps,
			status: 429,
			body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,` +
				`"detail":"Rule \"per-user\" (scope user) denied the request: 0 of 4 left; retry after 1 second.",` +
				`"violated-policies":["per-user"]}`,
		},
		{
			name:   "cost exceeds limit",
			rules:  []Rule{hdrSeedRule},
			steps:  []hdrStep{{0, hdrAlice, 9}},
			status: 429,
			body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,` +
				`"detail":"Rule \"per-user\" (scope user) denied the request: its cost is above the limit of 4 and can never pass.",` +
				`"violated-policies":["per-user"]}`,
		},
		{
			name: "two tiers deny, the longer wait decides",
			rules: []Rule{
				{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(Every(10*time.Second), 1)},
				{Name: "per-endpoint", Scope: ScopeEndpoint, Limit: TokenBucket(PerSecond(1), 5)},
				{Name: "global", Scope: ScopeGlobal, Limit: TokenBucket(Every(30*time.Second), 1)},
			},
			steps:  []hdrStep{{0, hdrAlice, 1}, {0, hdrAlice, 1}},
			status: 429,
			body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,` +
				`"detail":"Rule \"global\" (scope global) denied the request: 0 of 1 left; retry after 30 seconds.",` +
				`"violated-policies":["per-user","global"]}`,
		},
		{
			name:   "unavailable",
			rules:  []Rule{hdrSeedRule},
			lopts:  []Option{WithStore(hdrFailStore{}), WithFailureMode(FailClosed)},
			steps:  []hdrStep{{0, hdrAlice, 1}},
			status: 503,
			body: `{"type":"about:blank","title":"Service Unavailable","status":503,` +
				`"detail":"Rate limiting is temporarily unavailable; retry after 1 second."}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newHdrLimiter(t, tc.lopts, tc.rules...)
			d, _ := hdrRun(t, l, tc.steps...)
			f := newHdrFormat(t)
			if got := f.Status(&d); got != tc.status {
				t.Errorf("Status = %d, want %d", got, tc.status)
			}
			body := f.AppendProblem([]byte("prefix"), &d)
			if got := strings.TrimPrefix(string(body), "prefix"); got != tc.body {
				t.Errorf("AppendProblem =\n\t%s\nwant\n\t%s", got, tc.body)
			}
			if tc.body == "" {
				return
			}
			var p hdrProblem
			if err := json.Unmarshal(body[len("prefix"):], &p); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			if p.Status != tc.status {
				t.Errorf("body status = %d, want %d", p.Status, tc.status)
			}
		})
	}
}

func TestNewHeaderFormatValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  HeaderOption
		want string
	}{
		{"reset", WithResetFormat(7), "WithResetFormat"},
		{"tiers", WithRateLimitTiers(9), "WithRateLimitTiers"},
		{"names", WithNameCase(3), "WithNameCase"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := NewHeaderFormat(tc.opt)
			if f != nil || !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewHeaderFormat = %v, %v; want nil and ErrInvalidOption naming %s", f, err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "ratelimit: ") {
				t.Errorf("error %q does not start with the package name", err)
			}
		})
	}
}

func TestNameCases(t *testing.T) {
	for _, n := range headerNames {
		if got, want := canonicalName(n), textproto.CanonicalMIMEHeaderKey(n); got != want {
			t.Errorf("canonicalName(%q) = %q, want %q", n, got, want)
		}
		if got, want := lowerName(n), strings.ToLower(n); got != want {
			t.Errorf("lowerName(%q) = %q, want %q", n, got, want)
		}
	}
	for _, s := range []fmt.Stringer{ResetUnix, ResetDelta, ResetFormat(9), TiersDeciding, TiersAll, TierSelection(9), NamesAsSpecified, NamesCanonical, NamesLower, NameCase(9)} {
		if s.String() == "" {
			t.Errorf("%#v.String() is empty", s)
		}
	}
}

// TestHeadersAllocs: an allowed decision costs one string; a body into a
// buffer with room costs nothing; a decision with no rule costs nothing.
func TestHeadersAllocs(t *testing.T) {
	l := newHdrLimiter(t, nil, hdrThreeTiers...)
	f := newHdrFormat(t, WithRateLimitTiers(TiersAll))
	allowed, _ := hdrRun(t, l, hdrStep{0, hdrAlice, 1})
	denied, _ := hdrRun(t, l, hdrTimes(3, hdrStep{0, hdrAlice, 1})...)
	none, _ := hdrRun(t, newHdrLimiter(t, nil), hdrStep{0, hdrAlice, 1})
	n := 0
	set := func(name, value string) { n += len(name) + len(value) }
	buf := make([]byte, 0, 1024)
	for _, tc := range []struct {
		name string
		fn   func()
		want float64
	}{
		{"allowed", func() { f.Headers(&allowed, set) }, 1},
		{"denied", func() { f.Headers(&denied, set) }, 1},
		{"no rule", func() { f.Headers(&none, set) }, 0},
		{"problem", func() { buf = f.AppendProblem(buf[:0], &denied) }, 0},
	} {
		if got := testing.AllocsPerRun(100, tc.fn); got != tc.want {
			t.Errorf("%s: %v allocations, want %v", tc.name, got, tc.want)
		}
	}
}

// BenchmarkHeaders measures formatting the headers of a decision, the work
// an adapter does on every response.
func BenchmarkHeaders(b *testing.B) {
	one := newHdrLimiter(b, nil, hdrSeedRule)
	three := newHdrLimiter(b, nil, hdrThreeTiers...)
	allowed, _ := hdrRun(b, one, hdrStep{0, hdrAlice, 1})
	denied, _ := hdrRun(b, one, hdrTimes(4, hdrStep{0, hdrAlice, 1})...)
	three1, _ := hdrRun(b, three, hdrStep{0, hdrAlice, 1})
	deflt := newHdrFormat(b)
	all := newHdrFormat(b, WithRateLimitTiers(TiersAll))
	for _, bc := range []struct {
		name string
		f    *HeaderFormat
		d    *Decision
	}{
		{"allow", deflt, &allowed},
		{"deny", deflt, &denied},
		{"three-tiers-all", all, &three1},
	} {
		b.Run(bc.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			set := func(name, value string) { n += len(value) }
			for b.Loop() {
				bc.f.Headers(bc.d, set)
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				n := 0
				set := func(name, value string) { n += len(value) }
				for pb.Next() {
					bc.f.Headers(bc.d, set)
				}
			})
		})
		b.Run(bc.name+"/values/serial", func(b *testing.B) {
			b.ReportAllocs()
			var v HeaderValues
			for b.Loop() {
				v.Format(bc.f, bc.d)
			}
		})
	}
	b.Run("problem/serial", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf = deflt.AppendProblem(buf[:0], &denied)
		}
	})
	b.Run("problem/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 0, 512)
			for pb.Next() {
				buf = deflt.AppendProblem(buf[:0], &denied)
			}
		})
	})
}

// FuzzHeaders drives a limiter of two or three tiers with fuzzed limits and
// traffic, and checks the invariants of every response's fields; then it
// formats a decision over a tier with a fuzzed name.
func FuzzHeaders(f *testing.F) {
	f.Add(uint8(0), int64(2), int64(1000), int64(4), int64(1), int64(250), uint8(9), "per-user", false, false)
	f.Add(uint8(1), int64(5), int64(3000), int64(3), int64(2), int64(700), uint8(12), `a"b\c`, true, true)
	f.Add(uint8(2), int64(1), int64(1), int64(1), int64(1), int64(1), uint8(5), "é\x00", true, false)
	f.Add(uint8(3), int64(7), int64(60000), int64(10), int64(3), int64(999_999_999), uint8(20), "", false, true)
	f.Add(uint8(0), int64(1e9), int64(1000), int64(1<<50), int64(1<<50), int64(0), uint8(3), "big", true, false)
	f.Add(uint8(0), int64(1), int64(3_600_000), int64(2), int64(3), int64(1e12), uint8(4), "x", false, false)
	f.Add(uint8(1), int64(1), int64(10), int64(1), int64(1), int64(1), uint8(2), "\xc0\x800", false, false)
	f.Fuzz(func(t *testing.T, alg uint8, n, perMs, burst, cost, gap int64, steps uint8, name string, all, delta bool) {
		n = hdrClamp(n, 1, 1e9)
		per := time.Duration(hdrClamp(perMs, 1, 3_600_000)) * time.Millisecond
		if int64(per) < n {
			n = int64(per) // at most 1e9 per second
		}
		burst = hdrClamp(burst, 1, MaxCost)
		var limit Limit
		switch alg % 4 {
		case 0:
			// Keep the time to fill under 50 years.
			burst = min(burst, int64(maxSpan)/(int64(per)/n+1))
			limit = TokenBucket(Rate{N: n, Per: per}, max(burst, 1))
		case 1:
			limit = FixedWindow(burst, per)
		case 2:
			limit = SlidingWindow(burst, per)
		default:
			limit = SlidingLog(min(burst, 64), per)
		}
		rules := []Rule{
			{Name: "per-user", Scope: ScopeUser, Limit: limit},
			{Name: "per-endpoint", Scope: ScopeEndpoint, Limit: TokenBucket(PerSecond(3), 5)},
		}
		if all {
			rules = append(rules, Rule{Name: "global", Scope: ScopeGlobal, Limit: FixedWindow(7, 2*time.Second)})
		}
		l := newHdrLimiter(t, nil, rules...)
		opts := []HeaderOption{}
		if all {
			opts = append(opts, WithRateLimitTiers(TiersAll))
		}
		if delta {
			opts = append(opts, WithResetFormat(ResetDelta))
		}
		hf := newHdrFormat(t, opts...)
		cost = hdrClamp(cost, 0, MaxCost)
		gap = hdrClamp(gap, 0, int64(time.Hour))
		now := hdrT0
		var last Decision
		for i := 0; i < int(steps%32); i++ {
			now = now.Add(time.Duration(gap))
			d, err := l.AllowAt(context.Background(), now, hdrAlice, cost)
			if err != nil {
				t.Fatalf("AllowAt: %v", err)
			}
			checkResponse(t, hf, &d, d.Tiers(), now, all, delta)
			last = d
		}
		// Retry-After is never before the real refill: at now + Retry-After
		// the same cost passes, nobody else having consumed.
		if !last.Allowed && last.Reason == ReasonLimited {
			secs, _ := strconv.ParseInt(headerMap(hf, &last, now)["Retry-After"], 10, 64)
			later := now.Add(time.Duration(secs) * time.Second)
			if d, _ := l.AllowAt(context.Background(), later, hdrAlice, cost); !d.Allowed {
				t.Errorf("AllowAt(now+Retry-After %ds, cost %d) denied by %s (RetryAfter %v), want allowed", secs, cost, d.Rule, d.RetryAfter)
			}
		}
		// A fuzzed name, on a hand-built decision.
		if name == "" {
			name = "_"
		}
		d, tiers := handTiers(t, name)
		checkResponse(t, hf, &d, tiers, now, all, delta)
	})
}

func hdrClamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }

// jsonText is s as it reads back from JSON: each invalid UTF-8 byte becomes
// U+FFFD, as encoding/json writes it.
func jsonText(s string) string {
	var b strings.Builder
	for _, r := range s { // yields utf8.RuneError for each invalid byte
		b.WriteRune(r)
	}
	return b.String()
}

// checkResponse formats d and checks the invariants of its fields and body.
func checkResponse(t *testing.T, f *HeaderFormat, d *Decision, tiers []TierState, now time.Time, all, delta bool) {
	t.Helper()
	checkSameAsReference(t, f, d, tiers, now)
	h := make(map[string]string)
	f.headers(d, tiers, now, func(name, value string) {
		if _, dup := h[name]; dup {
			t.Errorf("%s set twice", name)
		}
		h[name] = value
	})
	intField := func(name string) (int64, bool) {
		v, ok := h[name]
		if !ok {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || strconv.FormatInt(n, 10) != v {
			t.Errorf("%s: %q is not a non-negative integer", name, v)
		}
		return n, true
	}
	// X-RateLimit-*.
	if limit, ok := intField("X-RateLimit-Limit"); ok && limit != d.Limit {
		t.Errorf("X-RateLimit-Limit = %d, want %d", limit, d.Limit)
	}
	if rem, ok := intField("X-RateLimit-Remaining"); ok && rem != d.Remaining {
		t.Errorf("X-RateLimit-Remaining = %d, want %d", rem, d.Remaining)
	}
	if reset, ok := intField("X-RateLimit-Reset"); ok {
		full := now.Add(d.ResetAfter)
		var at time.Time
		if delta {
			at = now.Add(time.Duration(reset) * time.Second)
		} else {
			at = time.Unix(reset, 0)
		}
		if at.Before(full) || !at.Before(full.Add(time.Second)) {
			t.Errorf("X-RateLimit-Reset = %d (%v), want the first whole second at or after %v", reset, at, full)
		}
	}
	// Retry-After.
	retry, hasRetry := intField("Retry-After")
	wantRetry := !d.Allowed && d.Reason != ReasonCostExceedsLimit
	if hasRetry != wantRetry {
		t.Errorf("Retry-After sent = %v, want %v (allowed %v, reason %v)", hasRetry, wantRetry, d.Allowed, d.Reason)
	}
	if hasRetry {
		if retry < 1 || time.Duration(retry)*time.Second < d.RetryAfter || time.Duration(retry-1)*time.Second >= d.RetryAfter && retry > 1 {
			t.Errorf("Retry-After = %d for RetryAfter %v, want max(1, ceil)", retry, d.RetryAfter)
		}
	}
	if (h["Cache-Control"] == "no-store") == d.Allowed {
		t.Errorf("Cache-Control = %q on allowed=%v", h["Cache-Control"], d.Allowed)
	}
	// The draft's fields.
	names := make([]string, len(tiers))
	for i := range tiers {
		names[i] = tiers[i].Rule.Name
	}
	if v, ok := h["RateLimit-Policy"]; ok {
		items, err := parseSFList(v)
		if err != nil {
			t.Fatalf("RateLimit-Policy %s: %v", v, err)
		}
		if len(items) != len(tiers) {
			t.Fatalf("RateLimit-Policy %s: %d items for %d tiers", v, len(items), len(tiers))
		}
		for i, it := range items {
			checkItemName(t, "RateLimit-Policy", it, names[i])
			q, qok := it.intParam("q")
			w, wok := it.intParam("w")
			if !qok || q != sfInt(tiers[i].limit().Burst()) || !wok || w < 1 {
				t.Errorf("RateLimit-Policy item %d = %+v, want q=%d and w >= 1", i, it, tiers[i].limit().Burst())
			}
		}
	}
	if v, ok := h["RateLimit"]; ok {
		items, err := parseSFList(v)
		if err != nil {
			t.Fatalf("RateLimit %s: %v", v, err)
		}
		want := 1
		if all {
			want = len(tiers)
		}
		if len(items) != want {
			t.Fatalf("RateLimit %s: %d items, want %d", v, len(items), want)
		}
		for i, it := range items {
			ti := i
			if !all {
				ti = decidingTier(d, tiers)
			}
			checkItemName(t, "RateLimit", it, names[ti])
			r, rok := it.intParam("r")
			tt, tok := it.intParam("t")
			if !rok || r < 0 || r > tiers[ti].Remaining || !tok || tt < 0 {
				t.Errorf("RateLimit item %d = %+v, want 0 <= r <= %d, t >= 0", i, it, tiers[ti].Remaining)
			}
			if hasRetry && tt > retry {
				t.Errorf("RateLimit item %d: t=%d after Retry-After %d", i, tt, retry)
			}
			if tiers[ti].Reason == ReasonLimited && time.Duration(tt)*time.Second < tiers[ti].RetryAfter {
				t.Errorf("RateLimit item %d: t=%d before the tier's RetryAfter %v", i, tt, tiers[ti].RetryAfter)
			}
		}
	}
	// The body.
	body := appendProblem(nil, d, tiers)
	if d.Allowed {
		if len(body) != 0 {
			t.Errorf("allowed decision has body %s", body)
		}
		return
	}
	var p hdrProblem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if p.Status != f.Status(d) {
		t.Errorf("body status %d, Status %d", p.Status, f.Status(d))
	}
	var denied []string
	for i := range tiers {
		if !tiers[i].Allowed {
			denied = append(denied, jsonText(names[i]))
		}
	}
	if d.Reason != ReasonUnavailable && !slices.Equal(p.ViolatedPolicies, denied) {
		t.Errorf("violated-policies = %q, want %q", p.ViolatedPolicies, denied)
	}
}

// checkItemName checks that an item's value is the String name, or, for a
// name that a String cannot hold, a String of the same length.
func checkItemName(t *testing.T, field string, it sfItem, name string) {
	t.Helper()
	s, ok := it.value.(sfString)
	if !ok {
		t.Errorf("%s item %+v: value is not a String", field, it)
		return
	}
	printable := !strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r > 0x7e })
	if printable && string(s) != name || !printable && len(s) != len(name) {
		t.Errorf("%s item name %q, want %q", field, s, name)
	}
}

// A minimal parser of RFC 9651 Lists of Items (section 4.2.1), enough to
// check what HeaderFormat writes: no Inner Lists, Dates or Display Strings.

type sfString string
type sfToken string

type sfParam struct {
	key   string
	value any // int64, float64, sfString, sfToken, []byte, bool
}

type sfItem struct {
	value  any
	params []sfParam
}

func (it sfItem) intParam(key string) (int64, bool) {
	for _, p := range it.params {
		if p.key == key {
			n, ok := p.value.(int64)
			return n, ok
		}
	}
	return 0, false
}

type sfParser struct {
	s string
	i int
}

func parseSFList(s string) ([]sfItem, error) {
	p := &sfParser{s: strings.Trim(s, " ")} // section 4.2: discard leading and trailing SP
	var items []sfItem
	for p.i < len(p.s) {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.ows()
		if p.i == len(p.s) {
			return items, nil
		}
		if p.s[p.i] != ',' {
			return nil, fmt.Errorf("byte %d: want ',' after a member, got %q", p.i, p.s[p.i])
		}
		p.i++
		p.ows()
		if p.i == len(p.s) {
			return nil, errors.New("trailing comma")
		}
	}
	return items, nil
}

func (p *sfParser) ows() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bareItem()
	if err != nil {
		return sfItem{}, err
	}
	it := sfItem{value: v}
	for p.i < len(p.s) && p.s[p.i] == ';' { // section 4.2.3.2
		p.i++
		for p.i < len(p.s) && p.s[p.i] == ' ' {
			p.i++
		}
		key, err := p.key()
		if err != nil {
			return sfItem{}, err
		}
		var val any = true
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if val, err = p.bareItem(); err != nil {
				return sfItem{}, err
			}
		}
		for _, q := range it.params {
			if q.key == key {
				return sfItem{}, fmt.Errorf("parameter %q twice", key) // we never repeat one
			}
		}
		it.params = append(it.params, sfParam{key, val})
	}
	return it, nil
}

func (p *sfParser) key() (string, error) { // section 4.2.3.3
	start := p.i
	if p.i == len(p.s) || !(p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] == '*') {
		return "", fmt.Errorf("byte %d: bad key start", p.i)
	}
	for p.i < len(p.s) && strings.IndexByte("abcdefghijklmnopqrstuvwxyz0123456789_-.*", p.s[p.i]) >= 0 {
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bareItem() (any, error) { // section 4.2.3.1
	if p.i == len(p.s) {
		return nil, errors.New("empty item")
	}
	switch c := p.s[p.i]; {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '"':
		return p.str()
	case c == ':':
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return nil, errors.New("unterminated byte sequence")
		}
		b := []byte(p.s[p.i+1 : p.i+1+end])
		p.i += end + 2
		return b, nil
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return p.s[p.i-1] == '1', nil
		}
		return nil, errors.New("bad boolean")
	case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '*':
		start := p.i
		for p.i < len(p.s) && (p.s[p.i] > 0x20 && p.s[p.i] < 0x7f && strings.IndexByte(`"(),;<=>?@[\]{}`, p.s[p.i]) < 0 || p.s[p.i] == ':' || p.s[p.i] == '/') {
			p.i++
		}
		return sfToken(p.s[start:p.i]), nil
	}
	return nil, fmt.Errorf("byte %d: unexpected %q", p.i, p.s[p.i])
}

func (p *sfParser) number() (any, error) { // section 4.2.4
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits, dot := 0, -1
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c >= '0' && c <= '9' {
			digits++
		} else if c == '.' && dot < 0 {
			if digits > 12 {
				return nil, errors.New("decimal with more than 12 integer digits")
			}
			dot = digits
		} else {
			break
		}
		p.i++
	}
	num := p.s[start:p.i]
	if digits == 0 {
		return nil, errors.New("number without digits")
	}
	if dot < 0 {
		if digits > 15 {
			return nil, fmt.Errorf("integer %s has more than 15 digits", num)
		}
		return strconv.ParseInt(num, 10, 64)
	}
	if digits-dot < 1 || digits-dot > 3 {
		return nil, fmt.Errorf("decimal %s: 1 to 3 fraction digits", num)
	}
	return strconv.ParseFloat(num, 64)
}

func (p *sfParser) str() (any, error) { // section 4.2.5
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i == len(p.s) || p.s[p.i] != '"' && p.s[p.i] != '\\' {
				return nil, errors.New("bad escape in string")
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return sfString(b.String()), nil
		case c < 0x20 || c > 0x7e:
			return nil, fmt.Errorf("byte %#x in string", c)
		default:
			b.WriteByte(c)
		}
	}
	return nil, errors.New("unterminated string")
}

func TestParseSFList(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`"a";q=1;w=2, "b";q=3`, true},
		{`"a\"b\\c";r=0;t=1`, true},
		{` "a" , "b" `, true},
		{`tok;x;y=?0;z=:AAE=:;d=1.5`, true},
		{`"a",`, false},
		{`"a" "b"`, false},
		{`"a\x"`, false},
		{`"a`, false},
		{`"a";q=1234567890123456`, false},
		{`"a";Q=1`, false},
		{"\"a\x01\"", false},
	} {
		_, err := parseSFList(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("parseSFList(%s) error = %v, want ok=%v", tc.in, err, tc.ok)
		}
	}
	if !utf8.ValidString(ProblemTypeQuotaExceeded) {
		t.Fatal("problem type is not UTF-8")
	}
}

// TestHeadersShadowTiers: tiers in shadow mode are left out of the fields
// unless WithShadowTiers, and a shadow-denied request gets no 429 fields.
func TestHeadersShadowTiers(t *testing.T) {
	l := newTestLimiter(t, nil,
		Rule{Name: "enforced", Scope: ScopeUser, Limit: TokenBucket(PerHour(10), 10)},
		Rule{Name: "trial", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1), Shadow: true})
	ctx := context.Background()
	l.AllowAt(ctx, t0, Request{User: "u"}, 1)
	d, err := l.AllowAt(ctx, t0, Request{User: "u"}, 1)
	if err != nil || !d.ShadowDenied {
		t.Fatalf("AllowAt = %+v, %v; want shadow-denied", d, err)
	}
	for _, tc := range []struct {
		opts       []HeaderOption
		wantPolicy string
	}{
		{nil, `"enforced";q=10;w=3600`},
		{[]HeaderOption{WithShadowTiers(true)}, `"enforced";q=10;w=3600, "trial";q=1;w=3600`},
	} {
		f, err := NewHeaderFormat(tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		f.Headers(&d, func(name, value string) { got[name] = value })
		if got["RateLimit-Policy"] != tc.wantPolicy || got["Retry-After"] != "" || got["X-RateLimit-Remaining"] != "8" {
			t.Errorf("%d options: headers %v, want RateLimit-Policy %s, 8 remaining, no Retry-After", len(tc.opts), got, tc.wantPolicy)
		}
		if f.Status(&d) != 0 {
			t.Errorf("Status = %d, want 0 (allowed)", f.Status(&d))
		}
	}
}

// refHeaderLines is the reference the header fields are checked against:
// every value formatted from the decision on each call, with nothing kept
// between calls, one append after another, as "Name: value" lines in the
// order Headers sets them.
func refHeaderLines(f *HeaderFormat, d *Decision, tiers []TierState, now time.Time) []string {
	deciding := -1
	if d.Limit != 0 {
		for i := range tiers {
			if tiers[i].Rule != nil && tiers[i].Rule.Name == d.Rule {
				deciding = i
				break
			}
		}
	}
	retry := int64(-1)
	if !d.Allowed && d.Reason != ReasonCostExceedsLimit {
		retry = max((int64(d.RetryAfter)+int64(time.Second)-1)/int64(time.Second), 1)
	}
	if deciding < 0 && retry < 0 {
		return nil
	}
	var lines []string
	add := func(h HeaderField, v string) { lines = append(lines, f.names[h]+": "+v) }
	if deciding >= 0 {
		if f.on[FieldLimit] {
			add(FieldLimit, strconv.FormatInt(d.Limit, 10))
			add(FieldRemaining, strconv.FormatInt(d.Remaining, 10))
			if f.reset == ResetDelta {
				add(FieldReset, strconv.FormatInt(ceilSeconds(d.ResetAfter), 10))
			} else {
				add(FieldReset, strconv.FormatInt(ceilUnix(now.Add(d.ResetAfter)), 10))
			}
		}
		if f.on[FieldPolicy] {
			var items []string
			for i := range tiers {
				items = append(items, string(appendPolicyItem(nil, &tiers[i])))
			}
			add(FieldPolicy, strings.Join(items, ", "))
		}
		if f.on[FieldRateLimit] {
			var items []string
			for i := range tiers {
				if f.tiers == TiersAll || i == deciding {
					items = append(items, string(appendServiceItem(nil, nil, i, &tiers[i], retry, nil)))
				}
			}
			add(FieldRateLimit, strings.Join(items, ", "))
		}
	}
	if retry >= 0 && f.on[FieldRetryAfter] {
		add(FieldRetryAfter, strconv.FormatInt(retry, 10))
	}
	if !d.Allowed && f.on[FieldCacheControl] {
		add(FieldCacheControl, "no-store")
	}
	return lines
}

// checkSameAsReference checks that Headers, HeaderValues.Format and
// HeaderValues.SetHeader give d's fields exactly as refHeaderLines does,
// twice (the second time from what the format kept of the first).
func checkSameAsReference(t *testing.T, f *HeaderFormat, d *Decision, tiers []TierState, now time.Time) {
	t.Helper()
	want := refHeaderLines(f, d, tiers, now)
	for round := range 2 {
		var got []string
		f.headers(d, tiers, now, func(name, value string) { got = append(got, name+": "+value) })
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: Headers =\n\t%s\nwant\n\t%s", round, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
		}
		var v HeaderValues
		v.used = 3 // leftovers of an earlier use must not matter
		v.n = 2
		f.values(d, tiers, now, resetValues(&v))
		got = got[:0]
		for i := range v.Len() {
			val := string(v.Bytes(i))
			if c, ok := v.Constant(i); ok && c != val {
				t.Fatalf("round %d: field %v: Constant %q, Bytes %q", round, v.Field(i), c, val)
			}
			got = append(got, v.Field(i).Name(f)+": "+val)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: HeaderValues =\n\t%s\nwant\n\t%s", round, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
		}
		h := map[string][]string{"Other": {"kept"}}
		v.SetHeader(h, &f.names)
		if len(h) != len(want)+1 || !slices.Equal(h["Other"], []string{"kept"}) {
			t.Fatalf("round %d: SetHeader = %q, want the %d fields and Other", round, h, len(want))
		}
		for _, line := range want {
			name, val, _ := strings.Cut(line, ": ")
			if got := h[name]; !slices.Equal(got, []string{val}) || cap(got) != 1 {
				t.Fatalf("round %d: SetHeader: %s = %q (cap %d), want [%q] (cap 1)", round, name, got, cap(got), val)
			}
		}
	}
}

// resetValues empties v as Format does before filling it.
func resetValues(v *HeaderValues) *HeaderValues {
	v.n, v.used = 0, 0
	return v
}

// TestHeaderValues: Format gives what Headers sets, names included, with
// the constant values reported as such; a nil or zero format, or an
// outcome with no fields, leaves v empty.
func TestHeaderValues(t *testing.T) {
	l := newHdrLimiter(t, nil, hdrSeedRule)
	allowed, _ := hdrRun(t, l, hdrStep{0, hdrAlice, 1})
	denied, _ := hdrRun(t, l, hdrTimes(4, hdrStep{0, hdrAlice, 1})...)
	for _, tc := range []struct {
		name     string
		f        *HeaderFormat
		d        *Decision
		want     []string
		constant []HeaderField
	}{
		{"allowed", newHdrFormat(t), &allowed, []string{
			"X-RateLimit-Limit: 4", "X-RateLimit-Remaining: 3", "X-RateLimit-Reset: 1767225601",
			`RateLimit-Policy: "per-user";q=4;w=2`, `RateLimit: "per-user";r=3;t=1`,
		}, []HeaderField{FieldLimit, FieldPolicy}},
		{"denied, canonical", newHdrFormat(t, WithNameCase(NamesCanonical)), &denied, []string{
			"X-Ratelimit-Limit: 4", "X-Ratelimit-Remaining: 0", "X-Ratelimit-Reset: 1767225602",
			`Ratelimit-Policy: "per-user";q=4;w=2`, `Ratelimit: "per-user";r=0;t=1`,
			"Retry-After: 1", "Cache-Control: no-store",
		}, []HeaderField{FieldLimit, FieldPolicy, FieldCacheControl}},
		{"nil format", nil, &allowed, nil, nil},
		{"zero format", &HeaderFormat{}, &allowed, nil, nil},
		{"no rule applied", newHdrFormat(t), &Decision{Allowed: true}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v HeaderValues
			v.Format(tc.f, tc.d)
			var got []string
			var constant []HeaderField
			for i := range v.Len() {
				got = append(got, v.Field(i).Name(tc.f)+": "+string(v.Bytes(i)))
				if _, ok := v.Constant(i); ok {
					constant = append(constant, v.Field(i))
				}
			}
			if !slices.Equal(got, tc.want) || !slices.Equal(constant, tc.constant) {
				t.Errorf("Format = %q, constant %v; want %q, constant %v", got, constant, tc.want, tc.constant)
			}
			if want := headerLines(tc.f, tc.d, hdrT0); !slices.Equal(got, want) {
				t.Errorf("Format = %q, Headers = %q", got, want)
			}
		})
	}
	t.Run("out of range", func(t *testing.T) {
		var v HeaderValues
		v.Format(newHdrFormat(t), &allowed)
		panics := func(name string, i int, f func(int)) {
			t.Helper()
			defer func() {
				t.Helper()
				if recover() == nil {
					t.Errorf("%s(%d) of %d fields did not panic", name, i, v.Len())
				}
			}()
			f(i)
		}
		for _, i := range []int{-1, v.Len(), NumHeaderFields} {
			panics("Field", i, func(i int) { v.Field(i) })
			panics("Bytes", i, func(i int) { v.Bytes(i) })
			panics("Constant", i, func(i int) { v.Constant(i) })
		}
	})
}

func TestHeaderFieldNames(t *testing.T) {
	lower := newHdrFormat(t, WithNameCase(NamesLower))
	for _, tc := range []struct {
		h          HeaderField
		str, lower string
	}{
		{FieldLimit, "X-RateLimit-Limit", "x-ratelimit-limit"},
		{FieldPolicy, "RateLimit-Policy", "ratelimit-policy"},
		{FieldCacheControl, "Cache-Control", "cache-control"},
		{HeaderField(NumHeaderFields), "HeaderField(7)", ""},
	} {
		if got := tc.h.String(); got != tc.str {
			t.Errorf("%d.String() = %q, want %q", tc.h, got, tc.str)
		}
		if got := tc.h.Name(lower); got != tc.lower {
			t.Errorf("%v.Name(lower) = %q, want %q", tc.h, got, tc.lower)
		}
		if got := tc.h.Name(nil); got != "" {
			t.Errorf("%v.Name(nil) = %q, want \"\"", tc.h, got)
		}
	}
}

// TestHeaderValuesAllocs: once a format has seen a decision's rules,
// formatting its fields into a HeaderValues costs nothing, denied or
// allowed, one tier or three, and responses alternating between rule sets
// (a tier that applies to some requests only) as well.
func TestHeaderValuesAllocs(t *testing.T) {
	one := newHdrLimiter(t, nil, hdrSeedRule)
	three := newHdrLimiter(t, nil, hdrThreeTiers...)
	allowed, _ := hdrRun(t, one, hdrStep{0, hdrAlice, 1})
	denied, _ := hdrRun(t, one, hdrTimes(5, hdrStep{0, hdrAlice, 1})...)
	three1, _ := hdrRun(t, three, hdrStep{0, hdrAlice, 1})
	anonymous, _ := hdrRun(t, three, hdrStep{0, Request{Endpoint: "/search"}, 1})
	if three1.NumTiers() == anonymous.NumTiers() {
		t.Fatalf("both decisions have %d tiers, want different rule sets", anonymous.NumTiers())
	}
	deflt := newHdrFormat(t)
	all := newHdrFormat(t, WithRateLimitTiers(TiersAll))
	for _, tc := range []struct {
		name string
		f    *HeaderFormat
		d    []*Decision
	}{
		{"allowed", deflt, []*Decision{&allowed}},
		{"denied", deflt, []*Decision{&denied}},
		{"three tiers, all", all, []*Decision{&three1}},
		{"alternating rule sets", deflt, []*Decision{&three1, &anonymous}},
		{"alternating rule sets, all", all, []*Decision{&three1, &anonymous, &allowed}},
	} {
		var v HeaderValues
		format := func() {
			for _, d := range tc.d {
				v.Format(tc.f, d)
			}
		}
		format() // the format meets the rule sets
		if got := testing.AllocsPerRun(100, format); got != 0 {
			t.Errorf("%s: %v allocations, want 0", tc.name, got)
		}
	}
}

// TestHeaderValuesOverflow: values longer than the inline buffer (four
// tiers of 64-character names reported with TiersAll) come out whole.
func TestHeaderValuesOverflow(t *testing.T) {
	var rules []Rule
	for i := range 4 {
		rules = append(rules, Rule{Name: strings.Repeat(string(rune('a'+i)), 64), Scope: ScopeUser, Limit: TokenBucket(PerSecond(1_000_000), 999_999_999_999)})
	}
	l := newHdrLimiter(t, nil, rules...)
	d, now := hdrRun(t, l, hdrStep{0, hdrAlice, 1})
	f := newHdrFormat(t, WithRateLimitTiers(TiersAll))
	checkSameAsReference(t, f, &d, d.Tiers(), now)
	var v HeaderValues
	v.Format(f, &d)
	total := 0
	for i := range v.Len() {
		total += len(v.Bytes(i))
	}
	if total <= headerValuesBuf {
		t.Fatalf("the values take %d bytes, not more than the %d inline: the test checks nothing", total, headerValuesBuf)
	}
}

// TestHeaderTextsFollowPolicy: the constant values a format keeps follow
// the rules of each decision: a policy replaced at run time, a rule set of
// another plan, a limit from a Lookup (never kept: it may differ per
// identity), and the cache stays bounded however many rule sets it sees.
func TestHeaderTextsFollowPolicy(t *testing.T) {
	f := newHdrFormat(t)
	policyOf := func(d *Decision) string {
		var got string
		f.Headers(d, func(name, value string) {
			if name == "RateLimit-Policy" {
				got = value
			}
		})
		return got
	}
	l := newHdrLimiter(t, nil, hdrSeedRule)
	d, _ := hdrRun(t, l, hdrStep{0, hdrAlice, 1})
	if got, want := policyOf(&d), `"per-user";q=4;w=2`; got != want {
		t.Fatalf("RateLimit-Policy = %s, want %s", got, want)
	}
	p, err := NewPolicy(Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(2), 6)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	d, _ = hdrRun(t, l, hdrStep{0, hdrAlice, 1})
	if got, want := policyOf(&d), `"per-user";q=6;w=3`; got != want {
		t.Errorf("after SetPolicy: RateLimit-Policy = %s, want %s", got, want)
	}

	table := NewLimitTable()
	if err := table.Set("alice", TokenBucket(PerSecond(1), 7)); err != nil {
		t.Fatal(err)
	}
	if err := table.Set("bob", TokenBucket(PerSecond(1), 9)); err != nil {
		t.Fatal(err)
	}
	lk := newHdrLimiter(t, nil, Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 5), Lookup: table})
	for _, tc := range []struct {
		user, want string
	}{{"alice", `"per-user";q=7;w=7`}, {"bob", `"per-user";q=9;w=9`}, {"carol", `"per-user";q=5;w=5`}, {"alice", `"per-user";q=7;w=7`}} {
		d, now := hdrRun(t, lk, hdrStep{0, Request{User: tc.user}, 1})
		if got := policyOf(&d); got != tc.want {
			t.Errorf("%s: RateLimit-Policy = %s, want %s", tc.user, got, tc.want)
		}
		checkSameAsReference(t, f, &d, d.Tiers(), now)
	}

	for i := range 2 * maxTexts {
		r := Rule{Name: fmt.Sprintf("r%d", i), Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), int64(i+1))}
		d, tiers := Decision{Allowed: true, Limit: int64(i + 1), Rule: r.Name}, []TierState{{Rule: &r}}
		var got string
		f.headers(&d, tiers, hdrT0, func(name, value string) {
			if name == "RateLimit-Policy" {
				got = value
			}
		})
		// An unvalidated limit has no window to report.
		if want := fmt.Sprintf(`"r%d";q=%d`, i, i+1); got != want {
			t.Fatalf("rule set %d: RateLimit-Policy = %s, want %s", i, got, want)
		}
	}
	if n := len(*f.texts.m.Load()); n > maxTexts {
		t.Errorf("the format keeps %d rule sets, want at most %d", n, maxTexts)
	}
}
