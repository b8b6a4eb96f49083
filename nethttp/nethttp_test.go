package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
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

// TestOutsideMux: a middleware around the whole mux runs before the mux
// sets the pattern, so the endpoint tier does not apply there (the per-ip
// tier still does); around the route's handler, it does.
func TestOutsideMux(t *testing.T) {
	l := flowtest.Limiter(t,
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
