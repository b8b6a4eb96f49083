package fiberlimit

import (
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
)

// middleware is what the fiber.Handler returned by New runs. It is
// immutable after New and safe for concurrent use.
type middleware struct {
	engine  *flow.Engine
	deny    DenyHandler  // nil: the problem body
	onError ErrorHandler // nil: the status text
}

// New returns fiber middleware that limits requests with limiter. It fails
// with an error wrapping core.ErrInvalidOption for a nil limiter, a nil or
// invalid option, an option of another adapter, a scope given two key
// functions, or an enabled rule of the limiter's policy whose scope has no
// key function. The returned handler is safe for concurrent use; each run
// of it on a request takes tokens, so install it once on any one chain.
//
// Install it on each route, app.Get("/items/:id", mw, handler), so that
// the endpoint scope is keyed by the route's template. Under app.Use(mw) or
// app.Group("/api", mw) it runs before fiber has matched the final route,
// and only the endpoint tiers do not apply (see the package documentation).
//
// For each request it derives the keys, plan and cost, asks the limiter
// (waiting out a shaping delay, until c.UserContext() ends), and then:
//
//   - allowed: sets the rate-limit header fields (see
//     flow.WithHeadersOnAllow), replacing any set before, and returns
//     c.Next();
//   - denied: sets the header fields, Retry-After and Cache-Control, and
//     answers 429 with an application/problem+json quota-exceeded body, or
//     503 when the store failed and the limiter fails closed (see
//     WithDenyHandler); the next handler is not called;
//   - skipped (flow.WithSkip): returns c.Next(), with no header fields;
//   - not decidable: calls the error handler (see WithErrorHandler); the
//     next handler is not called.
func New(limiter *core.Limiter, opts ...Option) (fiber.Handler, error) {
	// No default format: flow's, core.NewHeaderFormat(), names the fields
	// as specified, which fasthttp normalizes unless the app says not to.
	e, err := flow.New(limiter, adapter, nil, opts...)
	if err != nil {
		return nil, err
	}
	m := &middleware{engine: e}
	m.deny, m.onError = flow.Handlers[DenyHandler, ErrorHandler](e)
	return m.handle, nil
}

// handle limits one request. Header fields go out with c.Set: fasthttp
// copies names and values into the response's own buffers, which it reuses
// from request to request, so nothing is allocated beyond the values
// core.HeaderFormat builds.
func (m *middleware) handle(c *fiber.Ctx) error {
	res := m.engine.Check(request{c})
	switch res.Outcome {
	case flow.Proceed:
		m.engine.Headers(&res, c.Set)
		return c.Next()
	case flow.Skipped:
		return c.Next()
	case flow.Denied, flow.Unavailable:
		m.engine.Headers(&res, c.Set)
		// Set before a deny handler runs, so that one that writes only a
		// body, or nothing, still answers 429 (or 503), not fiber's 200.
		c.Status(res.Outcome.HTTPStatus())
		if m.deny != nil {
			d := res.Decision // the handler's own copy
			return m.deny(c, &d)
		}
		resp := c.Response()
		resp.Header.SetContentType(flow.ContentTypeProblem)
		resp.ResetBody() // replace whatever an earlier handler wrote
		// c.Write appends a copy and never fails (c.Send would keep the
		// slice, which goes back to WriteProblem's pool).
		return m.engine.WriteProblem(c, &res)
	}
	// BadInput, Failed, ClientGone.
	status := res.Outcome.HTTPStatus()
	var ctxErr error
	if status == 0 {
		// The request's context ended. fasthttp does not cancel requests
		// when the client goes, so this is a deadline or cancellation of
		// the app's own UserContext: its error, not ours, goes back to
		// fiber (fiber's timeout middleware turns DeadlineExceeded into
		// 408). If that context has not ended, it did not cause Err (a
		// store error that wraps context.Canceled): a server error.
		if ctxErr = c.UserContext().Err(); ctxErr == nil {
			status = fiber.StatusInternalServerError
		}
	}
	if ctxErr == nil {
		c.Status(status) // pending, as for denials
	}
	switch {
	case m.onError != nil:
		return m.onError(c, res.Err)
	case ctxErr != nil:
		return ctxErr
	}
	// The status text only: Err may name keys, rules or a store address.
	c.Response().Header.SetContentType(fiber.MIMETextPlainCharsetUTF8)
	return c.SendString(http.StatusText(status))
}
