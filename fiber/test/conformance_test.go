package fiberlimit_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"

	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
	fiberlimit "github.com/bucketry/ratelimit/fiber"
	"github.com/bucketry/ratelimit/fiber/internal/fibertest"
	"github.com/bucketry/ratelimit/flow/flowtest"
	"github.com/bucketry/ratelimit/keyfuncs"
	"github.com/bucketry/ratelimit/nethttp"
)

// add registers handlers at method and path on r, a GET route with r.Get,
// as fiber apps register them, which serves HEAD too.
func add(r fiber.Router, method, path string, handlers ...fiber.Handler) {
	if method == fiber.MethodGet {
		r.Get(path, handlers...)
		return
	}
	r.Add(method, path, handlers...)
}

// serveFiber is the conformance harness: a fiber app on a real loopback
// listener, each route registered at rt.Method and rt.ColonPattern() (see
// add) with its own middleware in front of its handler. Paths no route
// matches get fiber's 404.
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
		add(app, rt.Method, rt.ColonPattern(), mw, func(c *fiber.Ctx) error {
			if next != nil {
				next()
			}
			return c.SendString("ok")
		})
	}
	return fibertest.Serve(t, app)
}

// serveApp is the harness of a whole application: one middleware for
// every route, app.Use, before the routes.
func serveApp(t testing.TB, app conformance.HTTPApp) string {
	t.Helper()
	opts := append([]fiberlimit.Option(nil), app.Options...)
	if app.Auth {
		a := conformance.NewAuthFuncs(local)
		opts = append(opts, fiberlimit.WithKeyFunc(core.ScopeUser, a.User), fiberlimit.WithPlanFunc(a.Plan),
			fiberlimit.WithCostFunc(a.Cost), fiberlimit.WithSkipFunc(a.Skip))
	}
	mw, err := fiberlimit.New(app.Limiter, opts...)
	if err != nil {
		t.Fatalf("fiberlimit.New: %v", err)
	}
	a := fibertest.NewApp()
	if app.Auth {
		a.Use(auth)
	}
	a.Use(mw)
	var route []fiber.Handler
	if app.Twice {
		route = append(route, mw)
	}
	if app.Second != nil {
		second, err := fiberlimit.New(app.Limiter, app.Second...)
		if err != nil {
			t.Fatalf("fiberlimit.New (second): %v", err)
		}
		route = append(route, second)
	}
	for _, rt := range app.Routes {
		next := rt.Handler
		handlers := append(append([]fiber.Handler(nil), route...), func(c *fiber.Ctx) error {
			if next != nil {
				next()
			}
			return c.SendString("ok")
		})
		add(a, rt.Method, rt.ColonPattern(), handlers...)
	}
	return fibertest.Serve(t, a)
}

// auth moves authFields from the header into c.Locals, as an
// authentication middleware stores the user it found.
func auth(c *fiber.Ctx) error {
	for _, name := range conformance.AuthFields {
		if v := c.Get(name); v != "" {
			c.Locals(name, strings.Clone(v))
			c.Request().Header.Del(name)
		}
	}
	return c.Next()
}

// local returns the string auth stored under name, or "".
func local(c *fiber.Ctx, name string) string {
	v, _ := c.Locals(name).(string)
	return v
}

func TestConformance(t *testing.T) {
	conformance.RunHTTPSuite(t, conformance.HTTPHarness{Serve: serveFiber, ServeApp: serveApp, HeadAsGet: true})
}

// TestBesideNetHTTP: a net/http middleware over the limiter of the fiber
// middleware, before it in the app (adaptor.HTTPMiddleware, which copies
// the values of the net/http request's context into the fiber request's),
// fails the request with flow.ErrInstalledTwice rather than charge it
// twice; see flowtest.CheckBesideNetHTTP.
func TestBesideNetHTTP(t *testing.T) {
	flowtest.CheckBesideNetHTTP(t, []string{"before"}, func(t *testing.T, _ string, l, other *core.Limiter, failed func(error)) int {
		mw, err := fiberlimit.New(l, fiberlimit.WithErrorHandler(func(c *fiber.Ctx, err error) error {
			failed(err)
			return c.SendString("failed")
		}))
		if err != nil {
			t.Fatal(err)
		}
		m, err := nethttp.New(other, nethttp.WithErrorHandler(flowtest.HTTPErrorHandler(failed)))
		if err != nil {
			t.Fatal(err)
		}
		app := fibertest.NewApp()
		app.Use(adaptor.HTTPMiddleware(m.Handler), mw)
		app.Get("/x", func(c *fiber.Ctx) error { return c.SendString("ok") })
		resp, err := app.Test(httptest.NewRequest("GET", "/x", nil), -1)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	})
}
