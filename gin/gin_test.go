package ginlimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
	ginlimit "github.com/bucketry/ratelimit/gin"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// TestMain puts gin in test mode: no debug lines on stdout, where they
// would spoil the examples' output.
func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

func newMiddleware(t testing.TB, l *core.Limiter, opts ...ginlimit.Option) gin.HandlerFunc {
	t.Helper()
	mw, err := ginlimit.New(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func TestNewRejects(t *testing.T) {
	invalid := flowtest.NilOptions(ginlimit.WithKeyFunc(core.ScopeUser, nil), ginlimit.WithDenyHandler(nil), ginlimit.WithErrorHandler(nil))
	invalid[`nethttp.WithKeyFunc("user") is an option of nethttp, given to ginlimit`] = flow.NativeKey("nethttp", core.ScopeUser, func(*http.Request) (string, error) { return "u", nil })
	flowtest.CheckConstructor(t, flowtest.Constructor{
		Adapter: "ginlimit",
		New:     flowtest.ErrorOf(ginlimit.New),
		UserKey: ginlimit.WithKeyFunc(core.ScopeUser, func(*gin.Context) (string, error) { return "u", nil }),
		Invalid: invalid,
	})
}

// do sends method path to h with header fields kv (name, value, ...) from
// peer and returns the recorded response.
func do(h http.Handler, method, path, peer string, kv ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestInstall: the middleware works wherever gin takes middleware: on a
// group (RouterGroup.Use, or Group's own handlers), on one route, and on the
// engine; the endpoint tier is keyed by method and full template, group
// prefix included; routes without the middleware are not limited.
func TestInstall(t *testing.T) {
	const peer = "192.0.2.1:1234"
	perEndpoint := core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerHour(1), 2)}
	var mw gin.HandlerFunc // each case's own, made before its setup runs
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }

	for _, tc := range []struct {
		name  string
		setup func(e *gin.Engine)
		path  string // the middleware limits it
		other string // a path another route serves, unlimited unless "" (engine-wide)
	}{
		{"group Use", func(e *gin.Engine) {
			api := e.Group("/api")
			api.Use(mw)
			api.GET("/items/:id", ok)
			e.GET("/health", ok)
		}, "/api/items/%d", "/health"},
		{"group handlers", func(e *gin.Engine) {
			e.Group("/v2", mw).GET("/items/:id", ok)
			e.GET("/health", ok)
		}, "/v2/items/%d", "/health"},
		{"route", func(e *gin.Engine) {
			e.GET("/items/:id", mw, ok)
			e.GET("/health", ok)
		}, "/items/%d", "/health"},
		{"engine Use", func(e *gin.Engine) {
			e.Use(mw)
			e.GET("/items/:id", ok)
		}, "/items/%d", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw = newMiddleware(t, flowtest.Limiter(t, perEndpoint))
			e := gin.New()
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

// TestEngineUseNoRoute: middleware installed with engine.Use also runs
// before gin's 404, where there is no route: the per-ip tier applies, the
// endpoint tier does not, and gin's 404 answer is kept when allowed.
func TestEngineUseNoRoute(t *testing.T) {
	mw := newMiddleware(t, flowtest.Limiter(t,
		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerHour(1), 2)},
		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerHour(1), 100)},
	))
	e := gin.New()
	e.Use(mw)
	e.GET("/items/:id", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	for i, want := range []struct {
		path, policy string
		status       int
	}{
		{"/nowhere", `"per-ip";q=2;w=7200`, 404},
		{"/items/1", `"per-ip";q=2;w=7200, "per-endpoint";q=100;w=360000`, 200},
		{"/nowhere", `"per-ip";q=2;w=7200`, 429},
	} {
		w := do(e, "GET", want.path, "192.0.2.1:1234")
		if w.Code != want.status || w.Header().Get("RateLimit-Policy") != want.policy {
			t.Errorf("#%d GET %s = %d, RateLimit-Policy %q; want %d, %q", i+1, want.path, w.Code, w.Header().Get("RateLimit-Policy"), want.status, want.policy)
		}
	}
}

