package nethttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/keyfuncs"
	"github.com/bucketry/ratelimit/nethttp"
)

// serveMux is the conformance harness: a Go 1.22+ ServeMux on an httptest
// server, each route's handler wrapped by its own Middleware.
func serveMux(t testing.TB, routes []conformance.HTTPRoute) string {
	t.Helper()
	mux := http.NewServeMux()
	for _, rt := range routes {
		opts := append([]nethttp.Option(nil), rt.Options...)
		if h := rt.NativeUserHeader; h != "" {
			opts = append(opts, nethttp.WithKeyFunc(core.ScopeUser, func(r *http.Request) (string, error) {
				if v := r.Header.Get(h); v != "" {
					return v, nil
				}
				return "", keyfuncs.ErrNotApplicable
			}))
		}
		if answer := rt.DenyResponse; answer != nil {
			opts = append(opts, nethttp.WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, d *core.Decision) {
				status, body := answer(d)
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(status)
				io.WriteString(w, body)
			}))
		}
		if answer := rt.ErrorResponse; answer != nil {
			opts = append(opts, nethttp.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
				status, body := answer(err)
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(status)
				io.WriteString(w, body)
			}))
		}
		m, err := nethttp.New(rt.Limiter, opts...)
		if err != nil {
			t.Fatalf("nethttp.New for %s %s: %v", rt.Method, rt.Pattern, err)
		}
		next := rt.Handler
		mux.Handle(rt.Method+" "+rt.Pattern, m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if next != nil {
				next()
			}
			io.WriteString(w, "ok")
		})))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// serveApp is the harness of a whole application: one Middleware around
// the whole ServeMux.
func serveApp(t testing.TB, app conformance.HTTPApp) string {
	t.Helper()
	opts := append([]nethttp.Option(nil), app.Options...)
	if app.Auth {
		a := conformance.NewAuthFuncs(conformance.AuthValue)
		opts = append(opts, nethttp.WithKeyFunc(core.ScopeUser, a.User), nethttp.WithPlanFunc(a.Plan),
			nethttp.WithCostFunc(a.Cost), nethttp.WithSkipFunc(a.Skip))
	}
	m, err := nethttp.New(app.Limiter, opts...)
	if err != nil {
		t.Fatalf("nethttp.New: %v", err)
	}
	var second *nethttp.Middleware
	if app.Second != nil {
		if second, err = nethttp.New(app.Limiter, app.Second...); err != nil {
			t.Fatalf("nethttp.New (second): %v", err)
		}
	}
	mux := http.NewServeMux()
	for _, rt := range app.Routes {
		next := rt.Handler
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if next != nil {
				next()
			}
			io.WriteString(w, "ok")
		})
		if app.Twice {
			h = m.Handler(h)
		}
		if second != nil {
			h = second.Handler(h)
		}
		mux.Handle(rt.Method+" "+rt.Pattern, h)
	}
	var root http.Handler = m.Handler(mux)
	if app.Auth {
		root = conformance.AuthHandler(root)
	}
	srv := httptest.NewServer(root)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestConformance(t *testing.T) {
	// A ServeMux's "GET /x" pattern matches HEAD requests too.
	conformance.RunHTTPSuite(t, conformance.HTTPHarness{Serve: serveMux, ServeApp: serveApp, HeadAsGet: true})
}
