package echolimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bucketry/ratelimit/core"
	echolimit "github.com/bucketry/ratelimit/echo"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
	"github.com/bucketry/ratelimit/keyfuncs"
)

func newMiddleware(t testing.TB, l *core.Limiter, opts ...echolimit.Option) echo.MiddlewareFunc {
	t.Helper()
	mw, err := echolimit.New(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// newEcho returns an Echo instance that prints nothing of its own.
func newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	return e
}

func ok(c echo.Context) error { return c.String(http.StatusOK, "ok") }

func TestNewRejects(t *testing.T) {
	invalid := flowtest.NilOptions(echolimit.WithKeyFunc(core.ScopeUser, nil), echolimit.WithDenyHandler(nil), echolimit.WithErrorHandler(nil))
	invalid["WithPlanFunc"] = echolimit.WithPlanFunc(nil)
	invalid["WithCostFunc"] = echolimit.WithCostFunc(nil)
	invalid["WithSkipFunc"] = echolimit.WithSkipFunc(nil)
	invalid[`nethttp.WithKeyFunc("user") is an option of nethttp, given to echolimit`] = flow.NativeKey("nethttp", core.ScopeUser, func(*http.Request) (string, error) { return "u", nil })
	flowtest.CheckConstructor(t, flowtest.Constructor{
		Adapter: "echolimit",
		New:     flowtest.ErrorOf(echolimit.New),
		UserKey: echolimit.WithKeyFunc(core.ScopeUser, func(echo.Context) (string, error) { return "u", nil }),
		Invalid: invalid,
	})
}

// do sends method path to h with header fields kv (name, value, ...) from
// peer and returns the recorded response. A "Host" field sets the
// request's host.
func do(h http.Handler, method, path, peer string, kv ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "Host" {
			r.Host = kv[i+1]
			continue
		}
		r.Header.Add(kv[i], kv[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// routeSeen is what a request view reported: its route and whether it is
// known.
type routeSeen struct {
	route string
	known bool
}

func (s routeSeen) String() string {
	if !s.known {
		return "unknown"
	}
	return fmt.Sprintf("%q", s.route)
}

// recordRoute returns an option that records the route each request's
// view reports, and lets every request through unlimited.
func recordRoute(seen *[]routeSeen) echolimit.Option {
	return flow.WithSkip(func(r keyfuncs.Request) bool {
		rr, _ := r.(flow.RouteReporter)
		*seen = append(*seen, routeSeen{r.Route(), rr != nil && rr.RouteKnown()})
		return true
	})
}

// TestRoute: the route each request reaches, as the middleware reports it
// wherever it is installed: after routing (e.Use) it reads c.Path(), before
// (e.Pre) it asks the router; either way 404s, 405s, Echo's automatic
// OPTIONS answer and RouteNotFound routes (a group's middleware makes two)
// reach no route, "", known.
func TestRoute(t *testing.T) {
	var seen []routeSeen
	mw := newMiddleware(t, flowtest.Limiter(t), recordRoute(&seen))
	noop := func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	routes := func(e *echo.Echo) {
		e.GET("/items/:id", ok)
		e.POST("/items/:id", ok)
		e.GET("/files/*", ok)
		e.GET("/a\\:b", ok) // a literal colon
		e.RouteNotFound("/static/*", func(c echo.Context) error { return c.NoContent(http.StatusGone) })
		api := e.Group("/api")
		api.Use(noop) // registers RouteNotFound "/api" and "/api/*"
		api.GET("/users/:id", ok)
		api.GET("/*", ok) // a route and a RouteNotFound route on one template
		e.Host("admin.test").GET("/panel", ok)
	}
	cases := []struct {
		method, path string
		kv           []string
		status       int
		route        string
	}{
		{"GET", "/items/1", nil, 200, "/items/{id}"},
		{"POST", "/items/2", nil, 200, "/items/{id}"},
		{"GET", "/items/1/more", nil, 200, "/items/{id}"}, // Echo: a final wildcard takes the rest
		{"DELETE", "/items/1", nil, 405, ""},
		{"OPTIONS", "/items/1", nil, 204, ""},
		{"GET", "/files/a/b.txt", nil, 200, "/files/{*}"},
		{"GET", "/a:b", nil, 200, "/a\\:b"},
		{"GET", "/nowhere", nil, 404, ""},
		{"GET", "/static/x", nil, 410, ""},
		{"GET", "/api/users/7", nil, 200, "/api/users/{id}"},
		{"GET", "/api/anything", nil, 200, "/api/{*}"},
		{"POST", "/api/anything", nil, 404, ""},
		{"POST", "/api", nil, 404, ""},
		{"GET", "/panel", []string{"Host", "admin.test"}, 200, "/panel"},
		{"GET", "/panel", nil, 404, ""},
	}
	for _, install := range []struct {
		name  string
		setup func(e *echo.Echo)
	}{
		{"Use", func(e *echo.Echo) { e.Use(mw) }},
		{"Pre", func(e *echo.Echo) { e.Pre(mw) }},
	} {
		t.Run(install.name, func(t *testing.T) {
			e := newEcho()
			install.setup(e)
			routes(e)
			for _, tc := range cases {
				seen = nil
				w := do(e, tc.method, tc.path, "192.0.2.1:1234", tc.kv...)
				want := []routeSeen{{tc.route, true}}
				if w.Code != tc.status || fmt.Sprint(seen) != fmt.Sprint(want) {
					t.Errorf("%s %s %q = %d, route %v; want %d, %v", tc.method, tc.path, tc.kv, w.Code, seen, tc.status, want)
				}
			}
		})
	}
}

// TestRouteLate: routes and groups registered after requests were served
// are seen: the route of a new template, and a new group's RouteNotFound
// routes, which are no route.
func TestRouteLate(t *testing.T) {
	var seen []routeSeen
	mw := newMiddleware(t, flowtest.Limiter(t), recordRoute(&seen))
	e := newEcho()
	e.Use(mw)
	e.GET("/items/:id", ok)
	do(e, "GET", "/items/1", "192.0.2.1:1234")
	e.GET("/users/:id", ok)
	e.Group("/admin", func(next echo.HandlerFunc) echo.HandlerFunc { return next }).GET("/stats", ok)
	for _, tc := range []struct {
		path  string
		route string
	}{
		{"/users/1", "/users/{id}"},
		{"/admin/stats", "/admin/stats"},
		{"/admin/nothing", ""},
		{"/items/2", "/items/{id}"},
	} {
		seen = nil
		do(e, "GET", tc.path, "192.0.2.1:1234")
		if want := []routeSeen{{tc.route, true}}; fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Errorf("GET %s: route %v, want %v", tc.path, seen, want)
		}
	}
}

// TestInstall: the middleware works wherever Echo takes middleware: e.Use,
// e.Pre, a group (Group's own middleware or Group.Use), and one route; the
// endpoint tier is keyed by method and full template, group prefix
// included; routes without the middleware are not limited.
func TestInstall(t *testing.T) {
	const peer = "192.0.2.1:1234"
	perEndpoint := core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerHour(1), 2)}
	var mw echo.MiddlewareFunc // each case's own, made before its setup runs

	for _, tc := range []struct {
		name  string
		setup func(e *echo.Echo)
		path  string // the middleware limits it
		other string // a path another route serves, unlimited unless "" (instance-wide)
	}{
		{"group Use", func(e *echo.Echo) {
			api := e.Group("/api")
			api.Use(mw)
			api.GET("/items/:id", ok)
			e.GET("/health", ok)
		}, "/api/items/%d", "/health"},
		{"group middleware", func(e *echo.Echo) {
			e.Group("/v2", mw).GET("/items/:id", ok)
			e.GET("/health", ok)
		}, "/v2/items/%d", "/health"},
		{"route", func(e *echo.Echo) {
			e.GET("/items/:id", ok, mw)
			e.GET("/health", ok)
		}, "/items/%d", "/health"},
		{"Use", func(e *echo.Echo) {
			e.Use(mw)
			e.GET("/items/:id", ok)
		}, "/items/%d", ""},
		{"Pre", func(e *echo.Echo) {
			e.Pre(mw)
			e.GET("/items/:id", ok)
		}, "/items/%d", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw = newMiddleware(t, flowtest.Limiter(t, perEndpoint))
			e := newEcho()
			tc.setup(e)
			path := func(i int) string { return fmt.Sprintf(tc.path, i) }
			for i, want := range []struct {
				status    int
				remaining string
			}{{200, "1"}, {200, "0"}, {429, "0"}} {
				w := do(e, "GET", path(i+1), peer)
				if w.Code != want.status || w.Header().Get("X-RateLimit-Remaining") != want.remaining {
					t.Fatalf("GET %s #%d = %d, X-RateLimit-Remaining %q; want %d, %q", path(i+1), i+1, w.Code, w.Header().Get("X-RateLimit-Remaining"), want.status, want.remaining)
				}
				if w.Code == 429 {
					if ct := w.Header().Get("Content-Type"); ct != core.ContentTypeProblem {
						t.Errorf("429 Content-Type = %q, want %q", ct, core.ContentTypeProblem)
					}
					if !strings.Contains(w.Body.String(), `"per-endpoint"`) {
						t.Errorf("429 body = %q, want it to name per-endpoint", w.Body.String())
					}
				}
			}
			if tc.other != "" {
				if w := do(e, "GET", tc.other, peer); w.Code != 200 || w.Header().Get("RateLimit") != "" {
					t.Errorf("GET %s (no middleware) = %d, RateLimit %q; want 200 and no field", tc.other, w.Code, w.Header().Get("RateLimit"))
				}
			}
		})
	}
}

