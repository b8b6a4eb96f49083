package fiberlimit_test

import (
	"fmt"
	"io"
	"log"
	"net/http/httptest"

	"github.com/gofiber/fiber/v2"

	"github.com/bucketry/ratelimit/core"
	fiberlimit "github.com/bucketry/ratelimit/fiber"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// A per-client limit on one route: two requests, then 429 with the fields
// that tell the client when to come back.
func Example() {
	policy, err := core.NewPolicy(
		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(60), 2)},
	)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	rl, err := fiberlimit.New(limiter)
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New()
	app.Get("/items/:id", rl, func(c *fiber.Ctx) error {
		return c.SendString("item " + c.Params("id"))
	})

	for range 3 {
		resp, err := app.Test(httptest.NewRequest("GET", "/items/42", nil), -1)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"))
		if resp.StatusCode == fiber.StatusOK {
			fmt.Println(string(body))
		} else {
			fmt.Println("Retry-After:", resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"))
		}
	}
	// Output:
	// 200 "per-ip";q=2;w=2 "per-ip";r=1;t=1
	// item 42
	// 200 "per-ip";q=2;w=2 "per-ip";r=0;t=2
	// item 42
	// 429 "per-ip";q=2;w=2 "per-ip";r=0;t=1
	// Retry-After: 1 application/problem+json
}

// A per-endpoint limit: one middleware on two routes, each keyed by its own
// template, so /items/1 and /items/2 share a bucket and /users/1 has its
// own.
func ExampleNew_perRoute() {
	policy, err := core.NewPolicy(
		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerHour(1), 2)},
	)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	rl, err := fiberlimit.New(limiter)
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New()
	ok := func(c *fiber.Ctx) error { return nil }
	api := app.Group("/api")
	api.Get("/items/:id", rl, ok)
	api.Get("/users/:id", rl, ok)

	for _, path := range []string{"/api/items/1", "/api/items/2", "/api/items/3", "/api/users/1"} {
		resp, err := app.Test(httptest.NewRequest("GET", path, nil), -1)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(path, resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	}
	// Output:
	// /api/items/1 200 1
	// /api/items/2 200 0
	// /api/items/3 429 0
	// /api/users/1 200 1
}

// userKey is where the example's authentication middleware stores the user.
type userKey struct{}

// Keys from two sources: the user that an authentication middleware stored
// in c.Locals, read by a native function, and the plan from a header
// through a framework-neutral key function, which the net/http, gin and
// gRPC middleware take as they are.
func ExampleWithKeyFunc() {
	policy, err := core.NewPlanPolicy(core.Plans{Default: "free"},
		core.Rule{Name: "free", Scope: core.ScopeUser, Plan: "free", Limit: core.TokenBucket(core.PerHour(100), 1)},
		core.Rule{Name: "pro", Scope: core.ScopeUser, Plan: "pro", Limit: core.TokenBucket(core.PerHour(1000), 100)},
	)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	plan, err := keyfuncs.Header("X-Plan")
	if err != nil {
		log.Fatal(err)
	}
	rl, err := fiberlimit.New(limiter,
		fiberlimit.WithKeyFunc(core.ScopeUser, func(c *fiber.Ctx) (string, error) {
			if u, ok := c.Locals(userKey{}).(string); ok && u != "" {
				return u, nil
			}
			return "", keyfuncs.ErrNotApplicable // anonymous: no per-user tier
		}),
		flow.WithPlan(plan),
	)
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New()
	auth := func(c *fiber.Ctx) error {
		// A stand-in for real authentication. c.Get aliases fasthttp's
		// buffer; the middleware copies keys before they reach the store.
		c.Locals(userKey{}, c.Get("X-Authenticated-User"))
		return c.Next()
	}
	app.Get("/report", auth, rl, func(c *fiber.Ctx) error { return nil })

	for _, who := range [][2]string{{"ann", "free"}, {"ann", "free"}, {"bob", "pro"}} {
		r := httptest.NewRequest("GET", "/report", nil)
		r.Header.Set("X-Authenticated-User", who[0])
		r.Header.Set("X-Plan", who[1])
		resp, err := app.Test(r, -1)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(who[0], resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"), resp.Header.Get("X-RateLimit-Remaining"))
	}
	// Output:
	// ann 200 1 0
	// ann 429 1 0
	// bob 200 100 99
}

// A deny handler that answers in the service's own format; the rate-limit
// fields, Retry-After included, and the 429 status are already set when it
// runs.
func ExampleWithDenyHandler() {
	policy, err := core.NewPolicy(core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerMinute(1), 1)})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	rl, err := fiberlimit.New(limiter, fiberlimit.WithDenyHandler(func(c *fiber.Ctx, d *core.Decision) error {
		return c.JSON(fiber.Map{"error": "slow down", "tier": d.Rule})
	}))
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New()
	app.Get("/", rl, func(c *fiber.Ctx) error { return nil })
	for range 2 {
		resp, err := app.Test(httptest.NewRequest("GET", "/", nil), -1)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == fiber.StatusOK {
			fmt.Println(resp.StatusCode)
		} else {
			fmt.Println(resp.StatusCode, "Retry-After:", resp.Header.Get("Retry-After"), string(body))
		}
	}
	// Output:
	// 200
	// 429 Retry-After: 60 {"error":"slow down","tier":"global"}
}
