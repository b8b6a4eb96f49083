package fiberlimit

import (
	"context"
	"net/http"
	"net/textproto"
	"sync"

	"github.com/gofiber/fiber/v2"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
)

// usePool holds the views of requests in Use routes.
var usePool = sync.Pool{New: func() any { return new(useView) }}

// middleware is what the fiber.Handler returned by New runs. It is
// immutable after New and safe for concurrent use.
type middleware struct {
	engine  *flow.Engine
	deny    DenyHandler  // nil: the problem body
	onError ErrorHandler // nil: the status text
	// The fields' names as fasthttp stores them: normalized (the first
	// letter and each after a '-' upper case, the others lower case), or
	// as the format spells them, for an app with DisableHeaderNormalizing.
	normalized, asIs [core.NumHeaderFields][]byte
}

// New returns fiber middleware that limits requests with limiter. It fails
// with an error wrapping core.ErrInvalidOption for a nil limiter, a nil or
// invalid option, an option of another adapter, a scope given two key
// functions, or an enabled rule of the limiter's policy whose scope has no
// key function. The returned handler is safe for concurrent use; each run
// of it on a request takes tokens, so install it once on any one chain.
//
// Install it once, app.Use(mw): in a Use route it finds the route the
// request will reach as fiber does (the first route after it in the stack
// of the request's method whose path matches, under the app's
// CaseSensitive and StrictRouting), for routes of plain syntax: static
// segments, whole-segment parameters (":id") and a final "*" or "+". The
// route, in the shared form ("/items/{id}"), keys the endpoint scope with
// the method and selects the rules limited to routes (core.Rule.Routes).
// If a route of another syntax (an optional parameter, a constraint, a
// parameter within a segment) comes first, the route is unknown, and a
// request that a route-scoped or endpoint rule could apply to, or whose
// key, plan, cost or skip function reads the route, fails with
// flow.ErrRouteUnknown rather than skipping the tier: install the
// middleware on such routes themselves, app.Get("/items/:id<int>", mw, h),
// where fiber has matched the route. The same middleware installed twice
// on a request's way charges it once; a second middleware over the same
// limiter fails it with flow.ErrInstalledTwice, a net/http one before it
// (adaptor.HTTPMiddleware) too.
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
	for h := range core.HeaderField(core.NumHeaderFields) {
		name := h.Name(e.Format())
		m.asIs[h] = []byte(name)
		// fasthttp's normalization is textproto's canonical form for the
		// token characters header names are made of.
		m.normalized[h] = []byte(textproto.CanonicalMIMEHeaderKey(name))
	}
	userContextOnce.Do(checkUserContextKey)
	e.MiddlewareMade()
	return m.handle, nil
}

// handle limits one request. Header fields go out with
// ResponseHeader.SetCanonical, names already in the form fasthttp would
// give them and values formatted on the stack (core.HeaderValues): fasthttp
// copies both into the response's own buffers, which it reuses from
// request to request, so setting them allocates nothing.
func (m *middleware) handle(c *fiber.Ctx) error {
	// The Mark is one of c.Locals, which are the fasthttp request's user
	// values: read and set there, without Locals' variadic call.
	fctx := c.Context()
	mark, _ := fctx.UserValue(flow.MarkName).(*flow.Mark)
	var res flow.Result
	// A net/http handler over the limiter, in the app through fiber's
	// adaptor.HTTPMiddleware, marks its request's context, whose values
	// the adaptor copies into the fasthttp request's (c.Context()). Seen
	// of a nil Mark is false.
	again := mark != nil && m.engine.Seen(mark, &res)
	if !again {
		cm := m.engine.ContextMark(fctx)
		again = cm != nil && m.engine.Seen(cm, &res)
	}
	if !again {
		if rt := c.Route(); isUse(rt) {
			v := usePool.Get().(*useView)
			v.request, v.rt = request{c}, rt
			m.engine.Check(v, &res)
			*v = useView{}
			usePool.Put(v)
		} else {
			m.engine.Check(request{c}, &res)
		}
		if res.Outcome == flow.Proceed || res.Outcome == flow.Skipped {
			fctx.SetUserValue(flow.MarkName, m.engine.Mark(mark))
		}
	}
	switch res.Outcome {
	case flow.Proceed:
		m.setHeaders(c, &res)
		return c.Next()
	case flow.Skipped:
		return c.Next()
	case flow.Denied, flow.Unavailable:
		m.setHeaders(c, &res)
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
		// 408). Its deadline may have passed before its timer fired,
		// which the engine counts as ended too: then it is the deadline's
		// error.
		if ctxErr = c.UserContext().Err(); ctxErr == nil {
			ctxErr = context.DeadlineExceeded
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

// setHeaders sets res's rate-limit header fields on the response, as c.Set
// would: under the names fasthttp normalizes them to, unless the app's
// server leaves names as they are (DisableHeaderNormalizing), which is
// what it tells each request's headers too.
func (m *middleware) setHeaders(c *fiber.Ctx, res *flow.Result) {
	var v core.HeaderValues
	m.engine.HeaderValues(res, &v)
	if v.Len() == 0 {
		return
	}
	names := &m.normalized
	if srv := c.App().Server(); srv != nil && srv.DisableHeaderNamesNormalizing {
		names = &m.asIs
	}
	h := &c.Response().Header
	for i := range v.Len() {
		h.SetCanonical(names[v.Field(i)], v.Bytes(i))
	}
}