// TestNoRoute: installed with e.Use or e.Pre, the middleware also runs for
// requests that reach no route, before Echo's 404 and 405: the per-ip tier
// applies, the endpoint tier does not, and Echo's answer is kept when
// allowed.
func TestNoRoute(t *testing.T) {
	for _, pre := range []bool{false, true} {
		mw := newMiddleware(t, flowtest.Limiter(t,
			core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerHour(3), 3)},
			core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerHour(100), 100)},
		))
		e := newEcho()
		if pre {
			e.Pre(mw)
		} else {
			e.Use(mw)
		}
		e.GET("/items/:id", ok)
		for i, want := range []struct {
			method, path, policy string
			status               int
		}{
			{"GET", "/nowhere", `"per-ip";q=3;w=3600`, 404},
			{"GET", "/items/1", `"per-ip";q=3;w=3600, "per-endpoint";q=100;w=3600`, 200},
			{"PUT", "/items/1", `"per-ip";q=3;w=3600`, 405},
			{"GET", "/nowhere", `"per-ip";q=3;w=3600`, 429},
		} {
			w := do(e, want.method, want.path, "192.0.2.1:1234")
			if w.Code != want.status || w.Header().Get("RateLimit-Policy") != want.policy {
				t.Errorf("pre %v: #%d %s %s = %d, RateLimit-Policy %q; want %d, %q", pre, i+1, want.method, want.path, w.Code, w.Header().Get("RateLimit-Policy"), want.status, want.policy)
			}
		}
	}
}

