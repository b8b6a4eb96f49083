package benchmarks

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/httprate"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	ulule "github.com/ulule/limiter/v3"
	ululegin "github.com/ulule/limiter/v3/drivers/middleware/gin"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"github.com/valyala/fasthttp"

	"github.com/bucketry/ratelimit/core"
	fiberlimit "github.com/bucketry/ratelimit/fiber"
	ginlimit "github.com/bucketry/ratelimit/gin"
	"github.com/bucketry/ratelimit/nethttp"
)

// The middleware comparisons: one route, GET /items/{id}, requested by one
// client address, every request allowed, on each library's memory store.
// Each scenario has a "bare" implementation, the same route with no
// limiter, so that a middleware's added cost is its ns/op (and allocs/op)
// minus bare's, from the same run. bare is neither ours nor a peer: it
// decides nothing. Every framework also runs a ceiling, which is not a peer
// either (see middlewareCeiling and fiberCeiling).
//
// The limit is one per-ip tier that no run reaches: ours gets the roomy
// quota of the memory scenarios (2^29 at once, refilled over 50 days), the
// peers roomy.n per minute, their windows' length in their own examples.
// Every limiter keys by the TCP peer (ulule's gin middleware by
// c.ClientIP(), which is the peer when no X-Forwarded-For is sent) and sets
// its default rate-limit header fields.
//
// The serial scenarios run one goroutine in a loop; the parallel ones
// GOMAXPROCS goroutines (RunParallel), each with its own request and
// writer (or RequestCtx), all from the same client address: one hot key.

// mwPeer is the client address of every request.
const (
	mwPeerIP   = "192.0.2.1"
	mwPeerAddr = mwPeerIP + ":1234"
	mwPath     = "/items/1"
)

// mwModes are the serial and parallel scenarios of every framework.
var mwModes = []struct {
	name     string
	parallel bool
}{{"serial", false}, {"parallel", true}}

// peerWindow is the window the peers count in.
const peerWindow = time.Minute

// oursMiddlewareLimiter is a core.Limiter with one per-ip tier of the roomy
// quota.
func oursMiddlewareLimiter(tb testing.TB) *core.Limiter {
	tb.Helper()
	p, err := core.NewPolicy(core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: roomy.coreLimit()})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := core.NewLimiter(p)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// mwWriter is a ResponseWriter reused across iterations: its header map is
// cleared, not remade, so that the allocations counted are the framework's
// and the middleware's, not the writer's.
type mwWriter struct {
	h      http.Header
	status int
}

func (w *mwWriter) Header() http.Header { return w.h }
func (w *mwWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(b), nil
}
func (w *mwWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *mwWriter) reset() {
	clear(w.h)
	w.status = 0
}

func mwRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, mwPath, nil)
	r.RemoteAddr = mwPeerAddr
	return r
}

// httpCase is one implementation of a net/http-served scenario (gin and
// net/http): the handler that serves the route, and the header field a
// limiter must have set on an allowed response ("" for bare).
type httpCase struct {
	name   string
	h      http.Handler
	header string
}

// runHTTP measures every case, serial and parallel, under
// b.Run(<mode>/impl=<name>).
func runHTTP(b *testing.B, cases []httpCase) {
	for _, mode := range mwModes {
		b.Run(mode.name, func(b *testing.B) {
			for _, c := range cases {
				b.Run("impl="+c.name, func(b *testing.B) {
					// One request before the run: the check that the
					// limiter allowed and answered with its fields, and the
					// bucket's creation, out of the timing.
					w := &mwWriter{h: http.Header{}}
					c.h.ServeHTTP(w, mwRequest())
					if w.status != http.StatusOK {
						b.Fatalf("status %d, want 200", w.status)
					}
					if c.header != "" && w.h.Get(c.header) == "" {
						b.Fatalf("no %s field on an allowed response: %v", c.header, w.h)
					}
					b.ReportAllocs()
					if !mode.parallel {
						r := mwRequest()
						for b.Loop() {
							w.reset()
							c.h.ServeHTTP(w, r)
							if w.status != http.StatusOK {
								b.Fatalf("status %d, want 200", w.status)
							}
						}
						return
					}
					b.RunParallel(func(pb *testing.PB) {
						r := mwRequest()
						w := &mwWriter{h: http.Header{}}
						for pb.Next() {
							w.reset()
							c.h.ServeHTTP(w, r)
							if w.status != http.StatusOK {
								b.Errorf("status %d, want 200", w.status)
								return
							}
						}
					})
				})
			}
		})
	}
}

