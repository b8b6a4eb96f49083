package main

import (
	"fmt"
	"log"
	"net/http/httptest"

	"github.com/gofiber/fiber/v2"

	"github.com/bucketry/ratelimit/core"
	fiberlimit "github.com/bucketry/ratelimit/fiber"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// The quick start: a fiber route limited per user, by plan, and globally.
// A free user's third request within the minute gets 429.
func Example_quickStart() {
	policy, err := core.NewPlanPolicy(core.Plans{Default: "free"},
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Plan: "free", Limit: core.TokenBucket(core.PerMinute(10), 2)},
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Plan: "pro", Limit: core.TokenBucket(core.PerMinute(100), 20)},
		core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerSecond(1000), 2000)},
	)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy) // in memory; core.WithStore(store) for Redis
	if err != nil {
		log.Fatal(err)
	}
	user, err := keyfuncs.Header("X-User") // or keyfuncs.BearerToken(), keyfuncs.FromContext(key)
	if err != nil {
		log.Fatal(err)
	}
	plan, err := keyfuncs.Header("X-Plan")
	if err != nil {
		log.Fatal(err)
	}
	rl, err := fiberlimit.New(limiter, flow.WithKey(core.ScopeUser, user), flow.WithPlan(plan))
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New()
	// On each route, not app.Use: only there does fiber know the route.
	app.Get("/items/:id", rl, func(c *fiber.Ctx) error { return c.SendString("item " + c.Params("id")) })

	for range 3 {
		req := httptest.NewRequest("GET", "/items/42", nil)
		req.Header.Set("X-User", "ann")
		req.Header.Set("X-Plan", "free")
		resp, err := app.Test(req, -1) // no test timeout
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit"), resp.Header.Values("Retry-After"))
	}
	// Output:
	// 200 "per-user";r=1;t=6 []
	// 200 "per-user";r=0;t=12 []
	// 429 "per-user";r=0;t=6 [6]
}
