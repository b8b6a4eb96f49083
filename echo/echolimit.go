package echolimit

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
)

// errNoRequest is what the error handler gets for an echo.Context without
// an http.Request, which only a hand-made test context can be.
var errNoRequest = errors.New("echolimit: echo.Context has no Request")

// middleware is what the echo.MiddlewareFunc returned by New runs. It is
// immutable after New, but for its caches, and safe for concurrent use.
type middleware struct {
	engine  *flow.Engine
	deny    DenyHandler  // nil: the problem body
	onError ErrorHandler // nil: an *echo.HTTPError of the status
	views   sync.Pool    // *request
	routes  routeTables
}

// New returns Echo middleware that limits requests with limiter, for
// e.Use, e.Pre, a group (e.Group("/api", mw), g.Use(mw)) or a single route
// (e.GET("/search", h, mw)). It fails with an error wrapping
// core.ErrInvalidOption for a nil limiter, a nil or invalid option, an
// option of another adapter, a scope given two key functions, or an
// enabled rule of the limiter's policy whose scope has no key function.
// The returned function is safe for concurrent use.
//
// Install it once, e.Use(mw): Echo has matched the route before the
// middleware of e.Use runs, so the route (the endpoint scope's key, and
// what core.Rule.Routes select) is known there, in the shared form
// ("/items/{id}" for Echo's "/items/:id", group prefix included); limit a
// stricter route with a rule limited to it rather than a second
// middleware. Under e.Pre, before routing, the middleware asks Echo's
// router which route the request will reach (see the package
// documentation). A request passes the middleware once: installed again
// on a group or route, it lets the request through without charging it
// again; a second middleware over the same limiter fails the request with
// flow.ErrInstalledTwice (the error handler), for both would charge it,
// and so does a net/http one (nethttp, chilimit) around the Echo instance
// or inside it (echo.WrapHandler).
//
// For each request it derives the keys, plan and cost, asks the limiter
// (waiting out a shaping delay, until the request's context ends), and
// then:
//
//   - allowed: sets the rate-limit header fields (see
//     flow.WithHeadersOnAllow), replacing any set before, and returns
//     next(c);
//   - denied: sets the header fields, Retry-After and Cache-Control, and
//     answers 429 with an application/problem+json quota-exceeded body,
//     or 503 when the store failed and the limiter fails closed, and
//     returns nil (see WithDenyHandler); next is not called;
//   - skipped (flow.WithSkip): returns next(c), with no header fields;
//   - not decidable: returns the error handler's error, by default an
//     *echo.HTTPError of status 400 or 500 for Echo's HTTPErrorHandler
//     (see WithErrorHandler); next is not called.
func New(limiter *core.Limiter, opts ...Option) (echo.MiddlewareFunc, error) {
	// Names spelled as http.Header stores them, which spares a
	// canonicalization per field and response.
	canonical := flow.WithHeaderOptions(core.WithNameCase(core.NamesCanonical))
	e, err := flow.New(limiter, adapter, []flow.Option{canonical}, opts...)
	if err != nil {
		return nil, err
	}
	m := &middleware{engine: e}
	m.deny, m.onError = flow.Handlers[DenyHandler, ErrorHandler](e)
	m.views.New = func() any { return new(request) }
	e.MiddlewareMade()
	return m.wrap, nil
}

// wrap is the echo.MiddlewareFunc. Echo calls it for each request, as it
// applies the middleware of e.Use and of each route per request, so the
// handler it returns is one allocation per request.
func (m *middleware) wrap(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error { return m.handle(c, next) }
}

// handle limits one request.
func (m *middleware) handle(c echo.Context, next echo.HandlerFunc) error {
	var res flow.Result
	mark, _ := c.Get(flow.MarkName).(*flow.Mark)
	var ctxMark *flow.Mark
	r := c.Request()
	if r != nil {
		// A net/http handler over the limiter (nethttp around the Echo
		// instance) marks the request's context.
		ctxMark = m.engine.ContextMark(r.Context())
	}
	switch {
	case m.engine.Seen(mark, &res), m.engine.Seen(ctxMark, &res):
	case r == nil:
		res = flow.Result{Outcome: flow.Failed, Err: errNoRequest}
	default:
		v := m.views.Get().(*request)
		v.c, v.routes = c, &m.routes
		m.engine.Check(v, &res)
		*v = request{}
		m.views.Put(v)
		if res.Outcome == flow.Proceed || res.Outcome == flow.Skipped {
			c.Set(flow.MarkName, m.engine.Mark(mark))
			// And in the context, while a net/http handler over the
			// limiter exists, which next may call (echo.WrapHandler).
			if marked := m.engine.MarkContext(r, ctxMark); marked != r {
				c.SetRequest(marked)
			}
		}
	}
	resp := c.Response()
	switch res.Outcome {
	case flow.Proceed:
		m.engine.SetHTTPHeaders(resp.Header(), &res)
		return next(c)
	case flow.Skipped:
		return next(c)
	case flow.Denied, flow.Unavailable:
		m.engine.SetHTTPHeaders(resp.Header(), &res)
		status := res.Outcome.HTTPStatus()
		if m.deny != nil {
			pending(resp, status)
			d := res.Decision // the handler's own copy
			if err := m.deny(c, &d); err != nil {
				return err
			}
			return commit(resp)
		}
		resp.Header().Set(echo.HeaderContentType, flow.ContentTypeProblem)
		resp.WriteHeader(status)
		// A write error means the client is gone; there is nobody to tell.
		_ = m.engine.WriteProblem(resp, &res)
		return nil
	}
	// BadInput, Failed, ClientGone.
	status := res.Outcome.HTTPStatus()
	var ctxErr error
	if status == 0 {
		// The request's context ended: its error, not ours, goes back to
		// Echo. Its deadline may have passed before its timer fired, which
		// the engine counts as ended too: then it is the deadline's error.
		if ctxErr = c.Request().Context().Err(); ctxErr == nil {
			ctxErr = context.DeadlineExceeded
		}
	}
	switch {
	case m.onError != nil:
		if ctxErr != nil {
			return m.onError(c, res.Err)
		}
		pending(resp, status)
		if err := m.onError(c, res.Err); err != nil {
			return err
		}
		return commit(resp)
	case ctxErr != nil:
		return ctxErr
	}
	// For Echo's HTTPErrorHandler: the status text as the message, which
	// DefaultHTTPErrorHandler sends; Err only as the internal error, for
	// logs, since it may name keys, rules or a store address.
	return &echo.HTTPError{Code: status, Message: http.StatusText(status), Internal: res.Err}
}

// pending sets the status resp is written with unless a handler writes
// another (Response.Write sends resp.Status), so that a deny or error
// handler that writes only a body still answers 429, not Echo's 200.
func pending(resp *echo.Response, status int) {
	if !resp.Committed {
		resp.Status = status
	}
}

// commit writes resp's pending status with no body when the handler that
// returned nil wrote nothing: Echo sends nothing of resp.Status by itself.
func commit(resp *echo.Response) error {
	if !resp.Committed {
		resp.WriteHeader(resp.Status)
	}
	return nil
}
