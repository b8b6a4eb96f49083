package chilimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	chilimit "github.com/bucketry/ratelimit/chi"
	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// ok is a route's handler: it calls next, if any, and answers "ok".
func ok(next func()) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if next != nil {
			next()
		}
		io.WriteString(w, "ok")
	}
}

// serveChi is the conformance harness: a chi router on an httptest server,
// each route with its own Middleware installed with r.With, at the route's
// pattern (chi's syntax is the suite's). Paths no route matches get chi's
// 404 without passing through any middleware.
func serveChi(t testing.TB, routes []conformance.HTTPRoute) string {
	t.Helper()
	r := chi.NewRouter()
	for _, rt := range routes {
		opts := append([]chilimit.Option(nil), rt.Options...)
		if h := rt.NativeUserHeader; h != "" {
			opts = append(opts, chilimit.WithKeyFunc(core.ScopeUser, func(r *http.Request) (string, error) {
				if v := r.Header.Get(h); v != "" {
					return v, nil
				}
				return "", keyfuncs.ErrNotApplicable
			}))
		}
		if answer := rt.DenyResponse; answer != nil {
			opts = append(opts, chilimit.WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, d *core.Decision) {
				status, body := answer(d)
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(status)
				io.WriteString(w, body)
			}))
		}
		if answer := rt.ErrorResponse; answer != nil {
			opts = append(opts, chilimit.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
				status, body := answer(err)
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(status)
				io.WriteString(w, body)
			}))
		}
		m, err := chilimit.New(rt.Limiter, opts...)
		if err != nil {
			t.Fatalf("chilimit.New for %s %s: %v", rt.Method, rt.Pattern, err)
		}
		r.With(m.Handler).Method(rt.Method, rt.Pattern, ok(rt.Handler))
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

// serveApp is the harness of a whole application: one Middleware installed
// on the router with r.Use, before the routes (after the Auth middleware,
// when asked for); Twice installs it again on each route with r.With, and
// Second another Middleware over the same limiter likewise.
func serveApp(t testing.TB, app conformance.HTTPApp) string {
	t.Helper()
	opts := append([]chilimit.Option(nil), app.Options...)
	if app.Auth {
		a := conformance.NewAuthFuncs(conformance.AuthValue)
		opts = append(opts, chilimit.WithKeyFunc(core.ScopeUser, a.User), chilimit.WithPlanFunc(a.Plan),
			chilimit.WithCostFunc(a.Cost), chilimit.WithSkipFunc(a.Skip))
	}
	m, err := chilimit.New(app.Limiter, opts...)
	if err != nil {
		t.Fatalf("chilimit.New: %v", err)
	}
	var route []func(http.Handler) http.Handler
	if app.Twice {
		route = append(route, m.Handler)
	}
	if app.Second != nil {
		second, err := chilimit.New(app.Limiter, app.Second...)
		if err != nil {
			t.Fatalf("chilimit.New (second): %v", err)
		}
		route = append(route, second.Handler)
	}
	r := chi.NewRouter()
	if app.Auth {
		r.Use(conformance.AuthHandler)
	}
	r.Use(m.Handler)
	for _, rt := range app.Routes {
		var rr chi.Router = r
		if len(route) > 0 {
			rr = r.With(route...)
		}
		rr.Method(rt.Method, rt.Pattern, ok(rt.Handler))
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestConformance(t *testing.T) {
	// Without middleware.GetHead, chi answers a HEAD to a GET route with 405.
	conformance.RunHTTPSuite(t, conformance.HTTPHarness{Serve: serveChi, ServeApp: serveApp})
}