// TestHandlers: what the deny and error handlers find when they run, and
// what the defaults answer.
func TestHandlers(t *testing.T) {
	const peer = "192.0.2.1:1234"
	user := ginlimit.WithKeyFunc(core.ScopeUser, func(c *gin.Context) (string, error) {
		if u := c.GetHeader("X-User"); u != "" {
			return u, nil
		}
		if c.GetHeader("X-Broken") != "" {
			return "", errors.New("directory at 10.0.0.9 unreachable")
		}
		return "", keyfuncs.ErrNotApplicable
	})
	var nextRan int
	next := func(c *gin.Context) {
		nextRan++
		c.String(http.StatusOK, "ok")
	}
	t.Run("deny handler writing only a body", func(t *testing.T) {
		var aborted bool
		var retry string
		mw := newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), user, ginlimit.WithDenyHandler(func(c *gin.Context, d *core.Decision) {
			aborted, retry = c.IsAborted(), c.Writer.Header().Get("Retry-After")
			c.Writer.WriteString("slow down " + d.Rule)
		}))
		e := gin.New()
		e.GET("/", mw, next)
		nextRan = 0
		do(e, "GET", "/", peer, "X-User", "ann")
		w := do(e, "GET", "/", peer, "X-User", "ann")
		if w.Code != 429 || w.Body.String() != "slow down per-user" || !aborted || retry != "60" || nextRan != 1 {
			t.Errorf("denied: %d %q, aborted %v, Retry-After %q, next ran %d; want 429 \"slow down per-user\", true, \"60\", 1", w.Code, w.Body.String(), aborted, retry, nextRan)
		}
	})
	t.Run("default error handler", func(t *testing.T) {
		var logged []string
		mw := newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), user)
		e := gin.New()
		e.Use(func(c *gin.Context) {
			c.Next()
			logged = c.Errors.Errors()
		})
		e.GET("/", mw, next)
		nextRan = 0
		w := do(e, "GET", "/", peer, "X-Broken", "1")
		if w.Code != 500 || strings.Contains(w.Body.String(), "10.0.0.9") || nextRan != 0 {
			t.Errorf("key error: %d %q, next ran %d; want 500 with no detail, 0", w.Code, w.Body.String(), nextRan)
		}
		if len(logged) != 1 || !strings.Contains(logged[0], "10.0.0.9") {
			t.Errorf("c.Errors = %q, want the key error", logged)
		}
	})
	t.Run("error handler writing nothing", func(t *testing.T) {
		var got error
		mw := newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), user, ginlimit.WithErrorHandler(func(c *gin.Context, err error) { got = err }))
		e := gin.New()
		e.GET("/", mw, next)
		nextRan = 0
		w := do(e, "GET", "/", peer, "X-User", strings.Repeat("u", core.MaxKeyLen+1))
		if w.Code != 400 || !errors.Is(got, core.ErrInvalidKey) || nextRan != 0 {
			t.Errorf("long key: %d, err %v, next ran %d; want 400, ErrInvalidKey, 0", w.Code, got, nextRan)
		}
	})
	t.Run("context without request", func(t *testing.T) {
		mw := newMiddleware(t, flowtest.Limiter(t, flowtest.PerUser), user)
		w := httptest.NewRecorder()
		c, _ := gin.CreateTestContext(w)
		mw(c)
		if !c.IsAborted() || w.Code != 500 {
			t.Errorf("no request: aborted %v, %d; want true, 500", c.IsAborted(), w.Code)
		}
	})
}

// TestClientIPIgnoresEngine: the engine trusts every proxy by default, so
// c.ClientIP believes a forged X-Forwarded-For; the limiter does not.
func TestClientIPIgnoresEngine(t *testing.T) {
	mw := newMiddleware(t, flowtest.Limiter(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerHour(1), 1)}))
	e := gin.New()
	var seen []string
	e.GET("/", mw, func(c *gin.Context) { seen = append(seen, c.ClientIP()) })
	first := do(e, "GET", "/", "192.0.2.1:1234", "X-Forwarded-For", "203.0.113.1")
	second := do(e, "GET", "/", "192.0.2.1:1234", "X-Forwarded-For", "203.0.113.2")
	if first.Code != 200 || second.Code != 429 {
		t.Errorf("statuses %d, %d; want 200, 429: one peer, one bucket", first.Code, second.Code)
	}
	if len(seen) != 1 || seen[0] != "203.0.113.1" {
		t.Errorf("c.ClientIP() = %q, want [203.0.113.1] (gin's default trusts the header)", seen)
	}
}

