package chilimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	chilimit "github.com/bucketry/ratelimit/chi"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
	"github.com/bucketry/ratelimit/keyfuncs"
)

func newMiddleware(t testing.TB, l *core.Limiter, opts ...chilimit.Option) *chilimit.Middleware {
	t.Helper()
	m, err := chilimit.New(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNewRejects(t *testing.T) {
	invalid := flowtest.NilOptions(chilimit.WithKeyFunc(core.ScopeUser, nil), chilimit.WithDenyHandler(nil), chilimit.WithErrorHandler(nil))
	invalid["WithPlanFunc"] = chilimit.WithPlanFunc(nil)
	invalid["WithCostFunc"] = chilimit.WithCostFunc(nil)
	invalid["WithSkipFunc"] = chilimit.WithSkipFunc(nil)
	// The same function type as nethttp's, and still refused.
	invalid[`nethttp.WithKeyFunc("user") is an option of nethttp, given to chilimit`] = flow.NativeKey("nethttp", core.ScopeUser, func(*http.Request) (string, error) { return "u", nil })
	flowtest.CheckConstructor(t, flowtest.Constructor{
		Adapter: "chilimit",
		New:     flowtest.ErrorOf(chilimit.New),
		UserKey: chilimit.WithKeyFunc(core.ScopeUser, func(*http.Request) (string, error) { return "u", nil }),
		Invalid: invalid,
	})
}

func TestHandlerNilPanics(t *testing.T) {
	m := newMiddleware(t, flowtest.Limiter(t))
	defer func() {
		if recover() == nil {
			t.Fatal("Handler(nil) did not panic")
		}
	}()
	m.Handler(nil)
}

// do sends method path to h from peer with header fields kv (name, value,
// ...) and returns the recorded response.
func do(h http.Handler, method, path string, kv ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = "192.0.2.1:1234"
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// seen records the route the middleware reported for the last request,
// through a skip function that exempts nothing, and the route chi reports
// to the handler the request reached.
type seen struct {
	route, chi string
	known, ran bool
}

// skip is a flow.WithSkip function that records what the middleware saw.
func (s *seen) skip(r keyfuncs.Request) bool {
	s.route = r.Route()
	rr, ok := r.(flow.RouteReporter)
	s.known = ok && rr.RouteKnown()
	return false
}

// handler is a route's handler that records chi's route, in the shared
// form, and checks that r.Pattern is chi's.
func (s *seen) handler(t *testing.T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		pattern := chi.RouteContext(r.Context()).RoutePattern()
		if r.Pattern != pattern {
			t.Errorf("%s %s: the handler's r.Pattern = %q, want chi's %q", r.Method, r.URL.Path, r.Pattern, pattern)
		}
		s.ran, s.chi = true, flow.BraceRoute(pattern)
	}
}

func (s *seen) reset() { *s = seen{} }

// limiterOf is a limiter whose one rule needs no route, so that every
// request passes the middleware whatever it reports.
func limiterOf(t testing.TB) *core.Limiter {
	return flowtest.Limiter(t, core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerSecond(1000), 1000)})
}

