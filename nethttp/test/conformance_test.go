package nethttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
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
		opts = append(opts, authOptions()...)
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
		root = auth(root)
	}
	srv := httptest.NewServer(root)
	t.Cleanup(srv.Close)
	return srv.URL
}

// authFields are the fields the Auth middleware moves into the context.
var authFields = []string{"X-User", "X-Plan", "X-Cost", "X-Skip"}

// auth moves authFields from the header into context values, as an
// authentication middleware stores the user it found.
func auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		for _, name := range authFields {
			if v := r.Header.Get(name); v != "" {
				ctx = context.WithValue(ctx, conformance.AuthKey(name), v)
				r.Header.Del(name)
			}
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// authValue returns the value auth stored under name, or "".
func authValue(r *http.Request, name string) string {
	v, _ := r.Context().Value(conformance.AuthKey(name)).(string)
	return v
}

// authOptions are the native functions that read what auth stored.
func authOptions() []nethttp.Option {
	stored := func(name string) func(*http.Request) (string, error) {
		return func(r *http.Request) (string, error) {
			if v := authValue(r, name); v != "" {
				return v, nil
			}
			return "", keyfuncs.ErrNotApplicable
		}
	}
	return []nethttp.Option{
		nethttp.WithKeyFunc(core.ScopeUser, stored("X-User")),
		nethttp.WithPlanFunc(stored("X-Plan")),
		nethttp.WithCostFunc(func(r *http.Request) (int64, error) {
			v := authValue(r, "X-Cost")
			if v == "" {
				return 1, nil
			}
			return strconv.ParseInt(v, 10, 64)
		}),
		nethttp.WithSkipFunc(func(r *http.Request) bool { return authValue(r, "X-Skip") == "1" }),
	}
}

func TestConformance(t *testing.T) {
	conformance.RunHTTPSuite(t, conformance.HTTPHarness{Serve: serveMux, ServeApp: serveApp})
}
