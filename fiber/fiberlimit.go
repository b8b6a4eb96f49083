package fiberlimit

import (
	"errors"
	"net/http"
	"sync"

	"github.com/gofiber/fiber/v2"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// middleware is what the fiber.Handler returned by New runs. It is
// immutable after New and safe for concurrent use.
type middleware struct {
	flow    *keyfuncs.Middleware
	deny    func(*fiber.Ctx, *core.Decision) error // nil: the problem body
	onError func(*fiber.Ctx, error) error          // nil: the status text
	bodies  sync.Pool                              // *[]byte, for problem bodies
}

// New returns fiber middleware that limits requests with limiter. It fails
// with an error wrapping core.ErrInvalidOption for a nil limiter, a nil or
// invalid option, a scope given two key functions, or an enabled rule of
// the limiter's policy whose scope has no key function. The returned
// handler is safe for concurrent use; each run of it on a request takes
// tokens, so install it once on any one chain.
//
// Install it on each route, app.Get("/items/:id", mw, handler), or on the
// routes of a group, api.Get("/items/:id", mw, handler), so that the
// endpoint scope is keyed by the route's template. It also works with
// app.Use(mw) and app.Group("/api", mw), but there it runs before fiber has
// matched the final route (fiber's c.Route() is then the Use route, "/" or
// the group's prefix), so Route() is "" and the endpoint tiers do not
// apply; every other tier does, to every request the Use route sees,
// including those that end in fiber's 404.
//
// For each request it derives the keys, plan and cost, asks the limiter
// (waiting out a shaping delay, until c.UserContext() ends), and then:
//
//   - allowed: sets the rate-limit header fields (see WithHeadersOnAllow),
//     replacing any set before, and returns c.Next();
//   - denied: sets the header fields, Retry-After and Cache-Control, and
//     answers 429 with an application/problem+json quota-exceeded body, or
//     503 when the store failed and the limiter fails closed (see
//     WithDenyHandler); the next handler is not called;
//   - skipped (WithSkip): returns c.Next(), with no header fields;
//   - not decidable: calls the error handler (see WithErrorHandler); the
//     next handler is not called.
func New(limiter *core.Limiter, opts ...Option) (fiber.Handler, error) {
	var cfg config
	for i, o := range opts {
		if o == nil {
			cfg.fail("option %d is nil", i)
			continue
		}
		o.apply(&cfg)
	}
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	flow, err := keyfuncs.NewMiddleware(limiter, cfg.shared...)
	if err != nil {
		return nil, err
	}
	m := &middleware{flow: flow, deny: cfg.deny, onError: cfg.onError}
	m.bodies.New = func() any {
		b := make([]byte, 0, 512)
		return &b
	}
	return m.handle, nil
}

// handle limits one request.
func (m *middleware) handle(c *fiber.Ctx) error {
	res := m.flow.Check(request{c})
	switch {
	case res.Err != nil:
		return m.fail(c, res.Err)
	case !res.Proceed:
		return m.reject(c, &res)
	}
	m.setHeaders(c, &res)
	return c.Next()
}

// setHeaders sets res's rate-limit header fields on the response with
// c.Set, replacing earlier values. fasthttp copies names and values into
// the response's own buffers, which it reuses from request to request: no
// allocation beyond the values core.HeaderFormat builds.
func (m *middleware) setHeaders(c *fiber.Ctx, res *keyfuncs.Result) {
	m.flow.Headers(res, c.Set)
}

// maxPooledBody is the largest problem-body buffer kept for reuse.
const maxPooledBody = 16 << 10

// reject answers a request that may not proceed.
func (m *middleware) reject(c *fiber.Ctx, res *keyfuncs.Result) error {
	m.setHeaders(c, res)
	if m.deny != nil {
		// The pending status, so that a handler that writes only a body,
		// or nothing, still answers 429 (or 503), not fiber's default 200.
		c.Status(m.flow.Format().Status(&res.Decision))
		d := res.Decision // the handler's own copy
		return m.deny(c, &d)
	}
	bp := m.bodies.Get().(*[]byte)
	status, ctype, body := m.flow.Denial((*bp)[:0], res)
	resp := c.Response()
	resp.SetStatusCode(status)
	resp.Header.SetContentType(ctype)
	// SetBody copies (fiber's c.Send would keep the slice, which goes back
	// to the pool).
	resp.SetBody(body)
	if cap(body) <= maxPooledBody {
		*bp = body[:0]
		m.bodies.Put(bp)
	}
	return nil
}

// fail answers a request that could not be decided.
func (m *middleware) fail(c *fiber.Ctx, err error) error {
	status := m.flow.ErrorStatus(err)
	var ctxErr error
	if status == 0 {
		// The request's context ended. fasthttp does not cancel requests
		// when the client goes, so this is a deadline or cancellation of
		// the app's own UserContext: its error, not ours, goes back to
		// fiber (fiber's timeout middleware turns DeadlineExceeded into
		// 408). If that context has not ended, it did not cause err (a
		// store error that wraps context.Canceled): a server error.
		if ctxErr = c.UserContext().Err(); ctxErr == nil {
			status = fiber.StatusInternalServerError
		}
	}
	if m.onError != nil {
		if ctxErr == nil {
			c.Status(status) // pending, as in reject
		}
		return m.onError(c, err)
	}
	if ctxErr != nil {
		return ctxErr
	}
	// The status text only: err may name keys, rules or a store address.
	resp := c.Response()
	resp.SetStatusCode(status)
	resp.Header.SetContentType(fiber.MIMETextPlainCharsetUTF8)
	resp.SetBodyString(http.StatusText(status))
	return nil
}
