package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/bucketry/ratelimit/core"
)

// benchWriter is a ResponseWriter reused across iterations: its header map
// is cleared, not remade, so that allocations counted are the engine's and
// the middleware's, not the writer's.
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

func benchRequest(peer string) *http.Request {
	r := httptest.NewRequest("GET", "/items/1", nil)
	r.RemoteAddr = peer
	return r
}

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
	lots := core.TokenBucket(core.PerSecond(1<<20), 1<<30)
	rules := []core.Rule{
		{Name: "per-ip", Scope: core.ScopeIP, Limit: lots},
		{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: lots},
	}
	allow := newMiddleware(b, newLimiter(b, rules...))
	bareLimiter := newLimiter(b, rules...)
	limiterOnly := func(c *gin.Context) {
		ip, _, _ := strings.Cut(c.Request.RemoteAddr, ":")
		d, err := bareLimiter.Allow(c.Request.Context(), core.Request{IP: ip, Endpoint: "GET /items/:id"})
		if err != nil || !d.Allowed {
			c.AbortWithStatus(http.StatusTooManyRequests)
		}
	}
	deny := newMiddleware(b, newLimiter(b,
		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerDay(1), 1)},
	))
	for _, bc := range []struct {
		name   string
		h      http.Handler
		status int
	}{
		{"bare", benchEngine(benchNext), http.StatusOK},
		{"limiter", benchEngine(limiterOnly, benchNext), http.StatusOK},
		{"allowed", benchEngine(allow, benchNext), http.StatusOK},
		{"denied", benchEngine(deny, benchNext), http.StatusTooManyRequests},
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
