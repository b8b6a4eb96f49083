package fiberlimit_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/timeout"
	"github.com/valyala/fasthttp"

	"github.com/bucketry/ratelimit/core"
	fiberlimit "github.com/bucketry/ratelimit/fiber"
	"github.com/bucketry/ratelimit/fiber/internal/fibertest"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// recordingStore is a core.Store that keeps every key it is given, as a
// store that batches or caches keys would, without copying them, in front
// of a MemoryStore.
type recordingStore struct {
	next core.Store
	mu   sync.Mutex
	keys []string
}

func (s *recordingStore) Take(ctx context.Context, t *core.Take) error {
	s.mu.Lock()
	for _, b := range t.Buckets {
		s.keys = append(s.keys, b.Key)
	}
	s.mu.Unlock()
	return s.next.Take(ctx, t)
}

func (s *recordingStore) recorded() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

// conn is one client connection that sends requests one after another,
// so that fasthttp serves them all with the same buffers.
type conn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, base string) *conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &conn{t: t, c: c, br: bufio.NewReader(c)}
}

// get sends GET path with header fields kv (name, value, ...) and returns
// the response, its body read.
func (c *conn) get(path string, kv ...string) (*http.Response, string) {
	c.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: test\r\n", path)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", kv[i], kv[i+1])
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c.c, b.String()); err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatalf("GET %s: reading the body: %v", path, err)
	}
	return resp, string(body)
}

