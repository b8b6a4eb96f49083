package echolimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow/flowtest"
)

func benchNext(c echo.Context) error { return c.NoContent(http.StatusOK) }

// benchEcho is an Echo instance that serves GET /items/:id with
// benchNext, with pre as pre-middleware and use as middleware.
func benchEcho(pre, use []echo.MiddlewareFunc) *echo.Echo {
	e := newEcho()
	e.Pre(pre...)
	e.Use(use...)
	e.GET("/items/:id", benchNext)
	return e
}

// BenchmarkMiddleware measures the middleware's overhead against a bare
// Echo handler in the same run, each served by its own Echo instance
// (routing and context pooling included), on the memory store, with a
// per-ip and a per-endpoint tier as most services have: "bare" is the
// handler alone, "limiter" the handler after a call of core.Limiter.Allow
// with keys built by hand (the floor for any middleware on this policy),
// "allowed" every request through the middleware installed with e.Use,
// allowed, with all the header fields set, "allowed-pre" the same with
// e.Pre, which asks the router for the route, and "denied" every request
// answered 429 with its problem body. Parallel runs give each goroutine
// its own client address.
func BenchmarkMiddleware(b *testing.B) {
	rules := flowtest.BenchRules()
	allow := newMiddleware(b, flowtest.Limiter(b, rules...))
	allowPre := newMiddleware(b, flowtest.Limiter(b, rules...))
	bareLimiter := flowtest.Limiter(b, rules...)
	limiterOnly := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			ip, _, _ := strings.Cut(r.RemoteAddr, ":")
			d, err := bareLimiter.Allow(r.Context(), core.Request{IP: ip, Endpoint: "GET /items/:id"})
			if err != nil || !d.Allowed {
				return c.NoContent(http.StatusTooManyRequests)
			}
			return next(c)
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
	use := func(mw echo.MiddlewareFunc) []echo.MiddlewareFunc { return []echo.MiddlewareFunc{mw} }
	flowtest.BenchHandler(b, "bare", benchEcho(nil, nil), http.StatusOK, peer)
	flowtest.BenchHandler(b, "limiter", benchEcho(nil, use(limiterOnly)), http.StatusOK, peer)
	flowtest.BenchHandler(b, "allowed", benchEcho(nil, use(allow)), http.StatusOK, peer)
	flowtest.BenchHandler(b, "allowed-pre", benchEcho(use(allowPre), nil), http.StatusOK, peer)
	flowtest.BenchHandler(b, "denied", benchEcho(nil, use(deny)), http.StatusTooManyRequests, peer)
}
