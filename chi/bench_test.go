package chilimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	chilimit "github.com/bucketry/ratelimit/chi"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow/flowtest"
)

var benchNext = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })

// benchRouter returns a chi router with the middleware use installed with
// r.Use and with on the routes with r.With (nil for none), serving GET
// /items/{id} and GET /api/items/{id} (in a mounted router), with a few
// other routes beside them, as a service has.
func benchRouter(use, with func(http.Handler) http.Handler) http.Handler {
	r := chi.NewRouter()
	if use != nil {
		r.Use(use)
	}
	var rr chi.Router = r
	if with != nil {
		rr = r.With(with)
	}
	for _, p := range []string{"/health", "/users/{id}", "/users/{id}/orders", "/items", "/items/{id}"} {
		rr.Get(p, benchNext)
	}
	r.Route("/api", func(r chi.Router) {
		r.Get("/users/{id}", benchNext)
		r.Get("/items/{id}", benchNext)
	})
	return r
}

// BenchmarkMiddleware measures the middleware's overhead against the bare
// router in the same run, on the memory store, with a per-ip and a
// per-endpoint tier as most services have: "bare" is the router alone,
// "limiter" the router with a middleware that calls core.Limiter.AllowN
// with keys built by hand, once chi has routed (the floor for any
// middleware on this policy), "allowed" every request through the
// middleware installed with r.Use, which resolves the route before chi
// routes it, allowed, with all the header fields set, "with" the same
// installed on the route with r.With, "mounted" a route in a mounted router
// under r.Use, and "denied" every request answered 429 with its problem
// body. Parallel runs give each goroutine its own client address.
func BenchmarkMiddleware(b *testing.B) {
	rules := flowtest.BenchRules()
	newMiddleware := func(rules ...core.Rule) *chilimit.Middleware {
		m, err := chilimit.New(flowtest.Limiter(b, rules...))
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	bareLimiter := flowtest.Limiter(b, rules...)
	limiterOnly := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ip, _, _ := strings.Cut(r.RemoteAddr, ":")
			// The one route's endpoint key, as keyfuncs.Endpoint caches it.
			d, err := bareLimiter.Allow(r.Context(), core.Request{IP: ip, Endpoint: "GET /items/{id}"})
			if err != nil || !d.Allowed {
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	allow := newMiddleware(rules...)
	deny := newMiddleware(core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerDay(1), 1)})

	request := func(path string) func(n int) *http.Request {
		return func(n int) *http.Request {
			r := httptest.NewRequest("GET", path, nil)
			r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1234", 1+n)
			return r
		}
	}
	items := request("/items/1")
	flowtest.BenchHandler(b, "bare", benchRouter(nil, nil), http.StatusOK, items)
	flowtest.BenchHandler(b, "limiter", benchRouter(nil, limiterOnly), http.StatusOK, items)
	flowtest.BenchHandler(b, "allowed", benchRouter(allow.Handler, nil), http.StatusOK, items)
	flowtest.BenchHandler(b, "with", benchRouter(nil, newMiddleware(rules...).Handler), http.StatusOK, items)
	flowtest.BenchHandler(b, "mounted", benchRouter(newMiddleware(rules...).Handler, nil), http.StatusOK, request("/api/items/1"))
	flowtest.BenchHandler(b, "denied", benchRouter(deny.Handler, nil), http.StatusTooManyRequests, items)
}
