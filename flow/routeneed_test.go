package flow_test

import (
	"context"
	"testing"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// routeCounter is a request view that counts how often its route is read.
type routeCounter struct {
	keyfuncs.Static
	reads int
}

func (v *routeCounter) Route() string {
	v.reads++
	return v.Static.Route()
}

// TestRouteReadWhenNeeded checks that the Engine reads a request's route
// only for a policy or key function that needs it (finding it may cost
// the adapter a second match of the router's), and that every tier which
// depends on the route still gets it.
func TestRouteReadWhenNeeded(t *testing.T) {
	lim := core.TokenBucket(core.PerMinute(100), 100)
	perIP := core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: lim}
	peer, err := keyfuncs.ClientIP()
	if err != nil {
		t.Fatal(err)
	}
	ip := flow.WithKey(core.ScopeIP, peer)
	user := func(keyfuncs.Request) (string, error) { return "user-1", nil }
	none := func(keyfuncs.Request) (string, error) { return "", keyfuncs.ErrNotApplicable }
	tests := []struct {
		name      string
		rules     []core.Rule
		opts      []flow.Option
		route     string
		wantTiers int
		wantReads bool
		observe   bool // the limiter has an observer, which gets the request
	}{
		{"one per-ip rule", []core.Rule{perIP}, nil, "/items/{id}", 1, false, false},
		{"a rule of routes, on one", []core.Rule{perIP, {Name: "search", Scope: core.ScopeIP, Routes: []string{"GET /search"}, Limit: lim}},
			nil, "/search", 2, true, false},
		{"a rule of routes, on another", []core.Rule{perIP, {Name: "search", Scope: core.ScopeIP, Routes: []string{"GET /search"}, Limit: lim}},
			nil, "/items/{id}", 1, true, false},
		{"a rule of methods", []core.Rule{perIP, {Name: "writes", Scope: core.ScopeIP, Routes: []string{"POST"}, Limit: lim}},
			nil, "/items/{id}", 1, false, false},
		{"a When predicate on the route", []core.Rule{perIP, {Name: "items", Scope: core.ScopeIP, Limit: lim,
			When: func(r *core.Request) bool { return r.Route == "/items/{id}" }}},
			nil, "/items/{id}", 2, true, false},
		// The user tier applies but where the route's key function
		// declines it.
		{"a key function by route", []core.Rule{perIP, {Name: "per-user", Scope: core.ScopeUser, Limit: lim}},
			[]flow.Option{flow.WithKey(core.ScopeUser, user), flow.WithRouteKey("/search", core.ScopeUser, none)}, "/search", 1, true, false},
		{"a key function by route, on another", []core.Rule{perIP, {Name: "per-user", Scope: core.ScopeUser, Limit: lim}},
			[]flow.Option{flow.WithKey(core.ScopeUser, user), flow.WithRouteKey("/search", core.ScopeUser, none)}, "/items/{id}", 2, true, false},
		{"the endpoint by route", []core.Rule{perIP, {Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: lim}},
			nil, "/items/{id}", 2, true, false},
		{"an observer", []core.Rule{perIP}, nil, "/items/{id}", 1, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			observed := "unset"
			var copts []core.Option
			if tc.observe {
				copts = append(copts, core.WithObserver(func(_ context.Context, ev *core.Event) { observed = ev.Request.Route }))
			}
			e, err := flow.New(flowtest.LimiterWith(t, copts, tc.rules...), "test", nil, append([]flow.Option{ip}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			v := &routeCounter{Static: keyfuncs.Static{HTTPMethod: "GET", RouteTemplate: tc.route, Peer: "192.0.2.1:1234"}}
			var res flow.Result
			e.Check(v, &res)
			if res.Outcome != flow.Proceed || res.Err != nil {
				t.Fatalf("Check = %v, %v; want Proceed", res.Outcome, res.Err)
			}
			if got := res.Decision.NumTiers(); got != tc.wantTiers {
				t.Errorf("%d tiers, want %d", got, tc.wantTiers)
			}
			if (v.reads > 0) != tc.wantReads {
				t.Errorf("the route was read %d times; want reads: %v", v.reads, tc.wantReads)
			}
			if tc.observe && observed != tc.route {
				t.Errorf("the observer got the route %q, want %q", observed, tc.route)
			}
		})
	}
}