// BenchmarkMiddleware compares the middleware of gin, fiber and net/http:
// ours, the peers' and none, on the same route in the same run.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("Gin", benchGin)
	b.Run("Fiber", benchFiber)
	b.Run("NetHTTP", benchNetHTTP)
}

func benchGin(b *testing.B) {
	gin.SetMode(gin.ReleaseMode) // no debug lines per route
	ok := func(c *gin.Context) { c.Status(http.StatusOK) }
	engine := func(handlers ...gin.HandlerFunc) *gin.Engine {
		e := gin.New()
		e.GET("/items/:id", append(handlers, ok)...)
		return e
	}
	ours, err := ginlimit.New(oursMiddlewareLimiter(b))
	if err != nil {
		b.Fatal(err)
	}
	// As ulule's gin example builds it: the memory store with its defaults,
	// the middleware with its defaults (keyed by c.ClientIP()), installed
	// with Use.
	ululeEngine := gin.New()
	ululeEngine.Use(ululegin.NewMiddleware(ulule.New(ulmemory.NewStore(), ulule.Rate{Period: peerWindow, Limit: roomy.n})))
	ululeEngine.GET("/items/:id", ok)
	runHTTP(b, []httpCase{
		{name: "bare", h: engine()},
		{name: "ours_gin", h: engine(ours), header: "X-RateLimit-Remaining"},
		{name: "ulule_gin", h: ululeEngine, header: "X-RateLimit-Remaining"},
		{name: "ceiling_gin", h: engine(newMiddlewareCeiling(b).gin), header: "X-RateLimit-Remaining"},
	})
}

func benchNetHTTP(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux := func(h http.Handler) http.Handler {
		m := http.NewServeMux()
		m.Handle("GET /items/{id}", h)
		return m
	}
	ours, err := nethttp.New(oursMiddlewareLimiter(b))
	if err != nil {
		b.Fatal(err)
	}
	runHTTP(b, []httpCase{
		{name: "bare", h: mux(ok)},
		{name: "ours_nethttp", h: mux(ours.Handler(ok)), header: "X-RateLimit-Remaining"},
		// httprate (go-chi) is served by the module proxy. LimitByIP keys
		// by r.RemoteAddr, as ours does by default; it is deprecated in
		// favour of LimitBy with a trusted-IP key function, which on a
		// server without proxies is the same key.
		{name: "httprate", h: mux(httprate.LimitByIP(int(roomy.n), peerWindow)(ok)), header: "X-RateLimit-Remaining"},
		{name: "ceiling_nethttp", h: mux(newMiddlewareCeiling(b).handler(ok)), header: "X-RateLimit-Remaining"},
	})
}

// middlewareCeiling is the least our limiter costs as middleware in gin
// or net/http, a reference point and not a peer: the decision of the same
// limiter as ours_gin's and ours_nethttp's, keyed by the peer's address
// (net.SplitHostPort, which allocates nothing), and the same five header
// fields stored in the same way (core.HeaderFormat.SetHeader), with none
// of the middleware's other work: no key functions, skip, plan or cost
// functions, no record that the request was checked (which keeps a
// middleware installed twice from charging a request twice), no routes,
// no error handling beyond a 429.
type middlewareCeiling struct {
	l      *core.Limiter
	format *core.HeaderFormat
	names  [core.NumHeaderFields]string
}

func newMiddlewareCeiling(tb testing.TB) *middlewareCeiling {
	tb.Helper()
	// The format ours_gin and ours_nethttp use: the default one with the
	// names spelled as http.Header stores them.
	f, err := core.NewHeaderFormat(core.WithNameCase(core.NamesCanonical))
	if err != nil {
		tb.Fatal(err)
	}
	c := &middlewareCeiling{l: oursMiddlewareLimiter(tb), format: f}
	for h := range core.HeaderField(core.NumHeaderFields) {
		c.names[h] = h.Name(f)
	}
	return c
}

