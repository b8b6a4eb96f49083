package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNewPolicyRejects(t *testing.T) {
	ok := TokenBucket(PerSecond(10), 50)
	tests := []struct {
		name  string
		rules []Rule
		want  error
		in    string // the message names the rule and the field
	}{
		{"zero rate", []Rule{{Name: "a", Scope: ScopeUser, Limit: TokenBucket(PerSecond(0), 5)}}, ErrInvalidRate, `rule "a": invalid rate: token count must be > 0, got 0`},
		{"negative rate", []Rule{{Name: "a", Scope: ScopeUser, Limit: TokenBucket(PerSecond(-1), 5)}}, ErrInvalidRate, "got -1"},
		{"zero period", []Rule{{Name: "a", Scope: ScopeUser, Limit: TokenBucket(Rate{N: 1}, 5)}}, ErrInvalidRate, "period must be > 0"},
		{"above 1e9/s", []Rule{{Name: "a", Scope: ScopeUser, Limit: TokenBucket(Rate{N: 2, Per: time.Nanosecond}, 5)}}, ErrInvalidRate, "above 1e9 per second"},
		{"burst 0", []Rule{{Name: "a", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 0)}}, ErrInvalidBurst, "burst must be between 1 and 2^50, got 0"},
		{"burst too large", []Rule{{Name: "a", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), MaxCost+1)}}, ErrInvalidBurst, "burst"},
		{"fill time too long", []Rule{{Name: "a", Scope: ScopeUser, Limit: TokenBucket(Every(365*24*time.Hour), 100)}}, ErrInvalidBurst, "longer than 400 days"},
		{"window 0", []Rule{{Name: "a", Scope: ScopeUser, Limit: FixedWindow(10, 0)}}, ErrInvalidWindow, "window must be > 0"},
		{"negative window", []Rule{{Name: "a", Scope: ScopeUser, Limit: SlidingWindow(10, -time.Second)}}, ErrInvalidWindow, "window"},
		{"sub-millisecond window", []Rule{{Name: "a", Scope: ScopeUser, Limit: FixedWindow(10, time.Second+time.Microsecond)}}, ErrInvalidWindow, "whole number of milliseconds"},
		{"log limit 0", []Rule{{Name: "a", Scope: ScopeUser, Limit: SlidingLog(0, time.Second)}}, ErrInvalidBurst, "limit must be"},
		{"shaping without wait", []Rule{{Name: "a", Scope: ScopeUser, Limit: Shaping(PerSecond(1), 1, 0)}}, ErrInvalidWindow, "max wait"},
		{"no limit", []Rule{{Name: "a", Scope: ScopeUser}}, ErrInvalidRule, "no limit set"},
		{"no name", []Rule{{Scope: ScopeUser, Limit: ok}}, ErrInvalidRule, `rule "#0"`},
		{"bad name", []Rule{{Name: "a b", Scope: ScopeUser, Limit: ok}}, ErrInvalidRule, "name must be"},
		{"bad plan", []Rule{{Name: "a", Scope: ScopeUser, Limit: ok, Plan: "pro plan"}}, ErrInvalidRule, "plan must be"},
		{"unknown scope", []Rule{{Name: "a", Scope: "usr", Limit: ok}}, ErrUnknownScope, `"usr"`},
		{"empty scope", []Rule{{Name: "a", Limit: ok}}, ErrUnknownScope, "scope"},
		{"bad dimension", []Rule{{Name: "a", Scope: Dimension(""), Limit: ok}}, ErrUnknownScope, "dim:"},
		{"duplicate name", []Rule{{Name: "a", Scope: ScopeUser, Limit: ok}, {Name: "a", Scope: ScopeIP, Limit: ok}}, ErrDuplicateRule, `rule "a"`},
		{"same name, every plan and pro", []Rule{{Name: "a", Scope: ScopeUser, Limit: ok}, {Name: "a", Scope: ScopeUser, Limit: ok, Plan: "pro"}}, ErrDuplicateRule, "plan"},
		{"same name, same plan", []Rule{{Name: "a", Scope: ScopeUser, Limit: ok, Plan: "pro"}, {Name: "a", Scope: ScopeUser, Limit: ok, Plan: "pro"}}, ErrDuplicateRule, `"pro"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPolicy(tc.rules...)
			if p != nil || !errors.Is(err, tc.want) {
				t.Fatalf("NewPolicy = %v, %v; want nil, %v", p, err, tc.want)
			}
			var re *RuleError
			if !errors.As(err, &re) {
				t.Fatalf("error %T is not a *RuleError", err)
			}
			if !strings.HasPrefix(err.Error(), "ratelimit: rule ") || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("error %q does not contain %q", err, tc.in)
			}
		})
	}
}

func TestNewPolicyAccepts(t *testing.T) {
	ok := TokenBucket(PerSecond(10), 50)
	p, err := NewPlanPolicy(Plans{Default: "free"},
		Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(10), 50), Plan: "free"},
		Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(100), 500), Plan: "pro"},
		Rule{Name: "per-tenant", Scope: Dimension("tenant"), Limit: ok},
		Rule{Name: "daily", Scope: ScopeUser, Limit: TokenBucket(PerDay(1000), 1000)},
		Rule{Name: "slow", Scope: ScopeGlobal, Limit: TokenBucket(Every(time.Hour), 1)},
		Rule{Name: "edge", Scope: ScopeIP, Limit: TokenBucket(Rate{N: 1, Per: time.Nanosecond}, 1)},
		Rule{Name: "fw", Scope: ScopeIP, Limit: FixedWindow(100, time.Minute)},
		Rule{Name: "sw", Scope: ScopeIP, Limit: SlidingWindow(100, time.Minute)},
		Rule{Name: "log", Scope: ScopeIP, Limit: SlidingLog(100, time.Minute)},
		Rule{Name: "queue", Scope: ScopeIP, Limit: Shaping(PerSecond(5), 1, time.Second)},
	)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(p.Rules()); got != 10 {
		t.Fatalf("len(Rules()) = %d, want 10", got)
	}
}

func TestRateFromFloat(t *testing.T) {
	tests := []struct {
		in       float64
		interval time.Duration
		err      bool
	}{
		{10, 100 * time.Millisecond, false},
		{0.5, 2 * time.Second, false},
		{3, 333333334, false}, // rounded up: never above 3/s
		{1e9, time.Nanosecond, false},
		{1e-6, 1e6 * time.Second, false},
		{0, 0, true}, {-1, 0, true}, {math.NaN(), 0, true}, {math.Inf(1), 0, true}, {2e9, 0, true},
	}
	for _, tc := range tests {
		r, err := RateFromFloat(tc.in)
		if tc.err {
			if !errors.Is(err, ErrInvalidRate) {
				t.Errorf("RateFromFloat(%v) error = %v, want ErrInvalidRate", tc.in, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("RateFromFloat(%v): %v", tc.in, err)
		}
		got, err := r.interval()
		if err != nil || time.Duration(got) != tc.interval {
			t.Errorf("RateFromFloat(%v) interval = %v, %v; want %v", tc.in, time.Duration(got), err, tc.interval)
		}
	}
}

func TestApplies(t *testing.T) {
	lim := TokenBucket(PerSecond(1), 1)
	tests := []struct {
		name string
		rule Rule
		req  Request
		id   string
		ok   bool
	}{
		{"user present", Rule{Scope: ScopeUser}, Request{User: "u"}, "u", true},
		{"anonymous skips per-user", Rule{Scope: ScopeUser}, Request{IP: "1.2.3.4"}, "", false},
		{"global always", Rule{Scope: ScopeGlobal}, Request{}, globalKey, true},
		{"plan matches", Rule{Scope: ScopeUser, Plan: "pro"}, Request{User: "u", Plan: "pro"}, "u", true},
		{"plan differs", Rule{Scope: ScopeUser, Plan: "pro"}, Request{User: "u", Plan: "free"}, "", false},
		{"plan missing", Rule{Scope: ScopeUser, Plan: "pro"}, Request{User: "u"}, "", false},
		{"disabled", Rule{Scope: ScopeGlobal, Disabled: true}, Request{}, "", false},
		{"dimension", Rule{Scope: Dimension("tenant")}, Request{Dims: []Dim{{"region", "eu"}, {"tenant", "acme"}}}, "acme", true},
		{"dimension absent", Rule{Scope: Dimension("tenant")}, Request{Dims: []Dim{{"region", "eu"}}}, "", false},
		{"dimension empty", Rule{Scope: Dimension("tenant")}, Request{Dims: []Dim{{"tenant", ""}}}, "", false},
		{"dimension empty, then set", Rule{Scope: Dimension("tenant")}, Request{Dims: []Dim{{"tenant", ""}, {"tenant", "acme"}}}, "acme", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.rule.Name, tc.rule.Limit = "r", lim
			p, err := NewPlanPolicy(Plans{RejectUnknown: true}, tc.rule)
			if err != nil {
				t.Fatal(err)
			}
			id, ok := p.applies(0, &tc.req, tc.req.Plan)
			if id != tc.id || ok != tc.ok {
				t.Fatalf("applies = %q, %v; want %q, %v", id, ok, tc.id, tc.ok)
			}
		})
	}
}

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{
		"per-user": true, "user.free": true, "A_9": true, strings.Repeat("x", 64): true,
		"": false, strings.Repeat("x", 65): false, "has space": false, "a/b": false, "é": false,
	} {
		if got := ValidName(name); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestRequestIdentity(t *testing.T) {
	req := &Request{User: "u", IP: "1.2.3.4", Endpoint: "/e",
		Dims: []Dim{{Name: "region", Value: ""}, {Name: "tenant", Value: "acme"}, {Name: "tenant", Value: "later"}, {Name: "region", Value: "eu"}}}
	for scope, want := range map[Scope]string{
		ScopeUser: "u", ScopeIP: "1.2.3.4", ScopeEndpoint: "/e", ScopeGlobal: "*",
		Dimension("tenant"): "acme", Dimension("region"): "eu", Dimension("zone"): "",
	} {
		if got := req.Identity(scope); got != want {
			t.Errorf("Identity(%q) = %q, want %q", scope, got, want)
		}
	}
}

// TestEmptyDimSkipped: an empty Dim is absent, so a later one of the same
// name keys the request, on the plain path as on the general one (a When
// predicate that always holds).
func TestEmptyDimSkipped(t *testing.T) {
	for _, when := range []func(*Request) bool{nil, func(*Request) bool { return true }} {
		l := newTestLimiter(t, nil, Rule{Name: "per-tenant", Scope: Dimension("tenant"), Limit: TokenBucket(PerMinute(1), 1), When: when})
		req := Request{Dims: []Dim{{Name: "tenant", Value: ""}, {Name: "tenant", Value: "acme"}}}
		for i, want := range []bool{true, false} {
			d, err := l.Allow(context.Background(), req)
			if err != nil || d.Allowed != want || d.NumTiers() != 1 {
				t.Fatalf("when %v: Allow #%d = allowed %v, %d tiers, %v; want %v, 1 tier (tenant acme)", when != nil, i, d.Allowed, d.NumTiers(), err, want)
			}
		}
	}
}

// TestPlainPolicyResolve: a policy of plain rules (resolve's short path,
// and decideOne's for one rule on the memory store) decides as the same
// rules do on the general path (here forced by a When predicate that
// always holds, on a rule that never applies), request by request, invalid
// identities included.
func TestPlainPolicyResolve(t *testing.T) {
	all := []Rule{
		{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 3)},
		{Name: "per-ip", Scope: ScopeIP, Limit: TokenBucket(PerSecond(2), 4)},
		{Name: "tenant", Scope: Dimension("tenant"), Limit: TokenBucket(PerSecond(1), 2)},
		{Name: "global", Scope: ScopeGlobal, Limit: TokenBucket(PerSecond(10), 20)},
		{Name: "window", Scope: ScopeUser, Limit: FixedWindow(3, time.Second)},
	}
	never := Rule{Name: "never", Scope: Dimension("none"), Limit: TokenBucket(PerSecond(1), 1), When: func(*Request) bool { return true }}
	reqs := []Request{
		{User: "u", IP: "192.0.2.1"},
		{IP: "192.0.2.1", Dims: []Dim{{Name: "tenant", Value: "t1"}}},
		{User: "u"},
		{},
		{User: "bad\nkey", IP: "bad\tip", Dims: []Dim{{Name: "tenant", Value: "\x7f"}}},
		{User: strings.Repeat("x", MaxKeyLen+1), IP: strings.Repeat("x", MaxKeyLen+1), Dims: []Dim{{Name: "tenant", Value: strings.Repeat("x", MaxKeyLen+1)}}},
	}
	sets := [][]Rule{all[:4]}
	for _, r := range all {
		sets = append(sets, []Rule{r})
	}
	ctx := context.Background()
	for _, rules := range sets {
		plain, err := NewPolicy(rules...)
		if err != nil {
			t.Fatal(err)
		}
		general, err := NewPolicy(append(slices.Clone(rules), never)...)
		if err != nil {
			t.Fatal(err)
		}
		if !plain.plain || general.plain {
			t.Fatalf("plain = %v and %v, want true and false", plain.plain, general.plain)
		}
		a, b := newTestLimiter(t, nil), newTestLimiter(t, nil)
		if err := a.SetPolicy(plain); err != nil {
			t.Fatal(err)
		}
		if err := b.SetPolicy(general); err != nil {
			t.Fatal(err)
		}
		for i := range 60 {
			req := reqs[i%len(reqs)]
			now := t0.Add(time.Duration(i) * 150 * time.Millisecond)
			da, erra := a.AllowAt(ctx, now, req, int64(i%3))
			db, errb := b.AllowAt(ctx, now, req, int64(i%3))
			if fmt.Sprint(erra) != fmt.Sprint(errb) || !sameDecision(&da, &db) {
				t.Fatalf("rules %s, request %d %+v: plain %+v, %v; general %+v, %v", rules[0].Name, i, req, da, erra, db, errb)
			}
			if id := req.identityOf(plain.scopes[0], rules[0].Scope); id != "" && !validKey(id) && erra == nil {
				t.Fatalf("rules %s, request %d: invalid identity %q accepted", rules[0].Name, i, id)
			}
		}
	}
}
