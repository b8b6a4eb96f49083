package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
	echolimit "github.com/bucketry/ratelimit/echo"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
	"github.com/bucketry/ratelimit/keyfuncs"
	"github.com/bucketry/ratelimit/nethttp"
)

// newEcho returns an Echo instance that prints nothing of its own.
func newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	return e
}

// ok is each route's handler: it calls next, if any, and answers 200 "ok".
func ok(next func()) echo.HandlerFunc {
	return func(c echo.Context) error {
		if next != nil {
			next()
		}
		return c.String(http.StatusOK, "ok")
	}
}

// route registers method pattern (the suite's neutral syntax) on e with h
// and mw, at the route's colon pattern. A wildcard that ends an Echo
// route matches the rest of the path, slashes included ("/items/:id"
// serves "/items/1/more", id "1/more"), while the suite's "{id}" is one
// whole segment; a RouteNotFound route below it ("/items/:id/*", with
// Echo's NotFoundHandler and no middleware) bounds the wildcard to one
// segment and answers the deeper paths with Echo's 404, as a request no
// route matches.
func route(e *echo.Echo, method, pattern string, h echo.HandlerFunc, mw ...echo.MiddlewareFunc) {
	colon := conformance.HTTPRoute{Pattern: pattern}.ColonPattern()
	e.Add(method, colon, h, mw...)
	if last := colon[strings.LastIndexByte(colon, '/')+1:]; strings.HasPrefix(last, ":") {
		e.RouteNotFound(colon+"/*", echo.NotFoundHandler)
	}
}

// serveEcho is the conformance harness: an Echo instance on an httptest
// server, each route with its own middleware as route middleware, at the
// route's colon pattern. Paths no route matches get Echo's 404, through no
// middleware.
func serveEcho(t testing.TB, routes []conformance.HTTPRoute) string {
	t.Helper()
	e := newEcho()
	for _, rt := range routes {
		opts := append([]flow.Option(nil), rt.Options...)
		if h := rt.NativeUserHeader; h != "" {
			opts = append(opts, echolimit.WithKeyFunc(core.ScopeUser, func(c echo.Context) (string, error) {
				if v := c.Request().Header.Get(h); v != "" {
					return v, nil
				}
				return "", keyfuncs.ErrNotApplicable
			}))
		}
		if answer := rt.DenyResponse; answer != nil {
			opts = append(opts, echolimit.WithDenyHandler(func(c echo.Context, d *core.Decision) error {
				status, body := answer(d)
				return c.Blob(status, "text/plain; charset=utf-8", []byte(body))
			}))
		}
		if answer := rt.ErrorResponse; answer != nil {
			opts = append(opts, echolimit.WithErrorHandler(func(c echo.Context, err error) error {
				status, body := answer(err)
				return c.Blob(status, "text/plain; charset=utf-8", []byte(body))
			}))
		}
		mw, err := echolimit.New(rt.Limiter, opts...)
		if err != nil {
			t.Fatalf("echolimit.New for %s %s: %v", rt.Method, rt.Pattern, err)
		}
		route(e, rt.Method, rt.Pattern, ok(rt.Handler), mw)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL
}

// serveApp is the harness of a whole application: one middleware at the
// router level, e.Use, which Echo runs after routing, for every request.
func serveApp(t testing.TB, app conformance.HTTPApp) string {
	t.Helper()
	opts := append([]flow.Option(nil), app.Options...)
	if app.Auth {
		opts = append(opts, authOptions()...)
	}
	mw, err := echolimit.New(app.Limiter, opts...)
	if err != nil {
		t.Fatalf("echolimit.New: %v", err)
	}
	e := newEcho()
	if app.Auth {
		e.Use(auth)
	}
	e.Use(mw)
	var perRoute []echo.MiddlewareFunc
	if app.Twice {
		perRoute = append(perRoute, mw)
	}
	if app.Second != nil {
		second, err := echolimit.New(app.Limiter, app.Second...)
		if err != nil {
			t.Fatalf("echolimit.New (second): %v", err)
		}
		perRoute = append(perRoute, second)
	}
	for _, rt := range app.Routes {
		route(e, rt.Method, rt.Pattern, ok(rt.Handler), perRoute...)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL
}

// auth moves authFields from the header into the echo.Context (c.Set), as
// an authentication middleware stores the user it found.
func auth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		for _, name := range conformance.AuthFields {
			if v := h.Get(name); v != "" {
				c.Set(name, v)
				h.Del(name)
			}
		}
		return next(c)
	}
}

// authOptions are the native functions that read what auth stored.
func authOptions() []echolimit.Option {
	a := conformance.NewAuthFuncs(func(c echo.Context, name string) string {
		v, _ := c.Get(name).(string)
		return v
	})
	return []echolimit.Option{echolimit.WithKeyFunc(core.ScopeUser, a.User), echolimit.WithPlanFunc(a.Plan),
		echolimit.WithCostFunc(a.Cost), echolimit.WithSkipFunc(a.Skip)}
}

func TestConformance(t *testing.T) {
	// Echo routes HEAD only to HEAD routes: a HEAD to a GET route is a 405.
	conformance.RunHTTPSuite(t, conformance.HTTPHarness{Serve: serveEcho, ServeApp: serveApp})
}

// TestBesideNetHTTP: a net/http middleware over the limiter of the Echo
// middleware, around the Echo instance or inside it (echo.WrapHandler),
// fails the request with flow.ErrInstalledTwice rather than charge it
// twice; see flowtest.CheckBesideNetHTTP.
func TestBesideNetHTTP(t *testing.T) {
	flowtest.CheckBesideNetHTTP(t, []string{"around", "inside"}, func(t *testing.T, way string, l, other *core.Limiter, failed func(error)) int {
		mw, err := echolimit.New(l, echolimit.WithErrorHandler(func(c echo.Context, err error) error {
			failed(err)
			return c.String(http.StatusInternalServerError, "failed")
		}))
		if err != nil {
			t.Fatal(err)
		}
		m, err := nethttp.New(other, nethttp.WithErrorHandler(flowtest.HTTPErrorHandler(failed)))
		if err != nil {
			t.Fatal(err)
		}
		e := newEcho()
		e.Use(mw)
		var h http.Handler = e
		if way == "inside" {
			e.GET("/x", echo.WrapHandler(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))))
		} else {
			e.GET("/x", ok(nil))
			h = m.Handler(e)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/x", nil))
		return w.Code
	})
}