// TestRouteBeforeRouting: installed once with r.Use, before chi routes
// the request, the middleware reports the route chi then routes it to,
// through mounted routers, groups, regular expressions, catch-alls and
// mounted handlers that are not routers; and no route, known, for chi's
// 404 and 405, including the root of a mounted router that has no route
// there, which chi.Routes.Find alone reports as a route.
func TestRouteBeforeRouting(t *testing.T) {
	var s seen
	m := newMiddleware(t, limiterOf(t), flow.WithSkip(s.skip))
	h := s.handler(t)
	r := chi.NewRouter()
	r.Use(m.Handler)
	r.Get("/items/{id:[0-9]+}", h)
	r.Get("/plain/", h)
	r.Get("/files/*", h)
	r.Route("/api", func(r chi.Router) {
		r.Get("/", h)
		r.Get("/items/{id}", h)
		r.Route("/v1", func(r chi.Router) {
			r.Get("/users/{id}/", h)
		})
	})
	r.Route("/only", func(r chi.Router) { r.Get("/*", h) })
	r.Route("/noroot", func(r chi.Router) { r.Get("/x", h) })
	r.Mount("/static", http.StripPrefix("/static", h))
	r.Group(func(r chi.Router) { r.Get("/g/{a}", h) })

	for _, tc := range []struct {
		method, path string
		status       int
		route        string
	}{
		{"GET", "/items/12", 200, "/items/{id}"},
		{"GET", "/items/ab", 404, ""},
		{"POST", "/items/12", 405, ""},
		{"GET", "/plain/", 200, "/plain"}, // chi's pattern drops the final "/"
		{"GET", "/plain", 404, ""},
		{"GET", "/files/a/b", 200, "/files/{*}"},
		{"GET", "/api", 200, "/api"},
		{"GET", "/api/", 200, "/api"},
		{"POST", "/api", 405, ""},
		{"GET", "/api/items/1", 200, "/api/items/{id}"},
		{"GET", "/api/v1/users/3/", 200, "/api/v1/users/{id}"},
		{"GET", "/api/v1", 404, ""},
		{"GET", "/api/nope", 404, ""},
		{"GET", "/only", 200, "/only/{*}"},
		{"GET", "/only/", 200, "/only//{*}"}, // as chi joins "/only/" and "/*"
		{"GET", "/only/a", 200, "/only/{*}"},
		{"GET", "/noroot", 404, ""},
		{"GET", "/noroot/", 404, ""},
		{"GET", "/static", 200, "/static"},
		{"GET", "/static/a/b", 200, "/static/{*}"},
		{"GET", "/g/1", 200, "/g/{a}"},
		{"HEAD", "/g/1", 405, ""},
		{"FOO", "/g/1", 405, ""},
	} {
		s.reset()
		w := do(r, tc.method, tc.path)
		if w.Code != tc.status || s.route != tc.route || !s.known {
			t.Errorf("%s %s = %d, route %q (known %v); want %d, %q (known)", tc.method, tc.path, w.Code, s.route, s.known, tc.status, tc.route)
		}
		if s.ran != (tc.status == 200) || s.chi != s.route && s.ran {
			t.Errorf("%s %s: the handler ran %v with chi's route %q; the middleware reported %q", tc.method, tc.path, s.ran, s.chi, s.route)
		}
	}
}

// TestRegexpRouteRule: a rule's route written as chi registers it, with
// a regular expression, is refused when the policy is built, naming the
// route the middleware reports; a rule on that route applies.
func TestRegexpRouteRule(t *testing.T) {
	limit := core.TokenBucket(core.PerMinute(1), 1)
	_, err := core.NewPolicy(core.Rule{Name: "items", Scope: core.ScopeGlobal, Routes: []string{"GET /items/{id:[0-9]+}"}, Limit: limit})
	if !errors.Is(err, core.ErrInvalidRule) || !strings.Contains(err.Error(), `"/items/{id}"`) {
		t.Fatalf("NewPolicy with route \"GET /items/{id:[0-9]+}\" = %v; want ErrInvalidRule naming \"/items/{id}\"", err)
	}
	l := flowtest.Limiter(t, core.Rule{Name: "items", Scope: core.ScopeGlobal, Routes: []string{"GET /items/{id}"}, Limit: limit})
	r := chi.NewRouter()
	r.Use(newMiddleware(t, l).Handler)
	r.Get("/items/{id:[0-9]+}", func(http.ResponseWriter, *http.Request) {})
	for i, want := range []int{200, 429} {
		if w := do(r, "GET", "/items/42"); w.Code != want {
			t.Fatalf("GET /items/42 #%d = %d, want %d", i, w.Code, want)
		}
	}
}