// TestPreRewrite: under e.Pre the route is the one the path has when the
// middleware runs, so a pre-middleware that rewrites the path goes first.
func TestPreRewrite(t *testing.T) {
	var seen []routeSeen
	mw := newMiddleware(t, flowtest.Limiter(t), recordRoute(&seen))
	trim := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if p := r.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
				r.URL.Path = strings.TrimSuffix(p, "/")
			}
			return next(c)
		}
	}
	for _, tc := range []struct {
		name  string
		pre   []echo.MiddlewareFunc
		route string
	}{
		{"rewrite first", []echo.MiddlewareFunc{trim, mw}, "/users/{id}"},
		{"rewrite after", []echo.MiddlewareFunc{mw, trim}, ""},
	} {
		e := newEcho()
		e.Pre(tc.pre...)
		e.GET("/users/:id", ok)
		e.GET("/users/:id/posts", ok)
		seen = nil
		w := do(e, "GET", "/users/1/", "192.0.2.1:1234")
		if want := []routeSeen{{tc.route, true}}; w.Code != 200 || fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Errorf("%s: GET /users/1/ = %d, route %v; want 200, %v", tc.name, w.Code, seen, want)
		}
	}
}

// noEcho is an echo.Context with no Echo instance, whose routes the
// middleware cannot ask for.
type noEcho struct{ echo.Context }