// allow decides the request of r and, when allowed, stores the header
// fields in h.
func (c *middlewareCeiling) allow(r *http.Request, h http.Header) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	req := core.Request{IP: host}
	var d core.Decision
	if err := c.l.Decide(r.Context(), &req, 1, &d); err != nil || !d.Allowed {
		return false
	}
	c.format.SetHeader(h, &c.names, &d)
	return true
}

func (c *middlewareCeiling) gin(g *gin.Context) {
	if !c.allow(g.Request, g.Writer.Header()) {
		g.AbortWithStatus(http.StatusTooManyRequests)
		return
	}
	g.Next()
}

func (c *middlewareCeiling) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.allow(r, w.Header()) {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func benchFiber(b *testing.B) {
	ok := func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) }
	ours, err := fiberlimit.New(oursMiddlewareLimiter(b))
	if err != nil {
		b.Fatal(err)
	}
	// fiber's own limiter with its defaults (memory storage, keyed by
	// c.IP(), fixed window) but for Max and Expiration.
	theirs := fiberlimiter.New(fiberlimiter.Config{Max: int(roomy.n), Expiration: peerWindow})
	cases := []struct {
		name   string
		mw     fiber.Handler // nil for bare
		header string
	}{
		{"bare", nil, ""},
		{"ours_fiber", ours, "X-RateLimit-Remaining"},
		{"fiber_limiter", theirs, "X-RateLimit-Remaining"},
		{"ceiling_fiber", newFiberCeiling(b).handle, "X-RateLimit-Remaining"},
	}
	for _, mode := range mwModes {
		b.Run(mode.name, func(b *testing.B) {
			for _, c := range cases {
				b.Run("impl="+c.name, func(b *testing.B) {
					app := fiber.New(fiber.Config{DisableStartupMessage: true})
					if c.mw == nil {
						app.Get("/items/:id", ok)
					} else {
						app.Get("/items/:id", c.mw, ok)
					}
					h := app.Handler()
					ctx := fiberCtx()
					if got := fiberServe(h, ctx); got != fiber.StatusOK {
						b.Fatalf("status %d, want 200", got)
					}
					if c.header != "" && len(ctx.Response.Header.Peek(c.header)) == 0 {
						b.Fatalf("no %s field on an allowed response", c.header)
					}
					b.ReportAllocs()
					if !mode.parallel {
						for b.Loop() {
							if got := fiberServe(h, ctx); got != fiber.StatusOK {
								b.Fatalf("status %d, want 200", got)
							}
						}
						return
					}
					b.RunParallel(func(pb *testing.PB) {
						ctx := fiberCtx()
						for pb.Next() {
							if got := fiberServe(h, ctx); got != fiber.StatusOK {
								b.Errorf("status %d, want 200", got)
								return
							}
						}
					})
				})
			}
		})
	}
}

// fiberCeiling is middlewareCeiling for fiber: the decision of the same
// limiter as ours_fiber's, keyed by the peer's IPv4 address, and the same
// five header fields set in the same way (core.HeaderValues, then
// fasthttp's SetCanonical under the names fasthttp normalizes them to),
// with none of the middleware's other work. Its key is the text of the
// last peer it saw, kept with the address, so that keying a request from
// the same peer formats nothing and allocates nothing; its context is the
// fasthttp request itself, which is one, rather than the one fiber keeps
// among the request's user values.
type fiberCeiling struct {
	l      *core.Limiter
	format *core.HeaderFormat
	names  [core.NumHeaderFields][]byte
	peer   atomic.Pointer[fiberPeer]
}

// fiberPeer is an IPv4 peer's address and its text, the key of its bucket.
type fiberPeer struct {
	ip   [4]byte
	text string
}

