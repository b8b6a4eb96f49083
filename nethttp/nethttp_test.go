package nethttp_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
	"github.com/bucketry/ratelimit/keyfuncs"
	"github.com/bucketry/ratelimit/nethttp"
)

func TestNewRejects(t *testing.T) {
	flowtest.CheckConstructor(t, flowtest.Constructor{
		Adapter: "nethttp",
		New:     flowtest.ErrorOf(nethttp.New),
		UserKey: nethttp.WithKeyFunc(core.ScopeUser, func(*http.Request) (string, error) { return "u", nil }),
		Invalid: flowtest.NilOptions(nethttp.WithKeyFunc(core.ScopeUser, nil), nethttp.WithDenyHandler(nil), nethttp.WithErrorHandler(nil)),
	})
}

func TestHandlerNilPanics(t *testing.T) {
	m, err := nethttp.New(flowtest.Limiter(t))
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
		{"as specified", []nethttp.Option{flow.WithHeaderFormat(asSpecified)}},
		{"lower", []nethttp.Option{flow.WithHeaderFormat(lower)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := flowtest.Limiter(t, core.Rule{Name: "api", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerMinute(1), 3)})
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

// endpointAndIP returns a middleware over a per-endpoint tier of burst
// tokens and a per-IP tier of 100, each refilling one token a minute.
func endpointAndIP(t *testing.T, burst int64) *nethttp.Middleware {
	t.Helper()
	l := flowtest.Limiter(t,
		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerMinute(1), burst)},
		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 100)},
	)
	m, err := nethttp.New(l)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRouteResolution: around the whole mux, the middleware asks the mux
// for the route before it dispatches, so the endpoint tier applies as it
// does around the route's handler; around a handler that is not a mux the
// route is unknown, and a request an endpoint tier could apply to fails
// (500) instead of skipping that tier; a request no route matches gets the
// mux's 404 with the tiers that need no route.
func TestRouteResolution(t *testing.T) {
	m := endpointAndIP(t, 1)
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	inside := http.NewServeMux()
	inside.Handle("GET /items/{id}", m.Handler(ok))
	bare := http.NewServeMux()
	bare.Handle("GET /items/{id}", ok)
	const both = `"per-endpoint";q=1;w=60, "per-ip";q=100;w=6000`
	for _, tc := range []struct {
		name   string
		h      http.Handler
		path   string
		status int
		want   string
	}{
		{"route wrapped", inside, "/items/1", 200, both},
		{"mux wrapped", m.Handler(bare), "/items/2", 429, both}, // the same endpoint bucket: 1 per minute
		{"no route", m.Handler(bare), "/nowhere", 404, `"per-ip";q=100;w=6000`},
		{"not a mux", m.Handler(http.StripPrefix("/x", bare)), "/x/items/3", 500, ""},
	} {
		rec := httptest.NewRecorder()
		tc.h.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
		if rec.Code != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, rec.Code, tc.status)
		}
		if got := rec.Header().Get("RateLimit-Policy"); got != tc.want {
			t.Errorf("%s: RateLimit-Policy = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestRouteOfRedirects: a request the mux answers with a redirect it makes
// reaches no route, like one it answers 404: a CONNECT request to a path
// the mux redirects to the path with a final "/" (for which the mux
// reports the path as its pattern), a GET to such a path, and one to a
// path to clean; the endpoint tier does not apply to them, so a client
// makes no bucket per path. A route whose own handler redirects is a
// route.
func TestRouteOfRedirects(t *testing.T) {
	m := endpointAndIP(t, 100)
	mux := http.NewServeMux()
	mux.HandleFunc("/items/{id}/", func(http.ResponseWriter, *http.Request) {})
	mux.Handle("/old", http.RedirectHandler("/new", http.StatusMovedPermanently))
	h := m.Handler(mux)
	const (
		both   = `"per-endpoint";q=100;w=6000, "per-ip";q=100;w=6000`
		ipOnly = `"per-ip";q=100;w=6000`
	)
	for _, tc := range []struct {
		method, path string
		status       int
		policy       string
	}{
		{"CONNECT", "/items/a", 307, ipOnly},
		{"CONNECT", "/items/b", 307, ipOnly},
		{"GET", "/items/a", 307, ipOnly},
		{"GET", "/x/../items/a/", 307, ipOnly},
		{"GET", "/items/a/", 200, both},
		{"GET", "/old", 301, both},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.status || rec.Header().Get("RateLimit-Policy") != tc.policy {
			t.Errorf("%s %s = %d, RateLimit-Policy %q; want %d, %q", tc.method, tc.path, rec.Code, rec.Header().Get("RateLimit-Policy"), tc.status, tc.policy)
		}
	}
}

// TestRouteUnknownWhenRead: around a handler that is not a mux, outside
// one, a request fails with flow.ErrRouteUnknown (500, the handler not
// run) when a key function reads the route, as the route's own
// (flow.WithRouteKey) or as part of a key (keyfuncs.MethodAndRoute), rather
// than key its tier as if no route matched; where the mux has matched the
// route, the same key functions read it.
func TestRouteUnknownWhenRead(t *testing.T) {
	apiKey, err := keyfuncs.APIKey("X-API-Key")
	if err != nil {
		t.Fatal(err)
	}
	user, err := keyfuncs.Header("X-User")
	if err != nil {
		t.Fatal(err)
	}
	lim := core.TokenBucket(core.PerMinute(1), 5)
	perUser := core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: lim}
	perEndpoint := core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: lim}
	for _, tc := range []struct {
		name string
		rule core.Rule
		opts []nethttp.Option
	}{
		{"a key of the route", perUser, []nethttp.Option{flow.WithKey(core.ScopeUser, user), flow.WithRouteKey("/search", core.ScopeUser, apiKey)}},
		{"a key that reads the route", perEndpoint, []nethttp.Option{flow.WithKey(core.ScopeEndpoint, keyfuncs.MethodAndRoute())}},
	} {
		var got error
		onError := nethttp.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
			got = err
			w.WriteHeader(500)
		})
		m, err := nethttp.New(flowtest.Limiter(t, tc.rule), append(tc.opts, onError)...)
		if err != nil {
			t.Fatal(err)
		}
		ran := 0
		next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran++ })
		mux := http.NewServeMux()
		mux.Handle("GET /search", m.Handler(next))
		for _, h := range []http.Handler{m.Handler(next), mux} {
			got, ran = nil, 0
			rec := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/search", nil)
			r.Header.Set("X-API-Key", "k1")
			r.Header.Set("X-User", "alice")
			h.ServeHTTP(rec, r)
			if h == mux {
				if rec.Code != 200 || rec.Header().Get("X-RateLimit-Remaining") != "4" || ran != 1 {
					t.Errorf("%s, route wrapped: %d, remaining %q, handler ran %d; want 200, 4, 1", tc.name, rec.Code, rec.Header().Get("X-RateLimit-Remaining"), ran)
				}
				continue
			}
			if rec.Code != 500 || !errors.Is(got, flow.ErrRouteUnknown) || ran != 0 {
				t.Errorf("%s, not a mux: %d, %v, handler ran %d; want 500, ErrRouteUnknown, 0", tc.name, rec.Code, got, ran)
			}
		}
	}
}

