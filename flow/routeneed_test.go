package flow_test

import (
	"context"
	"errors"
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

// unknownRoute is a request view whose route cannot be told: its Route is
// "", and records that it was read.
type unknownRoute struct {
	keyfuncs.Static
	read bool
}

func (v *unknownRoute) Route() string {
	v.read = true
	return ""
}

func (*unknownRoute) RouteKnown() bool         { return false }
func (v *unknownRoute) RouteReadUnknown() bool { return v.read }

// TestRouteUnknownWhenRead: where the route cannot be told, a request
// fails with ErrRouteUnknown when anything needs the route: a rule, a key
// function given per route, or a key, plan, cost or skip function or a
// When predicate that reads the view's route, which would read "" as no
// route and key, or skip, a tier on that. With nothing that reads it (an
// observer gets ""), the request is decided.
func TestRouteUnknownWhenRead(t *testing.T) {
	lim := core.TokenBucket(core.PerMinute(100), 100)
	perIP := core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: lim}
	perUser := core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: lim}
	perEndpoint := core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: lim}
	user := func(keyfuncs.Request) (string, error) { return "user-1", nil }
	userRoute, err := keyfuncs.Compose(user, keyfuncs.MethodAndRoute())
	if err != nil {
		t.Fatal(err)
	}
	readsRoute := func(r keyfuncs.Request) (string, error) {
		if r.Route() == "/search" {
			return "pro", nil
		}
		return "", keyfuncs.ErrNotApplicable
	}
	onSearch := flow.When(func(r keyfuncs.Request) bool { return r.Route() == "/search" })
	always := flow.When(func(keyfuncs.Request) bool { return true })
	tests := []struct {
		name    string
		rules   []core.Rule
		opts    []flow.Option
		observe bool
		tiers   int // 0: fails with ErrRouteUnknown
	}{
		{"a per-ip rule", []core.Rule{perIP}, nil, false, 1},
		{"an observer", []core.Rule{perIP}, nil, true, 1},
		{"a When predicate that does not read it", []core.Rule{perIP, {Name: "all", Scope: core.ScopeIP, Limit: lim, When: always}}, nil, false, 2},
		{"an endpoint rule keyed by the route", []core.Rule{perIP, perEndpoint}, nil, false, 0},
		{"a rule of routes", []core.Rule{perIP, {Name: "search", Scope: core.ScopeIP, Routes: []string{"/search"}, Limit: lim}}, nil, false, 0},
		{"an endpoint key that reads it", []core.Rule{perIP, perEndpoint},
			[]flow.Option{flow.WithKey(core.ScopeEndpoint, keyfuncs.MethodAndRoute())}, false, 0},
		{"a composed key that reads it", []core.Rule{perIP, perUser}, []flow.Option{flow.WithKey(core.ScopeUser, userRoute)}, false, 0},
		{"a key function by route", []core.Rule{perIP, perUser},
			[]flow.Option{flow.WithKey(core.ScopeUser, user), flow.WithRouteKey("/search", core.ScopeUser, user)}, false, 0},
		{"a plan function that reads it", []core.Rule{perIP}, []flow.Option{flow.WithPlan(readsRoute)}, false, 0},
		{"a cost function that reads it", []core.Rule{perIP},
			[]flow.Option{flow.WithCost(func(r keyfuncs.Request) (int64, error) { return int64(len(r.Route())) + 1, nil })}, false, 0},
		{"a skip function that reads it", []core.Rule{perIP}, []flow.Option{flow.WithSkip(func(r keyfuncs.Request) bool { return r.Route() == "" })}, false, 0},
		{"a When predicate that reads it", []core.Rule{perIP, {Name: "search", Scope: core.ScopeIP, Limit: lim, When: onSearch}}, nil, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var copts []core.Option
			if tc.observe {
				copts = append(copts, core.WithObserver(func(context.Context, *core.Event) {}))
			}
			e, err := flow.New(flowtest.LimiterWith(t, copts, tc.rules...), "test", nil, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			v := &unknownRoute{Static: keyfuncs.Static{HTTPMethod: "GET", Peer: "192.0.2.1:1234"}}
			var res flow.Result
			e.Check(v, &res)
			switch {
			case tc.tiers == 0 && (res.Outcome != flow.Failed || !errors.Is(res.Err, flow.ErrRouteUnknown)):
				t.Errorf("Check = %v, %v; want Failed, ErrRouteUnknown", res.Outcome, res.Err)
			case tc.tiers > 0 && (res.Outcome != flow.Proceed || res.Decision.NumTiers() != tc.tiers):
				t.Errorf("Check = %v with %d tiers (%v); want Proceed with %d", res.Outcome, res.Decision.NumTiers(), res.Err, tc.tiers)
			}
		})
	}
}