// TestRouteInstallations: wherever chi takes middleware, the middleware
// reports the route chi routes the request to, with the prefixes of the
// routers it is mounted in, and no route for a 404 it sees.
func TestRouteInstallations(t *testing.T) {
	var s seen
	var mw func(http.Handler) http.Handler // each case's own
	type build func(h http.HandlerFunc) http.Handler
	api := func(h http.HandlerFunc) func(chi.Router) {
		return func(r chi.Router) {
			r.Get("/", h)
			r.Get("/items/{id:[0-9]+}", h)
			r.Route("/v1", func(r chi.Router) { r.Get("/users/{id}", h) })
		}
	}
	for _, tc := range []struct {
		name  string
		build build
		paths map[string]string // path: route, "" for chi's 404
	}{
		{"root Use", func(h http.HandlerFunc) http.Handler {
			r := chi.NewRouter()
			r.Use(mw)
			r.Route("/api", api(h))
			return r
		}, map[string]string{"/api": "/api", "/api/items/1": "/api/items/{id}", "/api/v1/users/2": "/api/v1/users/{id}", "/api/x": "", "/x": ""}},
		{"route With", func(h http.HandlerFunc) http.Handler {
			r := chi.NewRouter()
			r.With(mw).Get("/items/{id:[0-9]+}", h)
			r.Route("/api", func(r chi.Router) { r.With(mw).Get("/users/{id}", h) })
			return r
		}, map[string]string{"/items/1": "/items/{id}", "/api/users/2": "/api/users/{id}"}},
		{"group Use", func(h http.HandlerFunc) http.Handler {
			r := chi.NewRouter()
			r.Group(func(r chi.Router) {
				r.Use(mw)
				r.Get("/items/{id}", h)
			})
			return r
		}, map[string]string{"/items/1": "/items/{id}"}},
		{"mounted router Use", func(h http.HandlerFunc) http.Handler {
			r := chi.NewRouter()
			r.Route("/api", func(r chi.Router) {
				r.Use(mw)
				api(h)(r)
			})
			return r
		}, map[string]string{"/api": "/api", "/api/": "/api", "/api/items/1": "/api/items/{id}", "/api/v1/users/2": "/api/v1/users/{id}", "/api/x": "", "/api/v1": ""}},
		{"nested mounted router Use", func(h http.HandlerFunc) http.Handler {
			r := chi.NewRouter()
			r.Route("/api", func(r chi.Router) {
				r.Route("/v1", func(r chi.Router) {
					r.Use(mw)
					r.Get("/users/{id}", h)
				})
			})
			return r
		}, map[string]string{"/api/v1/users/2": "/api/v1/users/{id}", "/api/v1/x": "", "/api/v1": ""}},
		{"Mount With", func(h http.HandlerFunc) http.Handler {
			sub := chi.NewRouter()
			api(h)(sub)
			r := chi.NewRouter()
			r.With(mw).Mount("/api", sub)
			return r
		}, map[string]string{"/api": "/api", "/api/items/1": "/api/items/{id}", "/api/v1/users/2": "/api/v1/users/{id}", "/api/x": ""}},
		{"around the router", func(h http.HandlerFunc) http.Handler {
			r := chi.NewRouter()
			r.Route("/api", api(h))
			return mw(r)
		}, map[string]string{"/api": "/api", "/api/items/1": "/api/items/{id}", "/x": ""}},
		{"around a mounted router", func(h http.HandlerFunc) http.Handler {
			sub := chi.NewRouter()
			api(h)(sub)
			r := chi.NewRouter()
			r.Mount("/api", mw(sub))
			return r
		}, map[string]string{"/api/items/1": "/api/items/{id}", "/api/v1/users/2": "/api/v1/users/{id}", "/api/x": ""}},
		{"after StripSlashes", func(h http.HandlerFunc) http.Handler {
			r := chi.NewRouter()
			r.Use(middleware.StripSlashes)
			r.Use(mw)
			r.Get("/items/{id}", h)
			r.With(mw).Get("/users/{id}", h)
			return r
		}, map[string]string{"/items/1/": "/items/{id}", "/users/1/": "/users/{id}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw = newMiddleware(t, limiterOf(t), flow.WithSkip(s.skip)).Handler
			h := tc.build(s.handler(t))
			for path, route := range tc.paths {
				s.reset()
				w := do(h, "GET", path)
				want := 200
				if route == "" {
					want = 404
				}
				if w.Code != want || !s.known || s.route != route || s.chi != route {
					t.Errorf("GET %s = %d, route %q (known %v), chi's %q; want %d and %q, known", path, w.Code, s.route, s.known, s.chi, want, route)
				}
			}
		})
	}
}