// TestInstalledTwice: the same middleware around the mux and around a
// route charges once; a second middleware over the same limiter fails the
// request.
func TestInstalledTwice(t *testing.T) {
	l := flowtest.Limiter(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 10)})
	m, err := nethttp.New(l)
	if err != nil {
		t.Fatal(err)
	}
	var got error
	other, err := nethttp.New(l, nethttp.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
		got = err
		w.WriteHeader(500)
	}))
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	mux := http.NewServeMux()
	mux.Handle("GET /same", m.Handler(ok))
	mux.Handle("GET /other", other.Handler(ok))
	h := m.Handler(mux)
	for i, want := range []string{"9", "8"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/same", nil))
		if got := rec.Header().Get("X-RateLimit-Remaining"); rec.Code != 200 || got != want {
			t.Errorf("request %d: %d, remaining %q; want 200, %q", i, rec.Code, got, want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/other", nil))
	if rec.Code != 500 || !errors.Is(got, flow.ErrInstalledTwice) {
		t.Errorf("two middlewares: %d, %v; want 500 and ErrInstalledTwice", rec.Code, got)
	}
}

// TestOneHandlerNoCopy: while one handler exists over the limiter, next
// gets the request as it came, and the middleware allocates only the
// header values; once a second exists, even of another Middleware, next
// gets a copy whose context records the pass.
func TestOneHandlerNoCopy(t *testing.T) {
	l := flowtest.Limiter(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerSecond(1000), 1_000_000)})
	m, err := nethttp.New(l)
	if err != nil {
		t.Fatal(err)
	}
	var seen *http.Request
	h := m.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { seen = r }))
	r := httptest.NewRequest("GET", "/x", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if seen != r || flow.MarkFrom(seen.Context()) != nil {
		t.Fatalf("one handler: next got %p (marked %v), want the request as it came, %p", seen, flow.MarkFrom(seen.Context()) != nil, r)
	}
	// One allocation: the dynamic header values' block.
	if n := testing.AllocsPerRun(100, func() { clear(w.Header()); h.ServeHTTP(w, r) }); n > 1 {
		t.Errorf("one handler: %v allocations a request, want at most 1", n)
	}
	other, err := nethttp.New(l)
	if err != nil {
		t.Fatal(err)
	}
	other.Handler(http.NotFoundHandler())
	h.ServeHTTP(httptest.NewRecorder(), r)
	if seen == r || flow.MarkFrom(seen.Context()) == nil {
		t.Errorf("two handlers: next got the request as it came (marked %v), want a marked copy", flow.MarkFrom(seen.Context()) != nil)
	}
}
