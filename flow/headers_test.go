package flow_test

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// TestSetHTTPHeaders: the fields SetHTTPHeaders stores are those Headers
// reports, under their canonical names whatever the format's name case,
// each value a slice of capacity 1; the constant values are the same
// slices from response to response. It holds for values short enough to
// share one allocation, for values too long for that, and for values too
// long for core.HeaderValues' buffer (many tiers with long names, all
// reported, where the policy is past the constants a format keeps). An
// allowed request of one tier costs one allocation.
func TestSetHTTPHeaders(t *testing.T) {
	rules := []core.Rule{
		{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 3)},
		{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.FixedWindow(100, 60_000_000_000)},
	}
	// Six tiers with names of 60 characters: RateLimit with every tier is
	// past 256 bytes, and six tiers past the four whose constants a
	// format keeps.
	var long []core.Rule
	for i := range 6 {
		long = append(long, core.Rule{
			Name:  strings.Repeat(string(rune('a'+i)), 60),
			Scope: core.ScopeIP,
			Limit: core.TokenBucket(core.PerMinute(1), 3+int64(i)),
		})
	}
	req := keyfuncs.Static{HTTPMethod: "GET", RouteTemplate: "/items/{id}", Peer: "192.0.2.1:1234"}
	for _, tc := range []struct {
		name  string
		rules []core.Rule
		opts  []core.HeaderOption
	}{
		{"as specified", rules, nil},
		{"canonical", rules, []core.HeaderOption{core.WithNameCase(core.NamesCanonical)}},
		{"lower, all tiers, delta", rules, []core.HeaderOption{core.WithNameCase(core.NamesLower), core.WithRateLimitTiers(core.TiersAll), core.WithResetFormat(core.ResetDelta)}},
		{"legacy only", rules, []core.HeaderOption{core.WithRateLimitPolicy(false), core.WithRateLimit(false)}},
		{"long names", long, nil},
		{"long names, all tiers", long, []core.HeaderOption{core.WithRateLimitTiers(core.TiersAll)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := flow.New(flowtest.Limiter(t, tc.rules...), "test", nil, flow.WithHeaderOptions(tc.opts...))
			if err != nil {
				t.Fatal(err)
			}
			var prev http.Header
			for i := range 5 { // 3 allowed, then denied
				res := check(e, req)
				want := http.Header{}
				e.Headers(&res, func(name, value string) { want[textproto.CanonicalMIMEHeaderKey(name)] = []string{value} })
				h := http.Header{"X-Other": {"kept"}}
				e.SetHTTPHeaders(h, &res)
				delete(h, "X-Other")
				if len(h) != len(want) {
					t.Fatalf("request %d: SetHTTPHeaders = %v, want %v", i, h, want)
				}
				for name, v := range want {
					if !slices.Equal(h[name], v) || cap(h[name]) != 1 {
						t.Errorf("request %d: %s = %q (cap %d), want %q (cap 1)", i, name, h[name], cap(h[name]), v)
					}
				}
				if prev != nil && res.Outcome == flow.Proceed && len(tc.rules) <= 4 {
					for _, name := range []string{"X-Ratelimit-Limit", "Ratelimit-Policy"} {
						if v := h[name]; v != nil && &v[0] != &prev[name][0] {
							t.Errorf("request %d: %s is a new slice; the constant's should be shared", i, name)
						}
					}
				}
				if res.Outcome == flow.Proceed {
					prev = h
				}
			}
		})
	}
	t.Run("allocations", func(t *testing.T) {
		l := flowtest.Limiter(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerSecond(1<<20), 1<<40)})
		e, err := flow.New(l, "test", nil)
		if err != nil {
			t.Fatal(err)
		}
		res := check(e, req)
		h := http.Header{}
		if got := testing.AllocsPerRun(100, func() {
			clear(h)
			e.SetHTTPHeaders(h, &res)
		}); got != 1 {
			t.Errorf("SetHTTPHeaders: %v allocations, want 1", got)
		}
		var v core.HeaderValues
		if got := testing.AllocsPerRun(100, func() { e.HeaderValues(&res, &v) }); got != 0 {
			t.Errorf("HeaderValues: %v allocations, want 0", got)
		}
	})
}