// TestRouteGetHead: after middleware.GetHead, a HEAD request is routed as
// GET, and the middleware reports the GET route.
func TestRouteGetHead(t *testing.T) {
	var s seen
	m := newMiddleware(t, limiterOf(t), flow.WithSkip(s.skip))
	r := chi.NewRouter()
	r.Use(middleware.GetHead, m.Handler)
	r.Get("/items/{id}", s.handler(t))
	if w := do(r, "HEAD", "/items/1"); w.Code != 200 || s.route != "/items/{id}" || !s.known || s.chi != s.route {
		t.Errorf("HEAD /items/1 = %d, route %q (known %v), chi's %q; want 200, \"/items/{id}\", known", w.Code, s.route, s.known, s.chi)
	}
}

// TestRouteUnknown: around a handler that is not a chi router, outside
// chi, the route is unknown: a request a rule that needs the route could
// apply to, or whose key reads the route (keyfuncs.MethodAndRoute), fails
// with flow.ErrRouteUnknown (500, its handler not run), and one whose
// rules and keys need no route is limited as usual.
func TestRouteUnknown(t *testing.T) {
	var ran int
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran++ })
	var got error
	onError := chilimit.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
		got = err
		http.Error(w, "failed", http.StatusInternalServerError)
	})
	endpoint := flowtest.Limiter(t, core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerMinute(1), 5)})
	routed := flowtest.Limiter(t, core.Rule{Name: "search", Scope: core.ScopeIP, Routes: []string{"/search"}, Limit: core.TokenBucket(core.PerMinute(1), 5)})
	byRoute := flow.WithKey(core.ScopeEndpoint, keyfuncs.MethodAndRoute())
	for _, tc := range []struct {
		name string
		l    *core.Limiter
		opts []chilimit.Option
	}{
		{"endpoint", endpoint, nil},
		{"routes", routed, nil},
		{"endpoint keyed by MethodAndRoute", flowtest.Limiter(t, endpoint.Policy().Rules()...), []chilimit.Option{byRoute}},
	} {
		got, ran = nil, 0
		h := newMiddleware(t, tc.l, append(tc.opts, onError)...).Handler(next)
		if w := do(h, "GET", "/search"); w.Code != 500 || !errors.Is(got, flow.ErrRouteUnknown) || ran != 0 {
			t.Errorf("%s: GET /search = %d, err %v, handler ran %d; want 500, ErrRouteUnknown, 0", tc.name, w.Code, got, ran)
		}
	}
	ran = 0
	h := newMiddleware(t, flowtest.Limiter(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 5)})).Handler(next)
	if w := do(h, "GET", "/search"); w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "4" || ran != 1 {
		t.Errorf("per-ip only: GET /search = %d, remaining %q, handler ran %d; want 200, 4, 1", w.Code, w.Header().Get("X-RateLimit-Remaining"), ran)
	}
}

// TestEndpointTiers: installed once with r.Use, the endpoint tier is keyed
// by the route, so paths of one route share a bucket, and a tier limited to
// a route in a mounted router, written in the shared form, applies to it
// alone, decided with the others.
func TestEndpointTiers(t *testing.T) {
	l := flowtest.Limiter(t,
		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerHour(1), 3)},
		core.Rule{Name: "item", Scope: core.ScopeIP, Routes: []string{"GET /api/items/{id}"}, Limit: core.TokenBucket(core.PerHour(1), 2)},
	)
	m := newMiddleware(t, l)
	ok := func(http.ResponseWriter, *http.Request) {}
	r := chi.NewRouter()
	r.Use(m.Handler)
	r.Route("/api", func(r chi.Router) {
		r.Get("/items/{id:[0-9]+}", ok)
		r.Get("/users/{id}", ok)
	})
	const both = `"per-endpoint";q=3;w=10800, "item";q=2;w=7200`
	for i, tc := range []struct {
		path, policy string
		status       int
	}{
		{"/api/items/1", both, 200},
		{"/api/items/2", both, 200},
		{"/api/items/3", both, 429}, // "item" denies, and takes nothing from per-endpoint
		{"/api/users/1", `"per-endpoint";q=3;w=10800`, 200},
		{"/api/users/2", `"per-endpoint";q=3;w=10800`, 200},
		{"/api/users/3", `"per-endpoint";q=3;w=10800`, 200},
		{"/api/users/4", `"per-endpoint";q=3;w=10800`, 429},
		{"/api/items/x", "", 404},
	} {
		w := do(r, "GET", tc.path)
		if w.Code != tc.status || w.Header().Get("RateLimit-Policy") != tc.policy {
			t.Errorf("#%d GET %s = %d, RateLimit-Policy %q; want %d, %q", i+1, tc.path, w.Code, w.Header().Get("RateLimit-Policy"), tc.status, tc.policy)
		}
	}
}

