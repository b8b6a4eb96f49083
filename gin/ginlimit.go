package ginlimit

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
)

// errNoRequest is what the error handler gets for a gin.Context without an
// http.Request, which only a hand-made test context can be.
var errNoRequest = errors.New("ginlimit: gin.Context has no Request")

// middleware is what the gin.HandlerFunc returned by New runs. It is
// safe for concurrent use; but for passes, it does not change after New.
type middleware struct {
	engine   *flow.Engine
	deny     DenyHandler  // nil: the problem body
	onError  ErrorHandler // nil: record, status text
	passes   *passes      // the requests it has let through, in progress
	siblings *siblings    // the gin middlewares over its limiter, itself included
}

// New returns gin middleware that limits requests with limiter, for
// engine.Use, RouterGroup.Use or a single route (r.GET("/search", mw, h)).
// It fails with an error wrapping core.ErrInvalidOption for a nil limiter, a
// nil or invalid option, an option of another adapter, a scope given two
// key functions, or an enabled rule of the limiter's policy whose scope has
// no key function. The returned handler is safe for concurrent use.
//
// Install it once, engine.Use(mw): gin has matched the route before the
// engine's middleware runs, so the route (the endpoint scope's key, and
// what core.Rule.Routes select) is known there, in the shared form
// ("/items/{id}" for gin's "/items/:id", group prefix included); limit a
// stricter route with a rule limited to it rather than a second
// middleware. A request passes the middleware once: installed again on a
// group or route, it lets the request through without charging it
// again; a second middleware over the same limiter fails the request with
// flow.ErrInstalledTwice (the error handler), for both would charge it,
// and so does a net/http one (nethttp, chilimit) around the engine or
// inside it (gin.WrapH): while one exists over the limiter, the request's
// context records the pass as well, in a copy of c.Request (two
// allocations per request).
//
// engine.HandleContext, an internal redirect (a single-page app's fallback
// in NoRoute), runs the engine's middleware again on the same request,
// whose chain is still running: that pass lets it through uncharged, as a
// second installation does, so the request is charged once, under the
// route gin matched first (none, for NoRoute). The middleware records the
// requests it has let through by their gin.Context while their chain
// runs, not in c.Keys, which it leaves as the handlers set it.
//
// For each request it derives the keys, plan and cost, asks the limiter
// (waiting out a shaping delay, until the request's context ends), and
// then:
//
//   - allowed: sets the rate-limit header fields (see
//     flow.WithHeadersOnAllow), replacing any set before, and calls c.Next;
//   - denied: aborts the chain, sets the header fields, Retry-After and
//     Cache-Control, and answers 429 with an application/problem+json
//     quota-exceeded body, or 503 when the store failed and the limiter
//     fails closed (see WithDenyHandler);
//   - skipped (flow.WithSkip): calls c.Next, with no header fields;
//   - not decidable: aborts the chain and calls the error handler (see
//     WithErrorHandler).
func New(limiter *core.Limiter, opts ...Option) (gin.HandlerFunc, error) {
	// Names spelled as http.Header stores them, which spares a
	// canonicalization per field and response.
	canonical := flow.WithHeaderOptions(core.WithNameCase(core.NamesCanonical))
	e, err := flow.New(limiter, adapter, []flow.Option{canonical}, opts...)
	if err != nil {
		return nil, err
	}
	m := &middleware{engine: e, passes: newPasses()}
	m.deny, m.onError = flow.Handlers[DenyHandler, ErrorHandler](e)
	m.siblings = join(limiter, m)
	e.MiddlewareMade()
	return m.handle, nil
}

// handle limits one request.
func (m *middleware) handle(c *gin.Context) {
	var res flow.Result
	var ctxMark *flow.Mark
	if c.Request != nil {
		// A net/http handler over the limiter (nethttp around the engine)
		// marks the request's context.
		ctxMark = m.engine.ContextMark(c.Request.Context())
	}
	// The context's Mark is asked about only when there is one, which
	// takes a net/http handler over the limiter.
	seen := m.seen(c, &res) || ctxMark != nil && m.engine.Seen(ctxMark, &res)
	switch {
	case seen:
	case c.Request == nil:
		res = flow.Result{Outcome: flow.Failed, Err: errNoRequest}
	default:
		m.engine.Check(request{c}, &res)
	}
	switch res.Outcome {
	case flow.Proceed:
		m.engine.SetHTTPHeaders(c.Writer.Header(), &res)
		m.next(c, ctxMark) // never seen: Seen's outcomes are Skipped and Failed
	case flow.Skipped:
		if seen {
			c.Next() // let through by this middleware already
			return
		}
		m.next(c, ctxMark)
	case flow.Denied, flow.Unavailable:
		c.Abort()
		m.engine.SetHTTPHeaders(c.Writer.Header(), &res)
		// The pending status, so that a deny handler that writes only a
		// body, or nothing, still answers 429 (or 503), not gin's 200.
		c.Status(res.Outcome.HTTPStatus())
		if m.deny != nil {
			d := res.Decision // the handler's own copy
			m.deny(c, &d)
			return
		}
		c.Header("Content-Type", flow.ContentTypeProblem)
		// A write error means the client is gone; there is nobody to tell.
		_ = m.engine.WriteProblem(c.Writer, &res)
	default: // BadInput, Failed, ClientGone
		c.Abort()
		status := res.Outcome.HTTPStatus() // 0 for ClientGone
		if m.onError != nil {
			if status != 0 {
				c.Status(status) // pending, as for denials
			}
			m.onError(c, res.Err)
			return
		}
		_ = c.Error(res.Err) // for gin's Logger and the service's error middleware
		if status != 0 {
			// The status text only: Err may name keys, rules or a store
			// address.
			http.Error(c.Writer, http.StatusText(status), status)
		}
	}
}

// seen reports whether a gin middleware over m's limiter has let c
// through, its chain still running, and if so sets res as
// flow.Engine.SeenBy does: Skipped when m did, Failed when another did.
func (m *middleware) seen(c *gin.Context, res *flow.Result) bool {
	if m.passes.has(c) {
		return m.engine.SeenBy(m.engine, res)
	}
	list := *m.siblings.list.Load()
	if len(list) == 1 {
		return false // m alone, which lives while it runs
	}
	for _, w := range list {
		if o := w.Value(); o != nil && o != m && o.passes.has(c) {
			return m.engine.SeenBy(o.engine, res)
		}
	}
	return false
}

// next runs the rest of the chain on a request that goes on and that m
// has not let through before, recording it in m.passes while the chain
// runs, so that a gin middleware over the same limiter further down does
// not charge it again; and, while a net/http handler exists over the
// limiter, which the chain may call (gin.WrapH), with the mark in the
// request's context too (flow.Engine.MarkContext), whose Mark was
// ctxMark. The record goes when the chain returns or panics: the
// gin.Context goes back to gin's pool after, for another request.
func (m *middleware) next(c *gin.Context, ctxMark *flow.Mark) {
	c.Request = m.engine.MarkContext(c.Request, ctxMark)
	at := m.passes.add(c)
	defer m.passes.remove(c, at)
	c.Next()
}