// TestHeaderValuesOutcomes: HeaderValues reports fields for the outcomes
// Headers does, and none for the others or, with WithHeadersOnAllow(false),
// for allowed requests.
func TestHeaderValuesOutcomes(t *testing.T) {
	l := flowtest.Limiter(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 1)})
	req := keyfuncs.Static{HTTPMethod: "GET", Peer: "192.0.2.1:1"}
	for _, onAllow := range []bool{true, false} {
		e, err := flow.New(l, "test", nil, flow.WithHeadersOnAllow(onAllow))
		if err != nil {
			t.Fatal(err)
		}
		for _, res := range []flow.Result{check(e, req), check(e, req), {Outcome: flow.Skipped}, {Outcome: flow.Failed}} {
			n := 0
			e.Headers(&res, func(string, string) { n++ })
			var v core.HeaderValues
			e.HeaderValues(&res, &v)
			if v.Len() != n {
				t.Errorf("onAllow %v, %v: HeaderValues has %d fields, Headers %d", onAllow, res.Outcome, v.Len(), n)
			}
		}
	}
}

// TestKeysOnlyForRules: a key function runs only while an enabled rule of
// the policy in force limits its scope: no endpoint key without an
// endpoint rule, until SetPolicy brings one.
func TestKeysOnlyForRules(t *testing.T) {
	l := flowtest.Limiter(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 100)})
	var endpointCalls, userCalls atomic.Int64
	endpoint := func(r keyfuncs.Request) (string, error) {
		endpointCalls.Add(1)
		return keyfuncs.Endpoint()(r)
	}
	user := func(keyfuncs.Request) (string, error) {
		userCalls.Add(1)
		return "alice", nil
	}
	e, err := flow.New(l, "test", nil, flow.WithKey(core.ScopeEndpoint, endpoint), flow.WithKey(core.ScopeUser, user))
	if err != nil {
		t.Fatal(err)
	}
	req := keyfuncs.Static{HTTPMethod: "GET", RouteTemplate: "/items/{id}", Peer: "192.0.2.1:1"}
	if res := check(e, req); res.Outcome != flow.Proceed || endpointCalls.Load() != 0 || userCalls.Load() != 0 {
		t.Fatalf("per-ip only: %v, endpoint key built %d times, user key %d; want proceed and neither", res.Outcome, endpointCalls.Load(), userCalls.Load())
	}
	p, err := core.NewPolicy(
		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 100)},
		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerMinute(1), 100)},
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(1), 100), Disabled: true},
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	res := check(e, req)
	if res.Outcome != flow.Proceed || endpointCalls.Load() != 1 || userCalls.Load() != 0 {
		t.Fatalf("with an endpoint rule and a disabled user rule: %v, endpoint key built %d times, user key %d; want proceed, 1 and 0", res.Outcome, endpointCalls.Load(), userCalls.Load())
	}
	var names []string
	for _, ts := range res.Decision.Tiers() {
		names = append(names, ts.Rule.Name)
	}
	if want := "per-ip,per-endpoint"; strings.Join(names, ",") != want {
		t.Errorf("tiers %v, want %s", names, want)
	}
}

// TestKeysForWhen: a rule with a When predicate may read any identity of
// the request, so every key function runs: an exemption by IP on a
// per-user rule keeps working without a per-ip rule.
func TestKeysForWhen(t *testing.T) {
	exempt := func(r *core.Request) bool { return r.IP != "192.0.2.9" }
	l := flowtest.Limiter(t, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 1), When: exempt})
	e, err := flow.New(l, "test", nil, flow.WithKey(core.ScopeUser, func(keyfuncs.Request) (string, error) { return "alice", nil }))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		req := keyfuncs.Static{HTTPMethod: "GET", Peer: "192.0.2.9:1"}
		if res := check(e, req); res.Outcome != flow.Proceed || len(res.Decision.Tiers()) != 0 {
			t.Fatalf("request %d from the exempt address: %v with %d tiers, want proceed without the per-user tier", i, res.Outcome, len(res.Decision.Tiers()))
		}
	}
	other := keyfuncs.Static{HTTPMethod: "GET", Peer: "192.0.2.1:1"}
	check(e, other)
	if res := check(e, other); res.Outcome != flow.Denied {
		t.Errorf("second request from another address: %v, want denied by the per-user tier", res.Outcome)
	}
}