// TestKeysOutliveRequest: fasthttp serves the requests of one connection
// with the same buffers, and fiber's strings (c.Get) alias them. Keys from
// a framework-neutral key function (keyfuncs.Header) and from a native one
// returning c.Get as it is must stay intact after their request ends: a
// store that keeps the keys it was given still holds them unchanged after
// later requests wrote other values of the same length into those buffers,
// and the memory store still has each client's own bucket.
func TestKeysOutliveRequest(t *testing.T) {
	header, err := keyfuncs.Header("X-User")
	if err != nil {
		t.Fatal(err)
	}
	rule := core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 3)}
	for _, tc := range []struct {
		name string
		opt  fiberlimit.Option
	}{
		{"neutral", flow.WithKey(core.ScopeUser, header)},
		{"native", fiberlimit.WithKeyFunc(core.ScopeUser, func(c *fiber.Ctx) (string, error) {
			if v := c.Get("X-User"); v != "" {
				return v, nil
			}
			return "", keyfuncs.ErrNotApplicable
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, err := core.NewMemoryStore(core.WithClock(core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
			if err != nil {
				t.Fatal(err)
			}
			store := &recordingStore{next: mem}
			l := flowtest.LimiterWith(t, []core.Option{core.WithStore(store)}, rule)
			mw, err := fiberlimit.New(l, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			app := fibertest.NewApp()
			app.Get("/k", mw, func(c *fiber.Ctx) error { return c.SendString("ok") })
			c := dial(t, fibertest.Serve(t, app))

			// Same length, so that each value overwrites the last in place.
			users := []string{"alice-0001", "bobby-0002", "carol-0003"}
			for _, u := range users {
				resp, body := c.get("/k", "X-User", u)
				if resp.StatusCode != http.StatusOK || body != "ok" {
					t.Fatalf("GET /k [X-User: %s] = %d %q, want 200 \"ok\"", u, resp.StatusCode, body)
				}
				// Each user's bucket is fresh: burst 3, one taken.
				if got := resp.Header.Get("X-RateLimit-Remaining"); got != "2" {
					t.Errorf("GET /k [X-User: %s]: X-RateLimit-Remaining = %q, want \"2\" (a fresh bucket)", u, got)
				}
			}
			// alice's bucket has kept its own state: one token gone.
			resp, _ := c.get("/k", "X-User", users[0])
			if got := resp.Header.Get("X-RateLimit-Remaining"); got != "1" {
				t.Errorf("GET /k [X-User: %s] again: X-RateLimit-Remaining = %q, want \"1\" (its bucket, not a fresh one)", users[0], got)
			}
			if got, want := store.recorded(), append(users, users[0]); !equal(got, want) {
				t.Errorf("keys the store was given, read after the requests ended = %q, want %q", got, want)
			}
			// The memory store, read directly: three buckets, each with its
			// own state.
			if n := mem.Stats().Keys; n != 3 {
				t.Errorf("memory store holds %d buckets, want 3", n)
			}
			for i, u := range users {
				want := int64(2)
				if i == 0 {
					want = 1
				}
				d, err := l.AllowN(context.Background(), core.Request{User: u}, 0)
				if err != nil || d.Remaining != want {
					t.Errorf("AllowN({User: %q}, 0) = Remaining %d, %v; want %d", u, d.Remaining, err, want)
				}
			}
		})
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// appGet sends GET path through app with app.Test and header fields kv.
func appGet(t *testing.T, app *fiber.App, path string, kv ...string) (*http.Response, string) {
	t.Helper()
	r := httptest.NewRequest("GET", path, nil)
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	resp, err := app.Test(r, -1)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// TestUseRoute: installed with app.Use or on a group, the middleware runs
// in fiber's Use route, before the final route is matched, and finds the
// route fiber will reach; installed on the route, it has it. Either way
// the endpoint tier is keyed by the route with the group's prefix, in the
// shared form. A route whose syntax the middleware does not match (a
// constraint) coming first makes the route unknown: the request fails
// rather than skip the endpoint tier, whether the endpoint is keyed by the
// route by default or by a key function that reads it.
func TestUseRoute(t *testing.T) {
	rules := []core.Rule{
		{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerMinute(1), 1)},
		{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 100)},
	}
	const (
		both   = `"per-endpoint";q=1;w=60, "per-ip";q=100;w=6000`
		ipOnly = `"per-ip";q=100;w=6000`
	)
	ok := func(c *fiber.Ctx) error { return c.SendString("ok") }
	var endpoints []string
	recordEndpoint := flow.WithKey(core.ScopeEndpoint, func(r keyfuncs.Request) (string, error) {
		k, err := keyfuncs.Endpoint()(r)
		endpoints = append(endpoints, fmt.Sprintf("%q %v", k, err))
		return k, err
	})
	for _, tc := range []struct {
		name     string
		setup    func(app *fiber.App, mw fiber.Handler)
		path     string
		policy   string
		endpoint string
	}{
		{"route", func(app *fiber.App, mw fiber.Handler) { app.Get("/items/:id", mw, ok) },
			"/items/1", both, `"GET /items/{id}" <nil>`},
		{"group route", func(app *fiber.App, mw fiber.Handler) { app.Group("/api").Get("/items/:id", mw, ok) },
			"/api/items/1", both, `"GET /api/items/{id}" <nil>`},
		{"app.Use", func(app *fiber.App, mw fiber.Handler) { app.Use(mw); app.Get("/items/:id", ok) },
			"/items/1", both, `"GET /items/{id}" <nil>`},
		{"group with handler", func(app *fiber.App, mw fiber.Handler) { app.Group("/api", mw).Get("/items/:id", ok) },
			"/api/items/1", both, `"GET /api/items/{id}" <nil>`},
		{"app.Use, first match wins", func(app *fiber.App, mw fiber.Handler) {
			app.Use(mw)
			app.Get("/items/new", ok)
			app.Get("/items/:id", ok)
		}, "/items/new", both, `"GET /items/new" <nil>`},
		{"app.Use, wildcard", func(app *fiber.App, mw fiber.Handler) { app.Use(mw); app.Get("/files/*", ok) },
			"/files/a/b", both, `"GET /files/{*}" <nil>`},
		{"app.Use, wildcard of nothing", func(app *fiber.App, mw fiber.Handler) { app.Use(mw); app.Get("/files/*", ok) },
			"/files", both, `"GET /files/{*}" <nil>`},
		{"app.Use, case and trailing slash", func(app *fiber.App, mw fiber.Handler) { app.Use(mw); app.Get("/Items/:id", ok) },
			"/items/1/", both, `"GET /Items/{id}" <nil>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			endpoints = nil
			mw, err := fiberlimit.New(flowtest.Limiter(t, rules...), recordEndpoint)
			if err != nil {
				t.Fatal(err)
			}
			app := fibertest.NewApp()
			tc.setup(app, mw)
			resp, body := appGet(t, app, tc.path)
			if resp.StatusCode != http.StatusOK || body != "ok" {
				t.Fatalf("GET %s = %d %q, want 200 \"ok\"", tc.path, resp.StatusCode, body)
			}
			if got := resp.Header.Get("RateLimit-Policy"); got != tc.policy {
				t.Errorf("GET %s: RateLimit-Policy = %q, want %q", tc.path, got, tc.policy)
			}
			if len(endpoints) != 1 || endpoints[0] != tc.endpoint {
				t.Errorf("GET %s: endpoint key %q, want [%s]", tc.path, endpoints, tc.endpoint)
			}
		})
	}
	// The endpoint keyed by the route by default, or by a key function
	// that reads it.
	for name, opts := range map[string][]fiberlimit.Option{
		"app.Use, a constraint first":                             nil,
		"app.Use, a constraint first, a key that reads the route": {flow.WithKey(core.ScopeEndpoint, keyfuncs.MethodAndRoute())},
	} {
		t.Run(name, func(t *testing.T) {
			mw, err := fiberlimit.New(flowtest.Limiter(t, rules...), opts...)
			if err != nil {
				t.Fatal(err)
			}
			app := fibertest.NewApp()
			app.Use(mw)
			app.Get("/n/:id<int>", ok)
			resp, _ := appGet(t, app, "/n/7")
			if resp.StatusCode != http.StatusInternalServerError {
				t.Errorf("GET /n/7 = %d, want 500: the route cannot be told", resp.StatusCode)
			}
		})
	}
	// Under app.Use, a path no route matches still passes the middleware
	// (and takes a per-ip token) before fiber's 404; it gets no endpoint
	// bucket.
	mw, err := fiberlimit.New(flowtest.Limiter(t, rules...))
	if err != nil {
		t.Fatal(err)
	}
	app := fibertest.NewApp()
	app.Use(mw)
	app.Get("/items/:id", ok)
	resp, _ := appGet(t, app, "/nowhere")
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("RateLimit-Policy") != ipOnly {
		t.Errorf("app.Use: GET /nowhere = %d, RateLimit-Policy %q; want 404 and %q", resp.StatusCode, resp.Header.Get("RateLimit-Policy"), ipOnly)
	}
	// A file app.Static serves: fiber registers Static as it does Use,
	// which the search passes by (the package doc says so), so it gets
	// the route of a later route its path matches, or none.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("file"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		later  bool // a catch-all after Static
		policy string
	}{
		{"static file", false, ipOnly},
		{"static file before a catch-all", true, both},
	} {
		mw, err := fiberlimit.New(flowtest.Limiter(t, rules...))
		if err != nil {
			t.Fatal(err)
		}
		app := fibertest.NewApp()
		app.Use(mw)
		app.Static("/assets", dir)
		if tc.later {
			app.Get("/*", ok)
		}
		resp, body := appGet(t, app, "/assets/a.txt")
		if resp.StatusCode != http.StatusOK || body != "file" || resp.Header.Get("RateLimit-Policy") != tc.policy {
			t.Errorf("%s: GET /assets/a.txt = %d %q, RateLimit-Policy %q; want 200 \"file\" and %q", tc.name, resp.StatusCode, body, resp.Header.Get("RateLimit-Policy"), tc.policy)
		}
	}
}

// TestUseRouteAsFiber: under app.Use, the route the middleware finds is
// the one fiber routes the request to, "" when fiber answers 404, for
// each route of plain syntax alone and for all of them in one app, where
// the first that matches wins, under each CaseSensitive and StrictRouting:
// fiber's "*" matches nothing too ("/files" reaches "/files/*"), a
// pattern's final "/" is optional where parameters come before it
// ("/items/1/sub" reaches "/items/:id/sub/" under StrictRouting, unlike
// "/items/" for "/items"), and a route filed under a constant prefix of
// three bytes is not found for a shorter path ("/a" does not reach
// "/a/*").
func TestUseRouteAsFiber(t *testing.T) {
	rules := []core.Rule{{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerMinute(1), 1000)}}
	// In this order in one app: "/+" and "/*" would take every path first.
	patterns := []string{"/", "/items", "/items/", "/items/new", "/items/:id", "/items/:id/", "/items/:id/sub", "/items/:id/sub/",
		"/files/*", "/p/+", "/a/*", "/a/:x/b/:y", "/x/:a/:b", "/d/:x//:y", "/Mixed/:ID", "/API", "/a/b", "/+", "/*"}
	paths := []string{"/", "//", "/items", "/items/", "/items//", "/items/new", "/items/1", "/items/1/", "/ITEMS/1", "/items/1/2",
		"/items/1/sub", "/items/1/sub/", "/items/1/sub//", "/files", "/files/", "/files/a/b", "/filesx", "/p", "/p/", "/p/x", "/p/x/y",
		"/a", "/a/", "/a/b", "/a/1/b/2", "/a/1/b/", "/a/1/c/b/2", "/a/1//b/2", "/x/1/2", "/x/1/2/", "/x//2", "/d/1//2", "/d/:x//:y",
		"/mixed/1", "/Mixed/1", "/api", "/API", "/api/", "/abc", "/wild/x/end"}
	for _, cfg := range []fiber.Config{{}, {StrictRouting: true}, {CaseSensitive: true}, {CaseSensitive: true, StrictRouting: true}} {
		apps := make([][]string, 0, len(patterns)+1)
		for _, p := range patterns {
			apps = append(apps, []string{p})
		}
		apps = append(apps, patterns)
		for _, routes := range apps {
			var route string
			obs := core.WithObserver(func(_ context.Context, e *core.Event) { route = e.Request.Route })
			mw, err := fiberlimit.New(flowtest.LimiterWith(t, []core.Option{obs}, rules...))
			if err != nil {
				t.Fatal(err)
			}
			app := fibertest.NewApp(cfg)
			app.Use(mw)
			for _, p := range routes {
				app.Get(p, func(c *fiber.Ctx) error { return c.SendString(flow.ColonRoute(c.Route().Path)) })
			}
			for _, p := range paths {
				route = "unset"
				r := httptest.NewRequest("GET", "/", nil)
				r.RequestURI = p // as it is: NewRequest reads "//" as a host
				resp, err := app.Test(r, -1)
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				reached := string(b)
				if resp.StatusCode != http.StatusOK {
					reached = ""
				}
				if route != reached {
					t.Errorf("CaseSensitive %v, StrictRouting %v, routes %q: GET %s = %d, the middleware found route %q, fiber reached %q",
						cfg.CaseSensitive, cfg.StrictRouting, routes, p, resp.StatusCode, route, reached)
				}
			}
		}
	}
}

// TestRequestView: what framework-neutral key functions read through the
// view: every line of a header in order, matched case-insensitively (also
// when the app keeps names as received), the method, the route, the TCP
// peer and the user context.
func TestRequestView(t *testing.T) {
	type ctxKey struct{}
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprintf("DisableHeaderNormalizing=%v", disable), func(t *testing.T) {
			var got []string
			probe := flow.WithKey(core.ScopeUser, func(r keyfuncs.Request) (string, error) {
				got = append(got,
					fmt.Sprintf("values %q", r.Values("X-Multi")),
					fmt.Sprintf("lower %q", r.Values("x-multi")),
					fmt.Sprintf("absent %q", r.Values("X-Absent")),
					fmt.Sprintf("method %q", r.Method()),
					fmt.Sprintf("route %q", r.Route()),
					fmt.Sprintf("full method %q", r.FullMethod()),
					fmt.Sprintf("context %v", r.Context().Value(ctxKey{})),
				)
				if _, _, err := net.SplitHostPort(r.RemoteAddr()); err != nil || !strings.HasPrefix(r.RemoteAddr(), "127.0.0.1:") {
					t.Errorf("RemoteAddr() = %q, want 127.0.0.1:port", r.RemoteAddr())
				}
				return "u", nil
			})
			mw, err := fiberlimit.New(flowtest.Limiter(t, flowtest.PerUser), probe)
			if err != nil {
				t.Fatal(err)
			}
			app := fibertest.NewApp(fiber.Config{DisableHeaderNormalizing: disable, RequestMethods: append(fiber.DefaultMethods[:len(fiber.DefaultMethods):len(fiber.DefaultMethods)], "PURGE")})
			app.Add("PURGE", "/v/:id", func(c *fiber.Ctx) error {
				c.SetUserContext(context.WithValue(c.UserContext(), ctxKey{}, "from-auth"))
				return c.Next()
			}, mw, func(c *fiber.Ctx) error { return c.SendString("ok") })
			c := dial(t, fibertest.Serve(t, app))
			if _, err := io.WriteString(c.c, "PURGE /v/7 HTTP/1.1\r\nHost: test\r\nX-Multi: a, b\r\nx-multi: c\r\nX-MULTI: \r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(c.br, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("PURGE /v/7 = %d, want 200", resp.StatusCode)
			}
			want := []string{
				`values ["a, b" "c" ""]`,
				`lower ["a, b" "c" ""]`,
				`absent []`,
				`method "PURGE"`,
				`route "/v/{id}"`,
				`full method ""`,
				`context from-auth`,
			}
			if !equal(got, want) {
				t.Errorf("the view read\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestDenyHandlerStatus: a deny handler that writes only a body still
// answers 429, with the rate-limit fields set, and its error goes to the
// app's error handler.
func TestDenyHandlerStatus(t *testing.T) {
	errDenied := errors.New("denied")
	for _, tc := range []struct {
		name   string
		deny   func(*fiber.Ctx, *core.Decision) error
		status int
		body   string
	}{
		{"body only", func(c *fiber.Ctx, d *core.Decision) error { return c.SendString("slow down: " + d.Rule) }, 429, "slow down: global"},
		{"error", func(*fiber.Ctx, *core.Decision) error { return errDenied }, 418, "from the app"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := flowtest.Limiter(t, core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerMinute(1), 1)})
			mw, err := fiberlimit.New(l, fiberlimit.WithDenyHandler(tc.deny))
			if err != nil {
				t.Fatal(err)
			}
			app := fibertest.NewApp(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error {
				if !errors.Is(err, errDenied) {
					t.Errorf("app ErrorHandler got %v, want the deny handler's error", err)
				}
				return c.Status(418).SendString("from the app")
			}})
			calls := 0
			app.Get("/", mw, func(c *fiber.Ctx) error { calls++; return nil })
			appGet(t, app, "/")
			resp, body := appGet(t, app, "/")
			if resp.StatusCode != tc.status || body != tc.body {
				t.Errorf("GET / = %d %q, want %d %q", resp.StatusCode, body, tc.status, tc.body)
			}
			if got := resp.Header.Get("Retry-After"); got != "60" {
				t.Errorf("Retry-After = %q, want \"60\"", got)
			}
			if calls != 1 {
				t.Errorf("the handler ran %d times, want 1", calls)
			}
		})
	}
}

// TestContextEnded: a shaping delay is waited out until the request's
// UserContext ends. Here an earlier handler gives the second request a
// context whose deadline has passed, as fiber's timeout middleware would
// once its time is up: the middleware returns the context's error to fiber
// (the timeout middleware answers 408 for it, fiber's DefaultErrorHandler
// 500), or hands it to a custom error handler with no status set; the next
// handler is not called.
func TestContextEnded(t *testing.T) {
	shaping := core.Rule{Name: "shape", Scope: core.ScopeGlobal, Limit: core.Shaping(core.PerHour(1), 1, time.Hour)}
	expire := func(c *fiber.Ctx) error {
		if c.Get("X-Expire") != "" {
			ctx, cancel := context.WithDeadline(c.UserContext(), time.Unix(0, 0))
			defer cancel()
			c.SetUserContext(ctx)
		}
		return c.Next()
	}
	for _, tc := range []struct {
		name    string
		opts    []fiberlimit.Option
		timeout bool // wrap the middleware in timeout.NewWithContext
		status  int
	}{
		{"timeout middleware", nil, true, fiber.StatusRequestTimeout},
		{"no timeout middleware", nil, false, fiber.StatusInternalServerError},
		{"error handler", []fiberlimit.Option{fiberlimit.WithErrorHandler(func(c *fiber.Ctx, err error) error {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error handler got %v, want context.DeadlineExceeded", err)
			}
			if got := c.Response().StatusCode(); got != fiber.StatusOK {
				t.Errorf("error handler: pending status %d, want fiber's default 200 (none set)", got)
			}
			return c.Status(499).SendString("gone")
		})}, false, 499},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := fiberlimit.New(flowtest.Limiter(t, shaping), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if tc.timeout {
				mw = timeout.NewWithContext(mw, time.Hour)
			}
			app := fibertest.NewApp()
			calls := 0
			app.Get("/", expire, mw, func(c *fiber.Ctx) error { calls++; return nil })
			if resp, _ := appGet(t, app, "/"); resp.StatusCode != http.StatusOK {
				t.Fatalf("first GET / = %d, want 200", resp.StatusCode)
			}
			// The second would wait an hour for its slot.
			if resp, body := appGet(t, app, "/", "X-Expire", "1"); resp.StatusCode != tc.status {
				t.Errorf("second GET / = %d %q, want %d", resp.StatusCode, body, tc.status)
			}
			if calls != 1 {
				t.Errorf("the handler ran %d times, want 1", calls)
			}
		})
	}
}

// TestDefaultErrors: with the default error handler, a failing key function
// is a 500 and a key too long a 400, with the status text as a plain-text
// body, whatever the app's ErrorHandler would have said.
func TestDefaultErrors(t *testing.T) {
	errKey := errors.New("user directory at 10.0.0.9 is down")
	long := strings.Repeat("u", core.MaxKeyLen+1)
	for _, tc := range []struct {
		name   string
		key    func(*fiber.Ctx) (string, error)
		status int
	}{
		{"failing key", func(*fiber.Ctx) (string, error) { return "", errKey }, 500},
		{"key too long", func(*fiber.Ctx) (string, error) { return long, nil }, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := fiberlimit.New(flowtest.Limiter(t, flowtest.PerUser), fiberlimit.WithKeyFunc(core.ScopeUser, tc.key))
			if err != nil {
				t.Fatal(err)
			}
			app := fibertest.NewApp(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error {
				t.Errorf("app ErrorHandler called with %v", err)
				return fiber.DefaultErrorHandler(c, err)
			}})
			app.Get("/", mw, func(c *fiber.Ctx) error { t.Error("the handler ran"); return nil })
			resp, body := appGet(t, app, "/")
			if resp.StatusCode != tc.status || body != http.StatusText(tc.status) || resp.Header.Get("Content-Type") != fiber.MIMETextPlainCharsetUTF8 {
				t.Errorf("GET / = %d %q (%s), want %d %q (%s)", resp.StatusCode, body, resp.Header.Get("Content-Type"),
					tc.status, http.StatusText(tc.status), fiber.MIMETextPlainCharsetUTF8)
			}
		})
	}
}

// TestRemoteAddr: the view's RemoteAddr spells the TCP peer as
// net.TCPAddr.String does (and net/http's Request.RemoteAddr), whatever
// form fasthttp's address takes, and falls back to String for others; its
// PeerAddr (keyfuncs.PeerAddrRequest) gives the same peer as an address,
// and nothing for the others.
func TestRemoteAddr(t *testing.T) {
	for _, addr := range []net.Addr{
		&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1).To4(), Port: 1234},
		&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}, // 16-byte form
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 80, Zone: "eth0"},
		&net.TCPAddr{IP: net.IPv4zero, Port: 0},
		&net.TCPAddr{Port: 8080}, // no IP
		&net.UnixAddr{Name: "@", Net: "unix"},
	} {
		var (
			got    string
			peer   netip.AddrPort
			peerOK bool
		)
		mw, err := fiberlimit.New(flowtest.Limiter(t, flowtest.PerUser), flow.WithKey(core.ScopeUser, func(r keyfuncs.Request) (string, error) {
			got = r.RemoteAddr()
			if pr, ok := r.(keyfuncs.PeerAddrRequest); ok {
				peer, peerOK = pr.PeerAddr()
			} else {
				t.Errorf("the view is not a keyfuncs.PeerAddrRequest")
			}
			return "u", nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		app := fibertest.NewApp()
		app.Get("/", mw, func(c *fiber.Ctx) error { return nil })
		var req fasthttp.Request
		req.SetRequestURI("/")
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, addr, nil)
		app.Handler()(&ctx)
		if want := addr.String(); got != want {
			t.Errorf("RemoteAddr() for %#v = %q, want %q", addr, got, want)
		}
		if want, err := netip.ParseAddrPort(got); peerOK != (err == nil) || peerOK && peer != want {
			t.Errorf("PeerAddr() for %#v = %v, %v; RemoteAddr() = %q", addr, peer, peerOK, got)
		}
	}
}

// FuzzValues: every line of a header comes back in order, whatever its
// bytes and however the name is cased, and stays as it was after fasthttp
// reuses the request's buffers for another request.
func FuzzValues(f *testing.F) {
	f.Add("203.0.113.7", "198.51.100.1, 10.0.0.1", true)
	f.Add("", "x", false)
	f.Fuzz(func(t *testing.T, a, b string, lower bool) {
		name := "X-Multi"
		if lower {
			name = "x-multi"
		}
		var got []string
		mw, err := fiberlimit.New(flowtest.Limiter(t, flowtest.PerUser), flow.WithKey(core.ScopeUser, func(r keyfuncs.Request) (string, error) {
			got = r.Values(name)
			return "u", nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		app := fibertest.NewApp()
		app.Get("/", mw, func(c *fiber.Ctx) error { return nil })
		h := app.Handler()
		var req fasthttp.Request
		req.SetRequestURI("/")
		req.Header.Add("X-Multi", a)
		req.Header.Add("X-Other", "o")
		req.Header.Add("X-Multi", b)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}, nil)
		h(&ctx)
		want := []string{a, b}
		if !equal(got, want) {
			t.Fatalf("Values(%q) = %q, want %q", name, got, want)
		}
		// The next request on the connection overwrites the same buffers.
		ctx.Request.Header.Reset()
		ctx.Request.SetRequestURI("/")
		ctx.Request.Header.Add("X-Multi", strings.Repeat("z", len(a)))
		ctx.Request.Header.Add("X-Multi", strings.Repeat("z", len(b)))
		keep := got
		h(&ctx)
		if !equal(keep, want) {
			t.Fatalf("after the next request, the first request's Values = %q, want %q", keep, want)
		}
	})
}

func TestNewRejects(t *testing.T) {
	flowtest.CheckConstructor(t, flowtest.Constructor{
		Adapter: "fiberlimit",
		New:     flowtest.ErrorOf(fiberlimit.New),
		UserKey: fiberlimit.WithKeyFunc(core.ScopeUser, func(*fiber.Ctx) (string, error) { return "u", nil }),
		Invalid: flowtest.NilOptions(fiberlimit.WithKeyFunc(core.ScopeUser, nil), fiberlimit.WithDenyHandler(nil), fiberlimit.WithErrorHandler(nil)),
	})
}

// TestHeaderNamesOnTheWire: the rate-limit fields leave with the names
// c.Set gives them, byte for byte: normalized by fasthttp by default
// ("X-Ratelimit-Limit"), as the format spells them under
// DisableHeaderNormalizing ("X-RateLimit-Limit").
func TestHeaderNamesOnTheWire(t *testing.T) {
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprintf("DisableHeaderNormalizing=%v", disable), func(t *testing.T) {
			l := flowtest.Limiter(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 5)})
			mw, err := fiberlimit.New(l)
			if err != nil {
				t.Fatal(err)
			}
			format, err := core.NewHeaderFormat()
			if err != nil {
				t.Fatal(err)
			}
			app := fibertest.NewApp(fiber.Config{DisableHeaderNormalizing: disable})
			app.Get("/limited", mw, func(c *fiber.Ctx) error { return c.SendString("ok") })
			// The reference: every field set with c.Set under the name the
			// format spells.
			app.Get("/reference", func(c *fiber.Ctx) error {
				for h := range core.HeaderField(core.NumHeaderFields) {
					c.Set(h.Name(format), "1")
				}
				return c.SendString("ok")
			})
			base := fibertest.Serve(t, app)
			names := func(path string) map[string]bool {
				t.Helper()
				conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path)
				got := map[string]bool{}
				br := bufio.NewReader(conn)
				if _, err := br.ReadString('\n'); err != nil { // status line
					t.Fatal(err)
				}
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						t.Fatal(err)
					}
					if line == "\r\n" {
						return got
					}
					name, _, _ := strings.Cut(line, ":")
					got[name] = true
				}
			}
			ref, lim := names("/reference"), names("/limited")
			for _, h := range []core.HeaderField{core.FieldLimit, core.FieldRemaining, core.FieldReset, core.FieldPolicy, core.FieldRateLimit} {
				var want string
				for n := range ref {
					if strings.EqualFold(n, h.Name(format)) {
						want = n
					}
				}
				if want == "" || !lim[want] {
					t.Errorf("%v: c.Set sends %q; the middleware's response has %v", h, want, lim)
				}
			}
		})
	}
}

// deadlinePassed is a context at the instant its deadline has passed and
// its timer has not fired yet: Err is still nil, and the engine counts it
// as ended.
type deadlinePassed struct{ context.Context }

func (deadlinePassed) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestDeadlinePassed: a key function fails with the user context's
// deadline just as it passes; the context's error goes back to fiber,
// whose timeout middleware answers 408.
func TestDeadlinePassed(t *testing.T) {
	mw, err := fiberlimit.New(flowtest.Limiter(t, flowtest.PerUser),
		fiberlimit.WithKeyFunc(core.ScopeUser, func(c *fiber.Ctx) (string, error) {
			return "", fmt.Errorf("user store: %w", context.DeadlineExceeded)
		}))
	if err != nil {
		t.Fatal(err)
	}
	inner := func(c *fiber.Ctx) error {
		c.SetUserContext(deadlinePassed{c.UserContext()})
		return mw(c)
	}
	app := fibertest.NewApp()
	app.Get("/", timeout.NewWithContext(inner, time.Hour), func(c *fiber.Ctx) error { return nil })
	if resp, body := appGet(t, app, "/"); resp.StatusCode != fiber.StatusRequestTimeout {
		t.Errorf("GET / = %d %q, want 408", resp.StatusCode, body)
	}
}

// TestFieldsSetEarlierReplaced: a rate-limit field that a handler before
// the middleware set, under its name in any case, leaves with one value,
// the middleware's, on an allowed response and on a denial; a field of
// another name stays. Field names are case-insensitive (RFC 9110 section
// 5.1), and fasthttp normalizes the names c.Set is given.
func TestFieldsSetEarlierReplaced(t *testing.T) {
	format, err := core.NewHeaderFormat()
	if err != nil {
		t.Fatal(err)
	}
	mw, err := fiberlimit.New(flowtest.Limiter(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 1)}))
	if err != nil {
		t.Fatal(err)
	}
	cases := []func(string) string{strings.ToLower, strings.ToUpper, func(s string) string { return s }}
	earlier := func(c *fiber.Ctx) error {
		for h := range core.HeaderField(core.NumHeaderFields) {
			c.Set(cases[int(h)%len(cases)](h.Name(format)), "stale")
		}
		c.Set("X-Other", "kept")
		return c.Next()
	}
	app := fibertest.NewApp()
	app.Get("/", earlier, mw, func(c *fiber.Ctx) error { return c.SendString("ok") })
	for _, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		resp, _ := appGet(t, app, "/")
		if resp.StatusCode != want {
			t.Fatalf("GET / = %d, want %d", resp.StatusCode, want)
		}
		fields := []core.HeaderField{core.FieldLimit, core.FieldRemaining, core.FieldReset, core.FieldPolicy, core.FieldRateLimit}
		if want == http.StatusTooManyRequests {
			fields = append(fields, core.FieldRetryAfter, core.FieldCacheControl)
		}
		for _, h := range fields {
			// http.ReadResponse files every spelling of a name under one key.
			if got := resp.Header.Values(h.Name(format)); len(got) != 1 || got[0] == "stale" {
				t.Errorf("%d response: %s = %q, want one value, the middleware's", want, h.Name(format), got)
			}
		}
		if got := resp.Header.Values("X-Other"); len(got) != 1 || got[0] != "kept" {
			t.Errorf("%d response: X-Other = %q, want [kept]", want, got)
		}
	}
}