func (noEcho) Echo() *echo.Echo { return nil }

// TestRouteUnknown: when the route cannot be told, a request to which a
// tier that needs it applies, or whose key reads it, fails with
// flow.ErrRouteUnknown instead of skipping the tier; one to which none
// does is decided.
func TestRouteUnknown(t *testing.T) {
	var got error
	onError := echolimit.WithErrorHandler(func(c echo.Context, err error) error {
		got = err
		return nil
	})
	endpoint := core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerHour(1), 5)}
	for _, tc := range []struct {
		name   string
		rule   core.Rule
		opts   []echolimit.Option
		status int
	}{
		{"endpoint tier", endpoint, nil, 500},
		{"endpoint tier, a key that reads the route", endpoint, []echolimit.Option{flow.WithKey(core.ScopeEndpoint, keyfuncs.MethodAndRoute())}, 500},
		{"route tier", core.Rule{Name: "search", Scope: core.ScopeIP, Routes: []string{"/search"}, Limit: core.TokenBucket(core.PerHour(1), 5)}, nil, 500},
		{"ip tier", core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerHour(1), 5)}, nil, 200},
	} {
		got = nil
		mw := newMiddleware(t, flowtest.Limiter(t, tc.rule), append(tc.opts, onError)...)
		e := newEcho()
		w := httptest.NewRecorder()
		c := e.NewContext(httptest.NewRequest("GET", "/search", nil), w)
		if err := mw(ok)(noEcho{c}); err != nil {
			t.Errorf("%s: the middleware returned %v", tc.name, err)
		}
		if w.Code != tc.status || (tc.status == 500) != errors.Is(got, flow.ErrRouteUnknown) {
			t.Errorf("%s: %d, error %v; want %d, ErrRouteUnknown %v", tc.name, w.Code, got, tc.status, tc.status == 500)
		}
	}
}

// TestInstalledTwice: the same middleware at two levels charges a request
// once; another middleware over the same limiter fails the request with
// flow.ErrInstalledTwice, through its error handler, and the handler does
// not run.
func TestInstalledTwice(t *testing.T) {
	l := flowtest.Limiter(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerHour(1), 10)})
	mw := newMiddleware(t, l)
	var got error
	other := newMiddleware(t, l, echolimit.WithErrorHandler(func(c echo.Context, err error) error {
		got = err
		return nil // the pending 500
	}))
	var ran int
	handler := func(c echo.Context) error {
		ran++
		return c.NoContent(http.StatusOK)
	}
	e := newEcho()
	e.Pre(mw)
	e.Use(mw)
	api := e.Group("/api", mw)
	api.GET("/same", handler, mw)
	api.GET("/other", handler, other)
	for i, want := range []string{"9", "8"} {
		w := do(e, "GET", "/api/same", "192.0.2.1:1234")
		if got := w.Header().Get("X-RateLimit-Remaining"); w.Code != 200 || got != want {
			t.Errorf("GET /api/same #%d = %d, X-RateLimit-Remaining %q; want 200, %q", i+1, w.Code, got, want)
		}
	}
	w := do(e, "GET", "/api/other", "192.0.2.1:1234")
	if w.Code != 500 || !errors.Is(got, flow.ErrInstalledTwice) || ran != 2 {
		t.Errorf("GET /api/other = %d, error %v, handler ran %d times; want 500, ErrInstalledTwice, 2", w.Code, got, ran)
	}
	// The failed request was charged once, by mw, not by other too.
	if w := do(e, "GET", "/api/same", "192.0.2.1:1234"); w.Header().Get("X-RateLimit-Remaining") != "6" {
		t.Errorf("GET /api/same after the failure: X-RateLimit-Remaining %q, want 6", w.Header().Get("X-RateLimit-Remaining"))
	}
}