// TestMarkKeys: the Mark a request carries through the chain leaves no
// trace between requests. Two middlewares over different limiters on one
// route each charge every request (the second one's Mark, which records
// both, is not kept for the next request); values a handler stores with
// c.Set after the middleware reach the middleware before it, after c.Next;
// a request whose c.Keys a handler before the middleware made keeps them.
func TestMarkKeys(t *testing.T) {
	const peer = "192.0.2.1:1234"
	limit := func(name string) *core.Limiter {
		return flowtest.Limiter(t, core.Rule{Name: name, Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerHour(1), 10)})
	}
	a, b := newMiddleware(t, limit("a")), newMiddleware(t, limit("b"))
	var seen []any
	outer := func(c *gin.Context) {
		c.Next()
		v, _ := c.Get("user")
		seen = append(seen, v)
	}
	setUser := func(c *gin.Context) { c.Set("user", "alice") }
	before := func(c *gin.Context) { c.Set("tenant", "acme") }
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	e := gin.New()
	e.GET("/ab", a, b, ok)
	e.GET("/ba", b, a, ok)
	e.GET("/user", outer, a, setUser, ok)
	e.GET("/tenant", before, a, func(c *gin.Context) {
		if v, _ := c.Get("tenant"); v != "acme" {
			t.Errorf("/tenant: c.Get(tenant) = %v after the middleware, want acme", v)
		}
		c.String(http.StatusOK, "ok")
	})
	for i, path := range []string{"/ab", "/ab", "/ba", "/ab", "/ba"} {
		w := do(e, "GET", path, peer)
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s #%d = %d, want 200", path, i+1, w.Code)
		}
		// Both tiers are charged on every request: a and b each have
		// 10 - (i+1) left.
		if got, want := w.Header().Get("RateLimit"), fmt.Sprintf(";r=%d;", 9-i); !strings.Contains(got, want) {
			t.Errorf("GET %s #%d: RateLimit %q, want r=%d", path, i+1, got, 9-i)
		}
	}
	for range 3 {
		if w := do(e, "GET", "/user", "192.0.2.2:1"); w.Code != http.StatusOK {
			t.Fatalf("GET /user = %d", w.Code)
		}
	}
	for i, v := range seen {
		if v != "alice" {
			t.Errorf("/user #%d: the outer middleware read user %v after c.Next, want alice", i+1, v)
		}
	}
	if w := do(e, "GET", "/tenant", "192.0.2.3:1"); w.Code != http.StatusOK {
		t.Fatalf("GET /tenant = %d", w.Code)
	}
}

// TestHandleContext: engine.HandleContext runs the engine's middleware
// again on the same request, which the middleware lets through without
// charging it again, as New documents; a skip function for the second
// pass changes nothing.
func TestHandleContext(t *testing.T) {
	type redirected struct{}
	skip := ginlimit.WithSkipFunc(func(c *gin.Context) bool { return c.Request.Context().Value(redirected{}) != nil })
	for _, tc := range []struct {
		name string
		opts []ginlimit.Option
	}{
		{"as it is", nil},
		{"second pass skipped", []ginlimit.Option{skip}},
	} {
		l := flowtest.Limiter(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 10)})
		router := gin.New()
		router.Use(newMiddleware(t, l, tc.opts...))
		router.GET("/index.html", func(c *gin.Context) { c.String(http.StatusOK, "app") })
		router.NoRoute(func(c *gin.Context) {
			c.Request.URL.Path = "/index.html"
			c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), redirected{}, true))
			router.HandleContext(c)
		})
		for i := range 2 {
			w := do(router, "GET", "/some/deep/link", "192.0.2.1:1234")
			want := strconv.Itoa(9 - i)
			if w.Code != http.StatusOK || w.Body.String() != "app" || w.Header().Get("X-RateLimit-Remaining") != want {
				t.Errorf("%s: GET /some/deep/link #%d = %d %q, X-RateLimit-Remaining %q; want 200 \"app\", %s", tc.name, i+1, w.Code, w.Body.String(), w.Header().Get("X-RateLimit-Remaining"), want)
			}
		}
		if held, _ := ginlimit.PassesHeld(l); held != 0 {
			t.Errorf("%s: %d requests still recorded as let through after they were served", tc.name, held)
		}
	}
}

