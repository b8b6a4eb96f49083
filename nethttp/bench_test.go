package nethttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/nethttp"
)

// benchWriter is a ResponseWriter reused across iterations: its header map
// is cleared, not remade, so that allocations counted are the middleware's,
// not the writer's.
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *benchWriter) WriteHeader(status int)      { w.status = status }

func (w *benchWriter) reset() {
	clear(w.h)
	w.status = 0
}

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
	lots := core.TokenBucket(core.PerSecond(1<<20), 1<<30)
	rules := []core.Rule{
		{Name: "per-ip", Scope: core.ScopeIP, Limit: lots},
		{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: lots},
	}
	allow, err := nethttp.New(newLimiter(b, rules...))
	if err != nil {
		b.Fatal(err)
	}
	bareLimiter := newLimiter(b, rules...)
	limiterOnly := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip, _, _ := strings.Cut(r.RemoteAddr, ":")
		d, err := bareLimiter.Allow(r.Context(), core.Request{IP: ip, Endpoint: r.Pattern})
		if err != nil || !d.Allowed {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		benchNext(w, r)
	})
	deny, err := nethttp.New(newLimiter(b,
		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerDay(1), 1)},
	))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name   string
		h      http.Handler
		status int
	}{
		{"bare", benchNext, http.StatusOK},
		{"limiter", limiterOnly, http.StatusOK},
		{"allowed", allow.Handler(benchNext), http.StatusOK},
		{"denied", deny.Handler(benchNext), http.StatusTooManyRequests},
	} {
		b.Run(bc.name+"/serial", func(b *testing.B) {
			r := benchRequest("192.0.2.1:1234")
			w := &benchWriter{h: http.Header{}}
			bc.h.ServeHTTP(w, r) // the denied case's one token
			b.ReportAllocs()
			for b.Loop() {
				w.reset()
				bc.h.ServeHTTP(w, r)
				if w.status != bc.status {
					b.Fatalf("status %d, want %d", w.status, bc.status)
				}
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			var peers atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := benchRequest(fmt.Sprintf("192.0.2.%d:1234", 2+peers.Add(1)))
				w := &benchWriter{h: http.Header{}}
				bc.h.ServeHTTP(w, r)
				for pb.Next() {
					w.reset()
					bc.h.ServeHTTP(w, r)
					if w.status != bc.status {
						b.Errorf("status %d, want %d", w.status, bc.status)
						return
					}
				}
			})
		})
	}
}