// TestInstalledTwice: the same middleware with r.Use and again with r.With,
// or in a mounted router, charges a request once; a second middleware over
// the same limiter fails it, without running its handler.
func TestInstalledTwice(t *testing.T) {
	l := flowtest.Limiter(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 10)})
	m := newMiddleware(t, l)
	var got error
	other := newMiddleware(t, l, chilimit.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
		got = err
		w.WriteHeader(500)
	}))
	var ran int
	ok := func(http.ResponseWriter, *http.Request) { ran++ }
	r := chi.NewRouter()
	r.Use(m.Handler)
	r.With(m.Handler).Get("/same", ok)
	r.Route("/api", func(r chi.Router) {
		r.Use(m.Handler)
		r.Get("/same", ok)
	})
	r.With(other.Handler).Get("/other", ok)
	for i, path := range []string{"/same", "/api/same"} {
		w := do(r, "GET", path)
		if want := []string{"9", "8"}[i]; w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != want {
			t.Errorf("GET %s = %d, remaining %q; want 200, %q", path, w.Code, w.Header().Get("X-RateLimit-Remaining"), want)
		}
	}
	if w := do(r, "GET", "/other"); w.Code != 500 || !errors.Is(got, flow.ErrInstalledTwice) {
		t.Errorf("two middlewares: %d, %v; want 500 and ErrInstalledTwice", w.Code, got)
	}
	if ran != 2 {
		t.Errorf("the handlers ran %d times, want 2", ran)
	}
}

