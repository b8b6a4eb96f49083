package core

import (
	"context"
	"errors"
	"testing"
)

func TestPlansDefault(t *testing.T) {
	p, err := NewPlanPolicy(Plans{Default: "free"},
		Rule{Name: "per-user", Scope: ScopeUser, Plan: "free", Limit: TokenBucket(PerMinute(2), 2)},
		Rule{Name: "per-user", Scope: ScopeUser, Plan: "pro", Limit: TokenBucket(PerMinute(5), 5)},
	)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLimiter(p)
	if err != nil {
		t.Fatal(err)
	}
	count := func(req Request) (n int) {
		for range 10 {
			d, err := l.AllowAt(context.Background(), t0, req, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct {
		req  Request
		want int
	}{
		{Request{User: "f", Plan: "free"}, 2},
		{Request{User: "p", Plan: "pro"}, 5},
		{Request{User: "none"}, 2},                    // no plan: the default
		{Request{User: "cap", Plan: "Pro"}, 2},        // plans are case-sensitive: unknown, the default
		{Request{User: "ent", Plan: "enterprise"}, 2}, // unknown: the default
	} {
		if got := count(tc.req); got != tc.want {
			t.Errorf("%+v admitted %d of 10, want %d", tc.req, got, tc.want)
		}
	}
	if got, want := p.KnownPlans(), []string{"free", "pro"}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("KnownPlans() = %q, want %q", got, want)
	}
}

func TestPlansRejectUnknown(t *testing.T) {
	rules := []Rule{
		{Name: "per-user", Scope: ScopeUser, Plan: "free", Limit: TokenBucket(PerMinute(2), 2)},
		{Name: "per-ip", Scope: ScopeIP, Limit: TokenBucket(PerMinute(2), 2)},
	}
	for _, tc := range []struct {
		name  string
		plans Plans
		plan  string
		err   bool
	}{
		{"known", Plans{RejectUnknown: true}, "free", false},
		{"unknown", Plans{RejectUnknown: true}, "gold", true},
		{"empty without default", Plans{RejectUnknown: true}, "", true},
		{"empty with default", Plans{RejectUnknown: true, Default: "free"}, "", false},
		{"unknown with default", Plans{RejectUnknown: true, Default: "free"}, "gold", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPlanPolicy(tc.plans, rules...)
			if err != nil {
				t.Fatal(err)
			}
			l, err := NewLimiter(p)
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.Allow(context.Background(), Request{User: "u", IP: "1.2.3.4", Plan: tc.plan})
			if tc.err {
				if !errors.Is(err, ErrUnknownPlan) || !errors.Is(err, ErrInvalidKey) {
					t.Fatalf("err = %v, want ErrUnknownPlan, a key error", err)
				}
				return
			}
			if err != nil || !d.Allowed || len(d.Tiers()) != 2 {
				t.Fatalf("decision %+v, %v; want allowed by 2 tiers", d, err)
			}
		})
	}
}

func TestPlansConstruction(t *testing.T) {
	free := Rule{Name: "per-user", Scope: ScopeUser, Plan: "free", Limit: TokenBucket(PerMinute(2), 2)}
	if _, err := NewPolicy(free); !errors.Is(err, ErrInvalidPlan) {
		t.Errorf("NewPolicy with a plan rule and no Plans: err = %v, want ErrInvalidPlan", err)
	}
	if _, err := NewPlanPolicy(Plans{Default: "gold"}, free); !errors.Is(err, ErrInvalidPlan) {
		t.Errorf("default plan no rule names: err = %v, want ErrInvalidPlan", err)
	}
	if _, err := NewPlanPolicy(Plans{Default: "free"}, free); err != nil {
		t.Errorf("default plan a rule names: %v", err)
	}
	// No plan rules: plans need not be set, and requests keep whatever plan.
	p, err := NewPolicy(Rule{Name: "ip", Scope: ScopeIP, Limit: TokenBucket(PerMinute(2), 2)})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := NewLimiter(p)
	if d, err := l.Allow(context.Background(), Request{IP: "1.2.3.4", Plan: "anything"}); err != nil || !d.Allowed {
		t.Errorf("policy without plans: %+v, %v", d, err)
	}
}
