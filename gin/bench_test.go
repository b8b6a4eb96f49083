package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow/flowtest"
)

func benchNext(c *gin.Context) { c.Status(http.StatusOK) }

// benchEngine is a gin engine that serves GET /items/:id with handlers.
func benchEngine(handlers ...gin.HandlerFunc) *gin.Engine {
	e := gin.New()
	e.GET("/items/:id", handlers...)
	return e
}

// BenchmarkMiddleware measures the middleware's overhead against a bare gin
// handler in the same run, each served by its own engine (routing and
// gin.Context pooling included), on the memory store, with a per-ip and a
// per-endpoint tier as most services have: "bare" is the handler alone,
// "limiter" the handler after a call of core.Limiter.Allow with keys built
// by hand (the floor for any middleware on this policy), "allowed" every
// request through the middleware, allowed, with all the header fields set,
// and "denied" every request answered 429 with its problem body. Parallel
// runs give each goroutine its own client address.
func BenchmarkMiddleware(b *testing.B) {
	rules := flowtest.BenchRules()
	allow := newMiddleware(b, flowtest.Limiter(b, rules...))
	bareLimiter := flowtest.Limiter(b, rules...)
	limiterOnly := func(c *gin.Context) {
		ip, _, _ := strings.Cut(c.Request.RemoteAddr, ":")
		d, err := bareLimiter.Allow(c.Request.Context(), core.Request{IP: ip, Endpoint: "GET /items/:id"})
		if err != nil || !d.Allowed {
			c.AbortWithStatus(http.StatusTooManyRequests)
		}
	}
	deny := newMiddleware(b, flowtest.Limiter(b,
		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerDay(1), 1)},
	))
	peer := func(n int) *http.Request {
		r := httptest.NewRequest("GET", "/items/1", nil)
		r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1234", 1+n)
		return r
	}
	flowtest.BenchHandler(b, "bare", benchEngine(benchNext), http.StatusOK, peer)
	flowtest.BenchHandler(b, "limiter", benchEngine(limiterOnly, benchNext), http.StatusOK, peer)
	flowtest.BenchHandler(b, "allowed", benchEngine(allow, benchNext), http.StatusOK, peer)
	flowtest.BenchHandler(b, "denied", benchEngine(deny, benchNext), http.StatusTooManyRequests, peer)
}