// TestHandlers: what the deny and error handlers find when they run, and
// what the defaults answer.
func TestHandlers(t *testing.T) {
	user := chilimit.WithKeyFunc(core.ScopeUser, func(r *http.Request) (string, error) {
		if u := r.Header.Get("X-User"); u != "" {
			return u, nil
		}
		if r.Header.Get("X-Broken") != "" {
			return "", errors.New("directory at 10.0.0.9 unreachable")
		}
		return "", keyfuncs.ErrNotApplicable
	})
	var ran int
	serve := func(m *chilimit.Middleware) http.Handler {
		r := chi.NewRouter()
		r.Use(m.Handler)
		r.Get("/", func(http.ResponseWriter, *http.Request) { ran++ })
		return r
	}
	t.Run("deny handler", func(t *testing.T) {
		var retry string
		r := serve(newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), user, chilimit.WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, d *core.Decision) {
			retry = w.Header().Get("Retry-After")
			w.WriteHeader(http.StatusTeapot)
			w.Write([]byte("slow down " + d.Rule))
		})))
		ran = 0
		do(r, "GET", "/", "X-User", "ann")
		w := do(r, "GET", "/", "X-User", "ann")
		if w.Code != http.StatusTeapot || w.Body.String() != "slow down per-user" || retry != "60" || ran != 1 {
			t.Errorf("denied: %d %q, Retry-After %q, handler ran %d; want 418 \"slow down per-user\", \"60\", 1", w.Code, w.Body.String(), retry, ran)
		}
	})
	t.Run("default denial", func(t *testing.T) {
		r := serve(newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), user))
		do(r, "GET", "/", "X-User", "ann")
		w := do(r, "GET", "/", "X-User", "ann")
		if w.Code != 429 || w.Header().Get("Content-Type") != core.ContentTypeProblem || w.Header().Get("Cache-Control") != "no-store" || !strings.Contains(w.Body.String(), core.ProblemTypeQuotaExceeded) {
			t.Errorf("denied: %d, Content-Type %q, Cache-Control %q, body %q; want 429 with a problem body", w.Code, w.Header().Get("Content-Type"), w.Header().Get("Cache-Control"), w.Body.String())
		}
	})
	t.Run("default error handler", func(t *testing.T) {
		r := serve(newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), user))
		ran = 0
		if w := do(r, "GET", "/", "X-Broken", "1"); w.Code != 500 || strings.Contains(w.Body.String(), "10.0.0.9") || ran != 0 {
			t.Errorf("key error: %d %q, handler ran %d; want 500 with no detail, 0", w.Code, w.Body.String(), ran)
		}
		if w := do(r, "GET", "/", "X-User", strings.Repeat("u", core.MaxKeyLen+1)); w.Code != 400 || ran != 0 {
			t.Errorf("long key: %d, handler ran %d; want 400, 0", w.Code, ran)
		}
	})
	t.Run("client gone", func(t *testing.T) {
		r := serve(newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), user,
			flow.WithCost(func(r keyfuncs.Request) (int64, error) { return 0, r.Context().Err() })))
		ran = 0
		w := &flowtest.ResponseWriter{H: http.Header{}}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		req.Header.Set("X-User", "ann")
		r.ServeHTTP(w, req)
		if w.Status != 0 || ran != 0 {
			t.Errorf("client gone: status %d written, handler ran %d; want nothing, 0", w.Status, ran)
		}
	})
	t.Run("own timeout, client there", func(t *testing.T) {
		// A call of the cost function's own timed out: a failure, answered.
		r := serve(newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), user,
			flow.WithCost(func(keyfuncs.Request) (int64, error) {
				return 0, fmt.Errorf("quota service: %w", context.DeadlineExceeded)
			})))
		ran = 0
		w := do(r, "GET", "/", "X-User", "ann")
		if w.Code != 500 || strings.Contains(w.Body.String(), "quota") || ran != 0 {
			t.Errorf("cost function timed out: %d %q, handler ran %d; want 500 with no detail, 0", w.Code, w.Body.String(), ran)
		}
	})
}

// TestHeaderNames: the default format stores canonical names, which
// http.Header.Get finds, replacing values set earlier.
func TestHeaderNames(t *testing.T) {
	l := flowtest.Limiter(t, core.Rule{Name: "api", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerMinute(1), 3)})
	m := newMiddleware(t, l)
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
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
}

// TestRouteAddedLater: a router mounted after the middleware has served
// requests is found: the middleware reads the router's table again when it
// does not know a pattern chi matched.
func TestRouteAddedLater(t *testing.T) {
	var s seen
	m := newMiddleware(t, limiterOf(t), flow.WithSkip(s.skip))
	h := s.handler(t)
	r := chi.NewRouter()
	r.Use(m.Handler)
	r.Get("/a", h)
	check := func(path, route string, status int) {
		t.Helper()
		s.reset()
		if w := do(r, "GET", path); w.Code != status || s.route != route || !s.known {
			t.Errorf("GET %s = %d, route %q (known %v); want %d, %q", path, w.Code, s.route, s.known, status, route)
		}
	}
	check("/a", "/a", 200)
	r.Route("/api", func(r chi.Router) { r.Get("/items/{id}", h) })
	check("/api", "", 404) // the root of the new router, which has no route there
	check("/api/items/1", "/api/items/{id}", 200)
}

