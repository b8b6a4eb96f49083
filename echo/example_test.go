package echolimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/labstack/echo/v4"

	"github.com/bucketry/ratelimit/core"
	echolimit "github.com/bucketry/ratelimit/echo"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// A per-user and a per-IP limit on every route: the user's second request
// within the minute gets 429, with the fields that say when to come back.
func Example() {
	policy, err := core.NewPolicy(
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(1), 1)},
		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(60), 10)},
	)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	rl, err := echolimit.New(limiter, echolimit.WithKeyFunc(core.ScopeUser, func(c echo.Context) (string, error) {
		if user := c.Request().Header.Get("X-User"); user != "" { // or c.Get("user"), set by your auth middleware
			return user, nil
		}
		return "", keyfuncs.ErrNotApplicable // anonymous: only the per-ip limit applies
	}))
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.Use(rl)
	e.GET("/search", func(c echo.Context) error { return c.String(http.StatusOK, "results") })

	for range 2 {
		req := httptest.NewRequest("GET", "/search", nil)
		req.Header.Set("X-User", "ann")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("Content-Type"), w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 text/plain; charset=UTF-8 "per-user";r=0;t=60
	// 429 application/problem+json "per-user";r=0;t=60
}

// The endpoint tier counts the requests of each route, whatever the path:
// /items/1 and /items/2 share the bucket of "GET /items/{id}". Installed
// with e.Pre, before Echo routes the request, the middleware asks the
// router for the route, so the tier works there too; a request no route
// matches is limited by the other tiers only.
func ExampleNew_pre() {
	policy, err := core.NewPolicy(
		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerMinute(2), 2)},
		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(60), 60)},
	)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	rl, err := echolimit.New(limiter)
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.Pre(rl)
	e.GET("/items/:id", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	for _, path := range []string{"/items/1", "/items/2", "/items/3", "/nowhere"} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// /items/1 204 "per-endpoint";q=2;w=60, "per-ip";q=60;w=60
	// /items/2 204 "per-endpoint";q=2;w=60, "per-ip";q=60;w=60
	// /items/3 429 "per-endpoint";q=2;w=60, "per-ip";q=60;w=60
	// /nowhere 404 "per-ip";q=60;w=60
}

// A deny handler that answers in the service's own JSON; the rate-limit
// fields, Retry-After included, are already set when it runs, and the
// route's handler does not run.
func ExampleWithDenyHandler() {
	policy, err := core.NewPolicy(core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerMinute(1), 1)})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	rl, err := echolimit.New(limiter, echolimit.WithDenyHandler(func(c echo.Context, d *core.Decision) error {
		return c.JSON(http.StatusTooManyRequests, map[string]string{"error": "slow down", "tier": d.Rule})
	}))
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, rl)
	for range 2 {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code == http.StatusNoContent {
			fmt.Println(w.Code)
		} else {
			fmt.Print(w.Code, " Retry-After: ", w.Header().Get("Retry-After"), " ", w.Body.String())
		}
	}
	// Output:
	// 204
	// 429 Retry-After: 60 {"error":"slow down","tier":"global"}
}

// A request that cannot be decided (here a cost that is not a number) is
// an *echo.HTTPError by default, answered by Echo's HTTPErrorHandler: the
// status text for the client, the cause for the server's log.
func ExampleNew_errors() {
	policy, err := core.NewPolicy(core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerMinute(10), 10)})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	rl, err := echolimit.New(limiter, echolimit.WithCostFunc(func(c echo.Context) (int64, error) {
		var n int64
		_, err := fmt.Sscan(c.QueryParam("n"), &n)
		return n, err
	}))
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		fmt.Println("log:", err)
		e.DefaultHTTPErrorHandler(err, c)
	}
	e.GET("/batch", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, rl)
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest("GET", "/batch?n=lots", nil))
	fmt.Print(w.Code, " ", w.Body.String())
	// Output:
	// log: code=500, message=Internal Server Error, internal=ratelimit: cost: expected integer
	// 500 {"message":"Internal Server Error"}
}

// Behind a load balancer at 10.0.0.0/8 that appends to X-Forwarded-For, the
// client is the rightmost address the balancer did not write. The Echo
// instance's IPExtractor plays no part.
func ExampleNew_trustedProxies() {
	policy, err := core.NewPolicy(core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 1)})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	ip, err := keyfuncs.ClientIP(keyfuncs.WithTrustedProxies("10.0.0.0/8"))
	if err != nil {
		log.Fatal(err)
	}
	rl, err := echolimit.New(limiter, flow.WithKey(core.ScopeIP, ip))
	if err != nil {
		log.Fatal(err)
	}
	e := echo.New()
	e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, rl)
	for _, xff := range []string{"203.0.113.1", "198.51.100.9, 203.0.113.1", "203.0.113.2"} {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "10.1.2.3:5555" // the balancer
		req.Header.Set("X-Forwarded-For", xff)
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Println(xff, "->", w.Code)
	}
	// Output:
	// 203.0.113.1 -> 204
	// 198.51.100.9, 203.0.113.1 -> 429
	// 203.0.113.2 -> 204
}
