package fiberlimit

import (
	"net/http/httptest"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/fiber/internal/fibertest"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
)

// TestUseViewResolvesWhenRead checks that in a Use route the route the
// request will reach is looked for in the app's stack only when something
// reads it, and found then.
func TestUseViewResolvesWhenRead(t *testing.T) {
	lim := core.TokenBucket(core.PerMinute(100), 100)
	perIP := core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: lim}
	for _, tc := range []struct {
		name     string
		rules    []core.Rule
		resolved bool
		tiers    int
	}{
		{"per-ip only", []core.Rule{perIP}, false, 1},
		{"a rule of the route", []core.Rule{perIP, {Name: "items", Scope: core.ScopeIP, Routes: []string{"/items/{id}"}, Limit: lim}}, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := flow.New(flowtest.Limiter(t, tc.rules...), adapter, nil)
			if err != nil {
				t.Fatal(err)
			}
			var (
				res  flow.Result
				view useView
			)
			app := fibertest.NewApp()
			app.Use(func(c *fiber.Ctx) error {
				view = useView{request: request{c}, rt: c.Route()}
				e.Check(&view, &res)
				return c.Next()
			})
			app.Get("/items/:id", func(c *fiber.Ctx) error { return c.SendString("ok") })
			resp, err := app.Test(httptest.NewRequest("GET", "/items/1", nil), -1)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if res.Outcome != flow.Proceed || res.Decision.NumTiers() != tc.tiers {
				t.Fatalf("Check = %v with %d tiers (%v); want Proceed with %d", res.Outcome, res.Decision.NumTiers(), res.Err, tc.tiers)
			}
			if view.resolved != tc.resolved {
				t.Errorf("resolved: %v, want %v", view.resolved, tc.resolved)
			}
			if got := view.Route(); got != "/items/{id}" || !view.RouteKnown() {
				t.Errorf("Route() = %q, known %v; want \"/items/{id}\", known", got, view.RouteKnown())
			}
		})
	}
}
