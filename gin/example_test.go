package ginlimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/gin-gonic/gin"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	ginlimit "github.com/bucketry/ratelimit/gin"
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
	rl, err := ginlimit.New(limiter, ginlimit.WithKeyFunc(core.ScopeUser, func(c *gin.Context) (string, error) {
		if user := c.GetHeader("X-User"); user != "" { // or c.GetString("user"), set by your auth middleware
			return user, nil
		}
		return "", keyfuncs.ErrNotApplicable // anonymous: only the per-ip limit applies
	}))
	if err != nil {
		log.Fatal(err)
	}
	router := gin.New()
	router.Use(rl)
	router.GET("/search", func(c *gin.Context) { c.String(http.StatusOK, "results") })

	for range 2 {
		req := httptest.NewRequest("GET", "/search", nil)
		req.Header.Set("X-User", "ann")
		w := httptest.NewRecorder()
		router.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("Content-Type"), w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 text/plain; charset=utf-8 "per-user";r=0;t=60
	// 429 application/problem+json "per-user";r=0;t=60
}

// A deny handler that answers in the service's own JSON; the rate-limit
// fields, Retry-After included, are already set and the chain is aborted
// when it runs.
func ExampleWithDenyHandler() {
	policy, err := core.NewPolicy(core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerMinute(1), 1)})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	rl, err := ginlimit.New(limiter, ginlimit.WithDenyHandler(func(c *gin.Context, d *core.Decision) {
		c.JSON(http.StatusTooManyRequests, gin.H{"error": "slow down", "tier": d.Rule})
	}))
	if err != nil {
		log.Fatal(err)
	}
	router := gin.New()
	router.GET("/", rl, func(c *gin.Context) { c.Status(http.StatusNoContent) })
	for range 2 {
		w := httptest.NewRecorder()
		router.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code == http.StatusNoContent {
			fmt.Println(w.Code)
		} else {
			fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"), w.Body.String())
		}
	}
	// Output:
	// 204
	// 429 Retry-After: 60 {"error":"slow down","tier":"global"}
}

// Behind a load balancer at 10.0.0.0/8 that appends to X-Forwarded-For, the
// client is the rightmost address the balancer did not write. The engine's
// trusted proxies play no part.
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
	rl, err := ginlimit.New(limiter, flow.WithKey(core.ScopeIP, ip))
	if err != nil {
		log.Fatal(err)
	}
	router := gin.New()
	router.GET("/", rl, func(c *gin.Context) { c.Status(http.StatusNoContent) })
	for _, xff := range []string{"203.0.113.1", "198.51.100.9, 203.0.113.1", "203.0.113.2"} {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "10.1.2.3:5555" // the balancer
		req.Header.Set("X-Forwarded-For", xff)
		w := httptest.NewRecorder()
		router.ServeHTTP(w, req)
		fmt.Println(xff, "->", w.Code)
	}
	// Output:
	// 203.0.113.1 -> 204
	// 198.51.100.9, 203.0.113.1 -> 429
	// 203.0.113.2 -> 204
}

// engine.HandleContext, here a single-page app's fallback, runs the
// middleware again on the same request, which lets it through uncharged:
// each request is charged once.
func ExampleNew_handleContext() {
	policy, err := core.NewPolicy(core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 10)})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	rl, err := ginlimit.New(limiter)
	if err != nil {
		log.Fatal(err)
	}
	router := gin.New()
	router.Use(rl)
	router.GET("/index.html", func(c *gin.Context) { c.String(http.StatusOK, "app") })
	router.NoRoute(func(c *gin.Context) {
		c.Request.URL.Path = "/index.html"
		router.HandleContext(c)
	})
	for range 2 {
		w := httptest.NewRecorder()
		router.ServeHTTP(w, httptest.NewRequest("GET", "/some/deep/link", nil))
		fmt.Println(w.Code, w.Body.String(), "X-RateLimit-Remaining:", w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 200 app X-RateLimit-Remaining: 9
	// 200 app X-RateLimit-Remaining: 8
}