func newFiberCeiling(tb testing.TB) *fiberCeiling {
	tb.Helper()
	// ours_fiber's format: flow's default, the names as specified, which
	// fasthttp normalizes.
	f, err := core.NewHeaderFormat()
	if err != nil {
		tb.Fatal(err)
	}
	c := &fiberCeiling{l: oursMiddlewareLimiter(tb), format: f}
	for h := range core.HeaderField(core.NumHeaderFields) {
		c.names[h] = []byte(textproto.CanonicalMIMEHeaderKey(h.Name(f)))
	}
	return c
}

// key returns the text of the request's IPv4 peer, false for another peer.
func (c *fiberCeiling) key(ctx *fasthttp.RequestCtx) (string, bool) {
	tcp, ok := ctx.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return "", false
	}
	ip := tcp.IP.To4()
	if ip == nil {
		return "", false
	}
	if p := c.peer.Load(); p != nil && p.ip == [4]byte(ip) {
		return p.text, true
	}
	p := &fiberPeer{ip: [4]byte(ip), text: ip.String()}
	c.peer.Store(p)
	return p.text, true
}

func (c *fiberCeiling) handle(fc *fiber.Ctx) error {
	ctx := fc.Context()
	host, ok := c.key(ctx)
	if !ok {
		return fc.SendStatus(fiber.StatusTooManyRequests)
	}
	req := core.Request{IP: host}
	var d core.Decision
	if err := c.l.Decide(ctx, &req, 1, &d); err != nil || !d.Allowed {
		return fc.SendStatus(fiber.StatusTooManyRequests)
	}
	var v core.HeaderValues
	v.Format(c.format, &d)
	h := &fc.Response().Header
	for i := range v.Len() {
		h.SetCanonical(c.names[v.Field(i)], v.Bytes(i))
	}
	return fc.Next()
}

// fiberCtx is GET /items/1 from the client address as fasthttp hands it to
// the app's handler, reused across iterations as fasthttp reuses a
// connection's RequestCtx.
func fiberCtx() *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.Header.SetMethod(fiber.MethodGet)
	req.SetRequestURI(mwPath)
	req.Header.SetHost("bench")
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(mwPeerIP), Port: 1234}, nil)
	return ctx
}

// fiberServe runs one request through h as fasthttp's server loop would: a
// fresh response and no user values from the last request.
func fiberServe(h fasthttp.RequestHandler, ctx *fasthttp.RequestCtx) int {
	ctx.Response.Reset()
	ctx.ResetUserValues()
	h(ctx)
	return ctx.Response.StatusCode()
}

// TestFiberCeilingFields checks that ceiling_fiber answers an allowed
// request with the header fields ours_fiber sets, named and valued alike,
// each on a limiter of its own: the same work, which its figures stand for.
func TestFiberCeilingFields(t *testing.T) {
	ours, err := fiberlimit.New(oursMiddlewareLimiter(t))
	if err != nil {
		t.Fatal(err)
	}
	fields := func(mw fiber.Handler) map[string]string {
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Get("/items/:id", mw, func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
		ctx := fiberCtx()
		if got := fiberServe(app.Handler(), ctx); got != fiber.StatusOK {
			t.Fatalf("status %d, want 200", got)
		}
		m := map[string]string{}
		ctx.Response.Header.VisitAll(func(k, v []byte) { m[string(k)] = string(v) })
		return m
	}
	want, got := fields(ours), fields(newFiberCeiling(t).handle)
	// The five of an allowed request (Retry-After is a denial's), and
	// the response's Content-Type.
	if len(want) != 6 {
		t.Fatalf("ours_fiber set %d fields (%v), want 6", len(want), want)
	}
	for k, v := range want {
		if k == "X-Ratelimit-Reset" {
			// A Unix time in seconds: the second may turn between the
			// two requests.
			w, err1 := strconv.ParseInt(v, 10, 64)
			g, err2 := strconv.ParseInt(got[k], 10, 64)
			if err1 != nil || err2 != nil || g < w || g > w+1 {
				t.Errorf("ceiling_fiber's %s = %q, want %q (ours_fiber's) or a second later", k, got[k], v)
			}
			continue
		}
		if got[k] != v {
			t.Errorf("ceiling_fiber's %s = %q, want %q (ours_fiber's)", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("ceiling_fiber sets %s, which ours_fiber does not", k)
		}
	}
}
