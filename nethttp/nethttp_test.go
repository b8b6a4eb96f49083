package nethttp_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
		opts := []nethttp.Option{nethttp.WithOptions(rt.Options...)}
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

func TestConformance(t *testing.T) {
	conformance.RunHTTPSuite(t, conformance.HTTPHarness{Serve: serveMux})
}

func newLimiter(t testing.TB, rules ...core.Rule) *core.Limiter {
	t.Helper()
	p, err := core.NewPolicy(rules...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := core.NewLimiter(p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var perUser = core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(1), 1)}

func TestNewRejects(t *testing.T) {
	l := newLimiter(t, perUser)
	user := nethttp.WithKeyFunc(core.ScopeUser, func(*http.Request) (string, error) { return "u", nil })
	format, err := core.NewHeaderFormat()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		l    *core.Limiter
		opts []nethttp.Option
		in   string // in the message
	}{
		{"nil limiter", nil, []nethttp.Option{user}, "nil limiter"},
		{"nil option", l, []nethttp.Option{user, nil}, "option 1 is nil"},
		{"nil shared option", l, []nethttp.Option{user, nethttp.WithOptions(nil)}, "WithOptions: option 0 is nil"},
		{"no key for a rule", l, nil, `rule "per-user" limits scope "user"`},
		{"nil native key", l, []nethttp.Option{nethttp.WithKeyFunc(core.ScopeUser, nil)}, "WithKeyFunc"},
		{"nil key", l, []nethttp.Option{nethttp.WithKey(core.ScopeUser, nil)}, "nil key function"},
		{"scope twice", l, []nethttp.Option{user, nethttp.WithKey(core.ScopeUser, keyfuncs.Route())}, "given twice"},
		{"global key", l, []nethttp.Option{user, nethttp.WithKeyFunc(core.ScopeGlobal, func(*http.Request) (string, error) { return "", nil })}, "want user, ip, endpoint"},
		{"nil plan", l, []nethttp.Option{user, nethttp.WithPlan(nil)}, "WithPlan"},
		{"nil cost", l, []nethttp.Option{user, nethttp.WithCost(nil)}, "WithCost"},
		{"nil skip", l, []nethttp.Option{user, nethttp.WithSkip(nil)}, "WithSkip"},
		{"nil format", l, []nethttp.Option{user, nethttp.WithHeaderFormat(nil)}, "WithHeaderFormat"},
		{"nil deny handler", l, []nethttp.Option{user, nethttp.WithDenyHandler(nil)}, "WithDenyHandler"},
		{"nil error handler", l, []nethttp.Option{user, nethttp.WithErrorHandler(nil)}, "WithErrorHandler"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := nethttp.New(tc.l, tc.opts...)
			if m != nil || !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("New = %v, %v; want ErrInvalidOption mentioning %q", m, err, tc.in)
			}
		})
	}
	// The same options, valid, build.
	if _, err := nethttp.New(l, user, nethttp.WithHeaderFormat(format), nethttp.WithHeadersOnAllow(false)); err != nil {
		t.Fatalf("New with valid options: %v", err)
	}
}

func TestHandlerNilPanics(t *testing.T) {
	m, err := nethttp.New(newLimiter(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Handler(nil) did not panic")
		}
	}()
	m.Handler(nil)
}

// TestHeaderNames: the default format stores canonical names, which
// http.Header.Get finds; a format that spells names as specified is
// canonicalized on the way in; and the fields replace values set earlier.
func TestHeaderNames(t *testing.T) {
	asSpecified, err := core.NewHeaderFormat()
	if err != nil {
		t.Fatal(err)
	}
	lower, err := core.NewHeaderFormat(core.WithNameCase(core.NamesLower))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts []nethttp.Option
	}{
		{"default", nil},
		{"as specified", []nethttp.Option{nethttp.WithHeaderFormat(asSpecified)}},
		{"lower", []nethttp.Option{nethttp.WithOptions(keyfuncs.WithHeaderFormat(lower))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, core.Rule{Name: "api", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerMinute(1), 3)})
			m, err := nethttp.New(l, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
			rec := httptest.NewRecorder()
			rec.Header().Set("X-RateLimit-Remaining", "stale")
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			for name, want := range map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "RateLimit": `"api";r=2;t=60`} {
				if got := rec.Header().Values(name); len(got) != 1 || got[0] != want {
					t.Errorf("%s = %q, want [%q]", name, got, want)
				}
			}
			for name := range rec.Header() {
				if name != http.CanonicalHeaderKey(name) {
					t.Errorf("header name %q is not canonical", name)
				}
			}
		})
	}
}

// TestOutsideMux: a middleware around the whole mux runs before the mux
// sets the pattern, so the endpoint tier does not apply there (the per-ip
// tier still does); around the route's handler, it does.
func TestOutsideMux(t *testing.T) {
	l := newLimiter(t,
		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerMinute(1), 1)},
		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 100)},
	)
	m, err := nethttp.New(l)
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	inside := http.NewServeMux()
	inside.Handle("GET /items/{id}", m.Handler(ok))
	bare := http.NewServeMux()
	bare.Handle("GET /items/{id}", ok)
	for _, tc := range []struct {
		name string
		h    http.Handler
		want string
	}{
		{"route wrapped", inside, `"per-endpoint";q=1;w=60, "per-ip";q=100;w=6000`},
		{"mux wrapped", m.Handler(bare), `"per-ip";q=100;w=6000`},
	} {
		rec := httptest.NewRecorder()
		tc.h.ServeHTTP(rec, httptest.NewRequest("GET", "/items/1", nil))
		if got := rec.Header().Get("RateLimit-Policy"); got != tc.want {
			t.Errorf("%s: RateLimit-Policy = %q, want %q", tc.name, got, tc.want)
		}
	}
}