// TestPasses: what the middleware records of the requests it lets
// through, and what it leaves of them. Installed twice on a route it
// charges a request once; c.Keys stays as the handlers left it (nil when
// none set a value); once a request is served, or its chain panicked, no
// record of it remains, so that the next request on the same pooled
// gin.Context is charged.
func TestPasses(t *testing.T) {
	l := flowtest.Limiter(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerHour(1), 100)})
	a := newMiddleware(t, l)
	var after map[any]any // c.Keys once the middleware returned
	outer := func(c *gin.Context) {
		c.Next()
		after = c.Keys
	}
	var held int
	inside := func(c *gin.Context) {
		if len(c.Keys) != 0 {
			t.Errorf("%s: c.Keys = %v after the middleware, want none", c.Request.URL.Path, c.Keys)
		}
		held, _ = ginlimit.PassesHeld(l)
	}
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	e := gin.New()
	e.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) { c.AbortWithStatus(http.StatusTeapot) }))
	e.GET("/plain", outer, a, inside, ok)
	e.GET("/set", outer, a, inside, func(c *gin.Context) { c.Set("user", "alice") }, ok)
	e.GET("/twice", outer, a, inside, a, inside, ok)
	e.GET("/panic", outer, a, inside, func(*gin.Context) { panic("handler") })

	for j, tc := range []struct {
		path   string
		status int
		keys   func(map[any]any) bool
		want   string
	}{
		{"/plain", http.StatusOK, func(m map[any]any) bool { return m == nil }, "nil"},
		{"/set", http.StatusOK, func(m map[any]any) bool { return len(m) == 1 && m["user"] == "alice" }, "user alone"},
		{"/twice", http.StatusOK, func(m map[any]any) bool { return m == nil }, "nil"},
		{"/panic", http.StatusTeapot, nil, ""},
	} {
		t.Run(strings.TrimPrefix(tc.path, "/"), func(t *testing.T) {
			// A peer per path: its tier counts this path's requests only.
			peer := "192.0.2." + strconv.Itoa(j+1) + ":1"
			for i := range 5 {
				after, held = nil, -1
				w := do(e, "GET", tc.path, peer)
				if w.Code != tc.status {
					t.Fatalf("GET %s #%d = %d, want %d", tc.path, i+1, w.Code, tc.status)
				}
				if got, want := w.Header().Get("X-RateLimit-Remaining"), strconv.Itoa(99-i); got != want {
					t.Errorf("GET %s #%d: X-RateLimit-Remaining %s, want %s (charged once)", tc.path, i+1, got, want)
				}
				if held != 1 {
					t.Errorf("GET %s #%d: %d requests recorded as let through while the chain ran, want 1", tc.path, i+1, held)
				}
				if tc.keys != nil && !tc.keys(after) {
					t.Errorf("GET %s #%d: c.Keys = %v before the middleware after c.Next, want %s", tc.path, i+1, after, tc.want)
				}
				if n, _ := ginlimit.PassesHeld(l); n != 0 {
					t.Errorf("GET %s #%d: %d requests recorded as let through once served, want 0", tc.path, i+1, n)
				}
			}
		})
	}
}

// TestSiblingMadeLater: a gin middleware made over a limiter while a
// request another one let through is running fails that request with
// flow.ErrInstalledTwice rather than charge it again; over another
// limiter it charges it. A middleware that is collected leaves its
// limiter's list.
func TestSiblingMadeLater(t *testing.T) {
	rule := core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerHour(1), 10)}
	for _, same := range []bool{true, false} {
		l := flowtest.Limiter(t, rule)
		other := l
		if !same {
			other = flowtest.Limiter(t, rule)
		}
		var got error
		e := gin.New()
		e.GET("/x", newMiddleware(t, l), func(c *gin.Context) {
			later, err := ginlimit.New(other, ginlimit.WithErrorHandler(func(c *gin.Context, err error) {
				got = err
				c.String(http.StatusInternalServerError, "failed")
			}))
			if err != nil {
				t.Fatal(err)
			}
			later(c)
			if !c.IsAborted() {
				c.String(http.StatusOK, "ok")
			}
		})
		w := do(e, "GET", "/x", "192.0.2.1:1")
		switch {
		case same && (w.Code != http.StatusInternalServerError || !errors.Is(got, flow.ErrInstalledTwice)):
			t.Errorf("one limiter: %d, %v; want 500, flow.ErrInstalledTwice", w.Code, got)
		case !same && (w.Code != http.StatusOK || got != nil):
			t.Errorf("two limiters: %d, %v; want 200", w.Code, got)
		}
		for _, l := range []*core.Limiter{l, other} {
			if d, err := l.AllowN(context.Background(), core.Request{IP: "192.0.2.1"}, 0); err != nil || d.Remaining != 9 {
				t.Errorf("one limiter %v: remaining %d, %v; want 9, charged once", same, d.Remaining, err)
			}
		}
	}
	// The middlewares made in the handler are garbage now: the list of
	// the limiter keeps the one on the route.
	l := flowtest.Limiter(t, rule)
	keep := newMiddleware(t, l)
	for range 3 {
		newMiddleware(t, l)
	}
	for i := 0; ; i++ {
		runtime.GC()
		if _, n := ginlimit.PassesHeld(l); n == 1 {
			break
		} else if i == 100 {
			t.Fatalf("%d middlewares listed over the limiter after the others were collected, want 1", n)
		}
		time.Sleep(time.Millisecond)
	}
	runtime.KeepAlive(keep)
}