// errKey is the error of the failing key function.
var errKey = errors.New("directory at 10.0.0.9 unreachable")

// userKey reads X-User; X-Broken fails, X-Gone fails with an error
// wrapping context.Canceled.
var userKey = echolimit.WithKeyFunc(core.ScopeUser, func(c echo.Context) (string, error) {
	h := c.Request().Header
	switch {
	case h.Get("X-User") != "":
		return h.Get("X-User"), nil
	case h.Get("X-Broken") != "":
		return "", errKey
	case h.Get("X-Gone") != "":
		return "", fmt.Errorf("directory call: %w", context.Canceled)
	}
	return "", keyfuncs.ErrNotApplicable
})

// TestDenyHandler: what a deny handler finds when it runs, and how its
// answer and its error reach the client.
func TestDenyHandler(t *testing.T) {
	const peer = "192.0.2.1:1234"
	for _, tc := range []struct {
		name   string
		deny   echolimit.DenyHandler
		status int
		body   string
	}{
		{"writes only a body", func(c echo.Context, d *core.Decision) error {
			_, err := c.Response().Write([]byte("slow down " + d.Rule))
			return err
		}, 429, "slow down per-user"},
		{"writes nothing", func(echo.Context, *core.Decision) error { return nil }, 429, ""},
		{"writes its own answer", func(c echo.Context, d *core.Decision) error {
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"tier": d.Rule})
		}, 503, `{"tier":"per-user"}` + "\n"},
		{"returns an error", func(echo.Context, *core.Decision) error {
			return echo.NewHTTPError(http.StatusTooManyRequests, "slow down")
		}, 429, `{"message":"slow down"}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pending int
			var retry string
			mw := newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), userKey, echolimit.WithDenyHandler(func(c echo.Context, d *core.Decision) error {
				pending, retry = c.Response().Status, c.Response().Header().Get("Retry-After")
				return tc.deny(c, d)
			}))
			var ran int
			e := newEcho()
			e.GET("/", func(c echo.Context) error {
				ran++
				return c.String(http.StatusOK, "ok")
			}, mw)
			do(e, "GET", "/", peer, "X-User", "ann")
			w := do(e, "GET", "/", peer, "X-User", "ann")
			if w.Code != tc.status || w.Body.String() != tc.body || pending != 429 || retry != "60" || ran != 1 {
				t.Errorf("denied: %d %q, pending %d, Retry-After %q, handler ran %d; want %d %q, 429, \"60\", 1", w.Code, w.Body.String(), pending, retry, ran, tc.status, tc.body)
			}
			if got := w.Header().Get("X-RateLimit-Remaining"); got != "0" {
				t.Errorf("denied: X-RateLimit-Remaining %q, want 0", got)
			}
		})
	}
}

// TestErrors: the default answer to a request that cannot be decided is an
// *echo.HTTPError for Echo's HTTPErrorHandler, with the status text and
// the error as its internal error; an error handler gets the pending
// status; a client gone is the context's error.
func TestErrors(t *testing.T) {
	const peer = "192.0.2.1:1234"
	t.Run("default", func(t *testing.T) {
		mw := newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), userKey)
		var handled []error
		e := newEcho()
		e.HTTPErrorHandler = func(err error, c echo.Context) {
			handled = append(handled, err)
			e.DefaultHTTPErrorHandler(err, c)
		}
		e.GET("/", ok, mw)
		for _, tc := range []struct {
			kv     []string
			status int
			is     error
		}{
			{[]string{"X-Broken", "1"}, 500, errKey},
			{[]string{"X-User", strings.Repeat("u", core.MaxKeyLen+1)}, 400, core.ErrInvalidKey},
			{[]string{"X-Gone", "1"}, 500, context.Canceled}, // the request's context has not ended
		} {
			handled = nil
			w := do(e, "GET", "/", peer, tc.kv...)
			want := fmt.Sprintf("{\"message\":%q}\n", http.StatusText(tc.status))
			if w.Code != tc.status || w.Body.String() != want {
				t.Errorf("%q: %d %q; want %d %q", tc.kv, w.Code, w.Body.String(), tc.status, want)
			}
			var he *echo.HTTPError
			if len(handled) != 1 || !errors.As(handled[0], &he) || he.Code != tc.status || !errors.Is(handled[0], tc.is) {
				t.Errorf("%q: HTTPErrorHandler got %v; want one *echo.HTTPError %d wrapping %v", tc.kv, handled, tc.status, tc.is)
			}
			if w.Header().Get("RateLimit") != "" {
				t.Errorf("%q: RateLimit %q, want none", tc.kv, w.Header().Get("RateLimit"))
			}
		}
	})
	t.Run("handler writing nothing", func(t *testing.T) {
		var got error
		var pending int
		mw := newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), userKey, echolimit.WithErrorHandler(func(c echo.Context, err error) error {
			got, pending = err, c.Response().Status
			return nil
		}))
		e := newEcho()
		e.GET("/", ok, mw)
		w := do(e, "GET", "/", peer, "X-User", strings.Repeat("u", core.MaxKeyLen+1))
		if w.Code != 400 || w.Body.Len() != 0 || pending != 400 || !errors.Is(got, core.ErrInvalidKey) {
			t.Errorf("long key: %d %q, pending %d, err %v; want 400, empty, 400, ErrInvalidKey", w.Code, w.Body.String(), pending, got)
		}
	})
	t.Run("handler returning an error", func(t *testing.T) {
		mw := newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), userKey, echolimit.WithErrorHandler(func(c echo.Context, err error) error {
			return echo.NewHTTPError(http.StatusBadGateway, "try later").SetInternal(err)
		}))
		e := newEcho()
		e.GET("/", ok, mw)
		w := do(e, "GET", "/", peer, "X-Broken", "1")
		if w.Code != 502 || w.Body.String() != `{"message":"try later"}`+"\n" {
			t.Errorf("key error: %d %q; want 502 {\"message\":\"try later\"}", w.Code, w.Body.String())
		}
	})
	t.Run("client gone", func(t *testing.T) {
		mw := newMiddleware(t, flowtest.Limiter(t, core.Rule{Name: "queue", Scope: core.ScopeGlobal, Limit: core.Shaping(core.PerHour(1), 1, time.Hour)}))
		e := newEcho()
		serve := func(ctx context.Context) (*httptest.ResponseRecorder, error) {
			w := httptest.NewRecorder()
			c := e.NewContext(httptest.NewRequestWithContext(ctx, "GET", "/", nil), w)
			return w, mw(func(c echo.Context) error { return c.NoContent(http.StatusOK) })(c)
		}
		if w, err := serve(context.Background()); err != nil || w.Code != 200 {
			t.Fatalf("first request: %d, %v; want 200, nil", w.Code, err)
		}
		// The next request would wait an hour for its slot: its client
		// has gone.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		w, err := serve(ctx)
		if err != context.Canceled || w.Body.Len() != 0 || w.Header().Get("RateLimit") != "" {
			t.Errorf("client gone: returned %v, wrote %q %v; want context.Canceled and nothing written", err, w.Body.String(), w.Header())
		}
	})
	t.Run("context without request", func(t *testing.T) {
		mw := newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), userKey)
		c := newEcho().NewContext(nil, httptest.NewRecorder())
		var he *echo.HTTPError
		if err := mw(ok)(c); !errors.As(err, &he) || he.Code != 500 {
			t.Errorf("no request: returned %v, want an *echo.HTTPError 500", err)
		}
	})
}

// TestClientIPIgnoresEcho: c.RealIP, with no IPExtractor, believes
// X-Forwarded-For from any peer; the limiter does not.
func TestClientIPIgnoresEcho(t *testing.T) {
	mw := newMiddleware(t, flowtest.Limiter(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerHour(1), 1)}))
	e := newEcho()
	var seen []string
	e.GET("/", func(c echo.Context) error {
		seen = append(seen, c.RealIP())
		return nil
	}, mw)
	first := do(e, "GET", "/", "192.0.2.1:1234", "X-Forwarded-For", "203.0.113.1")
	second := do(e, "GET", "/", "192.0.2.1:1234", "X-Forwarded-For", "203.0.113.2")
	if first.Code != 200 || second.Code != 429 {
		t.Errorf("statuses %d, %d; want 200, 429: one peer, one bucket", first.Code, second.Code)
	}
	if len(seen) != 1 || seen[0] != "203.0.113.1" {
		t.Errorf("c.RealIP() = %q, want [203.0.113.1] (Echo's default believes the header)", seen)
	}
}

// TestHeaderNames: the fields are stored under canonical names and
// replace values set before.
func TestHeaderNames(t *testing.T) {
	mw := newMiddleware(t, flowtest.Limiter(t, core.Rule{Name: "api", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerMinute(1), 3)}))
	e := newEcho()
	e.Pre(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Response().Header().Set("X-RateLimit-Remaining", "stale")
			return next(c)
		}
	})
	e.Use(mw)
	e.GET("/", ok)
	w := do(e, "GET", "/", "192.0.2.1:1234")
	for name, want := range map[string]string{"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "RateLimit": `"api";r=2;t=60`} {
		if got := w.Header().Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want [%q]", name, got, want)
		}
	}
	for name := range w.Header() {
		if name != http.CanonicalHeaderKey(name) {
			t.Errorf("header name %q is not canonical", name)
		}
	}
}

// deadlinePassed is a context at the instant its deadline has passed and
// its timer has not fired yet: Err is still nil, and the engine counts it
// as ended.
type deadlinePassed struct{ context.Context }

func (deadlinePassed) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestDeadlinePassed: a key function fails with the request's deadline
// just as it passes; the request is gone, so the context's error goes back
// to Echo, and an error handler finds the pending status untouched.
func TestDeadlinePassed(t *testing.T) {
	key := echolimit.WithKeyFunc(core.ScopeUser, func(echo.Context) (string, error) {
		return "", fmt.Errorf("user store: %w", context.DeadlineExceeded)
	})
	pending := -1
	for _, tc := range []struct {
		name string
		opts []echolimit.Option
	}{
		{"default", []echolimit.Option{key}},
		{"error handler", []echolimit.Option{key, echolimit.WithErrorHandler(func(c echo.Context, err error) error {
			pending = c.Response().Status
			return err
		})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw := newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), tc.opts...)
			r := httptest.NewRequest("GET", "/", nil).WithContext(deadlinePassed{context.Background()})
			c := echo.New().NewContext(r, httptest.NewRecorder())
			before := c.Response().Status
			err := mw(func(echo.Context) error { t.Error("next ran"); return nil })(c)
			var he *echo.HTTPError
			if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &he) {
				t.Errorf("returned %v, want the context's error", err)
			}
			if tc.name == "error handler" && pending != before {
				t.Errorf("the error handler saw pending status %d, want it untouched (%d)", pending, before)
			}
		})
	}
}
