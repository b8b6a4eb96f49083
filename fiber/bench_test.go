package fiberlimit_test

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	"github.com/valyala/fasthttp"

	"github.com/bucketry/ratelimit/core"
	fiberlimit "github.com/bucketry/ratelimit/fiber"
	"github.com/bucketry/ratelimit/flow/flowtest"
)

// benchCtx is a request as fasthttp hands it to the app's handler, from
// peer ip: GET /items/1. It is reused across iterations, as fasthttp
// reuses a connection's RequestCtx.
func benchCtx(ip string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.Header.SetMethod(fiber.MethodGet)
	req.SetRequestURI("/items/1")
	req.Header.SetHost("bench")
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(ip), Port: 1234}, nil)
	return ctx
}

// serveOnce runs one request through h as fasthttp's server loop would:
// a fresh response and no user values from the last request.
func serveOnce(h fasthttp.RequestHandler, ctx *fasthttp.RequestCtx) int {
	ctx.Response.Reset()
	ctx.ResetUserValues()
	h(ctx)
	return ctx.Response.StatusCode()
}

// BenchmarkMiddleware measures the middleware's overhead on a fiber app in
// the same run as the alternatives, through app.Handler() with no network,
// on the in-memory store, with a per-ip and a per-endpoint tier as most
// services have:
//
//   - bare: the route's handler alone;
//   - fiberlimiter: fiber's own middleware/limiter (its memory storage,
//     keyed by c.IP(), sliding window off), with a limit never reached;
//   - limiter: the handler after a call of core.Limiter.Allow with keys
//     built by hand (the floor for any middleware on this policy);
//   - allowed: every request through this package's middleware, allowed,
//     with all the header fields set;
//   - denied: every request answered 429 with its problem body.
//
// Parallel runs give each goroutine its own client address and RequestCtx.
func BenchmarkMiddleware(b *testing.B) {
	rules := flowtest.BenchRules()
	allow, err := fiberlimit.New(flowtest.Limiter(b, rules...))
	if err != nil {
		b.Fatal(err)
	}
	deny, err := fiberlimit.New(flowtest.Limiter(b,
		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerDay(1), 1)},
	))
	if err != nil {
		b.Fatal(err)
	}
	bareLimiter := flowtest.Limiter(b, rules...)
	limiterOnly := func(c *fiber.Ctx) error {
		ip := c.Context().RemoteIP().String()
		d, err := bareLimiter.Allow(c.UserContext(), core.Request{IP: ip, Endpoint: "GET /items/:id"})
		if err != nil || !d.Allowed {
			return c.SendStatus(fiber.StatusTooManyRequests)
		}
		return c.Next()
	}
	theirs := fiberlimiter.New(fiberlimiter.Config{Max: 1 << 30, Expiration: time.Hour})
	ok := func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) }

	for _, bc := range []struct {
		name   string
		mw     fiber.Handler // nil: the bare handler
		status int
	}{
		{"bare", nil, fiber.StatusOK},
		{"fiberlimiter", theirs, fiber.StatusOK},
		{"limiter", limiterOnly, fiber.StatusOK},
		{"allowed", allow, fiber.StatusOK},
		{"denied", deny, fiber.StatusTooManyRequests},
	} {
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		if bc.mw == nil {
			app.Get("/items/:id", ok)
		} else {
			app.Get("/items/:id", bc.mw, ok)
		}
		h := app.Handler()
		b.Run(bc.name+"/serial", func(b *testing.B) {
			ctx := benchCtx("192.0.2.1")
			serveOnce(h, ctx) // the denied case's one token
			b.ReportAllocs()
			for b.Loop() {
				if got := serveOnce(h, ctx); got != bc.status {
					b.Fatalf("status %d, want %d", got, bc.status)
				}
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			var peers atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				n := 2 + peers.Add(1)
				ctx := benchCtx(fmt.Sprintf("198.51.%d.%d", n/250, n%250+1))
				serveOnce(h, ctx)
				for pb.Next() {
					if got := serveOnce(h, ctx); got != bc.status {
						b.Errorf("status %d, want %d", got, bc.status)
						return
					}
				}
			})
		})
	}
}
