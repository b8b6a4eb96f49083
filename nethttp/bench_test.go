package nethttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow/flowtest"
	"github.com/bucketry/ratelimit/nethttp"
)

// benchRequest is a request as a ServeMux hands it to a route's handler.
func benchRequest(peer string) *http.Request {
	r := httptest.NewRequest("GET", "/items/1", nil)
	r.Pattern = "GET /items/{id}"
	r.RemoteAddr = peer
	return r
}

var benchNext = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })

// BenchmarkMiddleware measures the middleware's overhead against the bare
// handler in the same run, on the memory store, with a per-ip and a
// per-endpoint tier as most services have: "bare" is the handler alone,
// "limiter" the handler after a call of core.Limiter.AllowN with keys
// built by hand (the floor for any middleware on this policy), "allowed"
// every request through the middleware, allowed, with all the header fields
// set, and "denied" every request answered 429 with its problem body.
// Parallel runs give each goroutine its own client address.
func BenchmarkMiddleware(b *testing.B) {
	rules := flowtest.BenchRules()
	allow, err := nethttp.New(flowtest.Limiter(b, rules...))
	if err != nil {
		b.Fatal(err)
	}
	bareLimiter := flowtest.Limiter(b, rules...)
	limiterOnly := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip, _, _ := strings.Cut(r.RemoteAddr, ":")
		d, err := bareLimiter.Allow(r.Context(), core.Request{IP: ip, Endpoint: r.Pattern})
		if err != nil || !d.Allowed {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		benchNext(w, r)
	})
	deny, err := nethttp.New(flowtest.Limiter(b,
		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerDay(1), 1)},
	))
	if err != nil {
		b.Fatal(err)
	}
	peer := func(n int) *http.Request { return benchRequest(fmt.Sprintf("192.0.2.%d:1234", 1+n)) }
	flowtest.BenchHandler(b, "bare", benchNext, http.StatusOK, peer)
	flowtest.BenchHandler(b, "limiter", limiterOnly, http.StatusOK, peer)
	flowtest.BenchHandler(b, "allowed", allow.Handler(benchNext), http.StatusOK, peer)
	flowtest.BenchHandler(b, "denied", deny.Handler(benchNext), http.StatusTooManyRequests, peer)
}
