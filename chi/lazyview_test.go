package chilimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
)

// TestLazyViewResolvesWhenRead checks that the middleware asks chi for the
// route only when something reads it, that what reads it gets it, a
// function of the *http.Request in r.Pattern, and that the request has its
// own Pattern back afterwards.
func TestLazyViewResolvesWhenRead(t *testing.T) {
	lim := core.TokenBucket(core.PerMinute(100), 100)
	perIP := core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: lim}
	router := chi.NewRouter()
	router.Get("/items/{id}", func(http.ResponseWriter, *http.Request) {})
	var seen string
	native := WithKeyFunc(core.ScopeUser, func(r *http.Request) (string, error) {
		seen = r.Pattern
		return "user-1", nil
	})
	for _, tc := range []struct {
		name  string
		rules []core.Rule
		opts  []Option
		asked bool
		tiers int
	}{
		{"per-ip only", []core.Rule{perIP}, nil, false, 1},
		{"an endpoint rule", []core.Rule{perIP, {Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: lim}}, nil, true, 2},
		{"a native key function", []core.Rule{perIP, {Name: "per-user", Scope: core.ScopeUser, Limit: lim}}, []Option{native}, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(flowtest.Limiter(t, tc.rules...), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			seen = ""
			r := httptest.NewRequest("GET", "/items/1", nil)
			r.Pattern = "before"
			v := &lazyView{request: request{r}, came: r.Pattern, from: r, resolver: &m.routes, routes: router}
			var res flow.Result
			m.engine.Check(v, &res)
			if res.Outcome != flow.Proceed || res.Decision.NumTiers() != tc.tiers {
				t.Fatalf("Check = %v with %d tiers (%v); want Proceed with %d", res.Outcome, res.Decision.NumTiers(), res.Err, tc.tiers)
			}
			if v.resolved != tc.asked {
				t.Errorf("chi asked: %v, want %v", v.resolved, tc.asked)
			}
			if tc.opts != nil && seen != "/items/{id}" {
				t.Errorf("the key function read r.Pattern %q, want chi's", seen)
			}
			v.done()
			if r.Pattern != "before" {
				t.Errorf("r.Pattern = %q after, want it as it came", r.Pattern)
			}
		})
	}
}