// TestRouteThroughWrappers: a router mounted through the middleware,
// r.Mount("/api", m.Handler(api)), is still a chi.Routes, whose routes
// chi.Routes.Find, chi.Walk and a middleware on the root router see. A
// router mounted through another handler (an authorization wrapper) is
// out of their sight: before it routes, the route is the mount's, as
// chi.Routes.Find reports it; in its routes' chains, what chi matched.
func TestRouteThroughWrappers(t *testing.T) {
	var outer, inner seen
	rootMW := newMiddleware(t, limiterOf(t), flow.WithSkip(outer.skip))
	apiMW := newMiddleware(t, limiterOf(t), flow.WithSkip(inner.skip))
	h := inner.handler(t)
	api := chi.NewRouter()
	api.Get("/items/{id}", h)
	admin := chi.NewRouter()
	admin.With(apiMW.Handler).Get("/users/{id}", h)
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { next.ServeHTTP(w, r) })
	}
	r := chi.NewRouter()
	r.Use(rootMW.Handler)
	r.Mount("/api", apiMW.Handler(api))
	r.Mount("/admin", wrap(admin))

	for _, tc := range []struct {
		path, outer, inner string
		status             int
	}{
		{"/api/items/1", "/api/items/{id}", "/api/items/{id}", 200},
		{"/api/x", "", "", 404},
		{"/admin/users/1", "/admin/{*}", "/admin/users/{id}", 200},
	} {
		outer.reset()
		inner.reset()
		w := do(r, "GET", tc.path)
		if w.Code != tc.status || outer.route != tc.outer || inner.route != tc.inner || !outer.known || !inner.known || inner.chi != tc.inner {
			t.Errorf("GET %s = %d, routes %q (root), %q (mounted), chi's %q; want %d, %q, %q", tc.path, w.Code, outer.route, inner.route, inner.chi, tc.status, tc.outer, tc.inner)
		}
	}
	var walked []string
	if err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		walked = append(walked, method+" "+route)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(walked, "GET /api/items/{id}") {
		t.Errorf("chi.Walk = %q, want GET /api/items/{id} among them", walked)
	}
}

// TestNativePattern: the native functions see chi's pattern of the route
// in r.Pattern, under r.Use before chi has set it; the handlers after the
// middleware see the Pattern chi sets.
func TestNativePattern(t *testing.T) {
	var native, notFound string
	m := newMiddleware(t, limiterOf(t), chilimit.WithSkipFunc(func(r *http.Request) bool {
		native = r.Pattern
		return false
	}))
	r := chi.NewRouter()
	r.Use(m.Handler)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		notFound = r.Pattern
		http.NotFound(w, r)
	})
	r.Route("/api", func(r chi.Router) {
		r.Get("/items/{id:[0-9]+}", func(w http.ResponseWriter, r *http.Request) {})
	})
	if w := do(r, "GET", "/api/items/1"); w.Code != 200 || native != "/api/items/{id:[0-9]+}" {
		t.Errorf("GET /api/items/1 = %d, r.Pattern %q in the skip function; want 200, %q", w.Code, native, "/api/items/{id:[0-9]+}")
	}
	// chi sets the mount's pattern before the mounted router's 404.
	if w := do(r, "GET", "/api/items/x"); w.Code != 404 || native != "" || notFound != "/api/*" {
		t.Errorf("GET /api/items/x = %d, r.Pattern %q in the skip function, %q in NotFound; want 404, \"\", \"/api/*\"", w.Code, native, notFound)
	}
}

// TestOneHandlerNoCopy: while one handler exists over the limiter, chi's
// handler gets the request the router passes on, with the Pattern it came
// with; once a second exists, a copy whose context records the pass.
func TestOneHandlerNoCopy(t *testing.T) {
	l := limiterOf(t)
	m := newMiddleware(t, l)
	var in, seen *http.Request
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			in = req
			next.ServeHTTP(w, req)
		})
	})
	r.Use(m.Handler)
	r.Get("/items/{id}", func(_ http.ResponseWriter, req *http.Request) { seen = req })
	if w := do(r, "GET", "/items/1"); w.Code != 200 || seen != in || flow.MarkFrom(seen.Context()) != nil {
		t.Fatalf("one handler: %d, next got %p (marked %v), want 200 and the request as it came, %p", w.Code, seen, seen != nil && flow.MarkFrom(seen.Context()) != nil, in)
	}
	newMiddleware(t, l).Handler(http.NotFoundHandler())
	if w := do(r, "GET", "/items/1"); w.Code != 200 || seen == in || flow.MarkFrom(seen.Context()) == nil {
		t.Errorf("two handlers: %d, next got the request as it came (marked %v), want 200 and a marked copy", w.Code, flow.MarkFrom(seen.Context()) != nil)
	}
}
