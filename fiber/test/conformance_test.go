package fiberlimit_test

import (
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
	fiberlimit "github.com/bucketry/ratelimit/fiber"
	"github.com/bucketry/ratelimit/fiber/internal/fibertest"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// serveFiber is the conformance harness: a fiber app on a real loopback
// listener, each route registered at rt.Method and rt.ColonPattern() with
// its own middleware in front of its handler. Paths no route matches get
// fiber's 404.
func serveFiber(t testing.TB, routes []conformance.HTTPRoute) string {
	t.Helper()
	app := fibertest.NewApp()
	for _, rt := range routes {
		opts := append([]fiberlimit.Option(nil), rt.Options...)
		if h := rt.NativeUserHeader; h != "" {
			opts = append(opts, fiberlimit.WithKeyFunc(core.ScopeUser, func(c *fiber.Ctx) (string, error) {
				if v := c.Get(h); v != "" {
					return v, nil // aliases fasthttp's buffer: the middleware copies it
				}
				return "", keyfuncs.ErrNotApplicable
			}))
		}
		if answer := rt.DenyResponse; answer != nil {
			opts = append(opts, fiberlimit.WithDenyHandler(func(c *fiber.Ctx, d *core.Decision) error {
				status, body := answer(d)
				c.Set(fiber.HeaderContentType, "text/plain; charset=utf-8")
				return c.Status(status).SendString(body)
			}))
		}
		if answer := rt.ErrorResponse; answer != nil {
			opts = append(opts, fiberlimit.WithErrorHandler(func(c *fiber.Ctx, err error) error {
				status, body := answer(err)
				c.Set(fiber.HeaderContentType, "text/plain; charset=utf-8")
				return c.Status(status).SendString(body)
			}))
		}
		mw, err := fiberlimit.New(rt.Limiter, opts...)
		if err != nil {
			t.Fatalf("fiberlimit.New for %s %s: %v", rt.Method, rt.Pattern, err)
		}
		next := rt.Handler
		app.Add(rt.Method, rt.ColonPattern(), mw, func(c *fiber.Ctx) error {
			if next != nil {
				next()
			}
			return c.SendString("ok")
		})
	}
	return fibertest.Serve(t, app)
}

func TestConformance(t *testing.T) {
	conformance.RunHTTPSuite(t, conformance.HTTPHarness{Serve: serveFiber})
}
