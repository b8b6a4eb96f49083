package ginlimit

import (
	"errors"
	"net/http"
	"sync"
	"unsafe"

	"github.com/gin-gonic/gin"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
)

// markKey is the key a request's *flow.Mark is kept under in c.Keys, which
// gin keys by any comparable value: a pointer, which no other package can
// name to set or delete, and whose hash costs less than that of text (as
// flow.MarkName, a 40-byte string, would be) or of a struct.
var markKey = new(markKeyType)

// markKeyType is markKey's type. It is not empty, so that markKey is a
// pointer no other value shares (pointers to empty values may be equal).
type markKeyType struct{ _ byte }

// errNoRequest is what the error handler gets for a gin.Context without an
// http.Request, which only a hand-made test context can be.
var errNoRequest = errors.New("ginlimit: gin.Context has no Request")

// middleware is what the gin.HandlerFunc returned by New runs. It is
// immutable after New and safe for concurrent use.
type middleware struct {
	engine  *flow.Engine
	deny    DenyHandler  // nil: the problem body
	onError ErrorHandler // nil: record, status text
	// keys holds maps of one entry, the Mark of a request only this
	// middleware has checked, ready to become a request's c.Keys.
	keys sync.Pool
	self *flow.Mark // the Mark of a request only this middleware checked
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
// after clearing c.Keys, which held the record of the first pass: the
// request is charged twice. What gin keeps across HandleContext, the
// request, could carry the record only in a copy of c.Request with a new
// context, two allocations on every request of every app, for the
// middleware cannot tell an app that calls HandleContext from one that
// does not. Serve the fallback without going through the engine again
// (c.File), or exempt the second pass, marking the request before the
// call:
//
//	type redirected struct{}
//	rl, err := ginlimit.New(limiter, ginlimit.WithSkipFunc(func(c *gin.Context) bool {
//		return c.Request.Context().Value(redirected{}) != nil
//	}))
//	router.NoRoute(func(c *gin.Context) {
//		c.Request.URL.Path = "/index.html"
//		c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), redirected{}, true))
//		router.HandleContext(c)
//	})
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
	m := &middleware{engine: e}
	m.deny, m.onError = flow.Handlers[DenyHandler, ErrorHandler](e)
	m.self = e.Mark(nil)
	m.keys.New = func() any { return map[any]any{markKey: m.self} }
	e.MiddlewareMade()
	return m.handle, nil
}

// handle limits one request.
func (m *middleware) handle(c *gin.Context) {
	var res flow.Result
	var mark, ctxMark *flow.Mark
	if c.Keys != nil {
		prev, _ := c.Get(markKey)
		mark, _ = prev.(*flow.Mark)
	}
	if c.Request != nil {
		// A net/http handler over the limiter (nethttp around the engine)
		// marks the request's context.
		ctxMark = m.engine.ContextMark(c.Request.Context())
	}
	// Seen is false for a nil Mark, the common case, asked here without
	// the calls.
	seen := mark != nil && m.engine.Seen(mark, &res) || ctxMark != nil && m.engine.Seen(ctxMark, &res)
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
		m.next(c, mark, ctxMark) // never seen: Seen's outcomes are Skipped and Failed
	case flow.Skipped:
		if seen {
			c.Next() // the Mark records this middleware already
			return
		}
		m.next(c, mark, ctxMark)
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

// next runs the rest of the chain on a request that goes on and that
// this middleware's Mark does not record yet, with its Mark recording this
// middleware, so that a middleware over the same limiter further down the
// chain does not charge it again; and, while a net/http handler exists
// over the limiter, which the chain may call (gin.WrapH), with the mark in
// the request's context too (flow.Engine.MarkContext), whose Mark was
// ctxMark.
//
// A request with no c.Keys yet gets a map from the pool that holds only
// the Mark, rather than the map c.Set would make (two allocations per
// request). The chain runs inside c.Next, so once it returns no handler
// after this one needs the Mark: if c.Keys is still that map and it holds
// only the Mark, it goes back to the pool, and c.Keys back to nil, as it
// was. A map a handler added keys to stays with the request, as c.Set's
// would, and so does one that a handler put in c.Keys in its place
// (engine.HandleContext clears c.Keys, and a second pass may leave its own
// map there).
func (m *middleware) next(c *gin.Context, prev, ctxMark *flow.Mark) {
	c.Request = m.engine.MarkContext(c.Request, ctxMark)
	if c.Keys != nil {
		c.Set(markKey, m.engine.Mark(prev))
		c.Next()
		return
	}
	keys := m.keys.Get().(map[any]any)
	c.Keys = keys
	c.Next()
	// The cheap tests first, the lookup, which hashes an interface key,
	// last. Ranging over the one entry instead would cost more: setting
	// up a map iterator outweighs the hash.
	if len(keys) != 1 || !sameMap(c.Keys, keys) {
		return
	}
	mk, ok := keys[markKey]
	if !ok {
		return // a handler deleted the Mark and set another key
	}
	c.Keys = nil
	// A middleware further down, over another limiter, may have replaced
	// the Mark with one that records both.
	if mk != any(m.self) {
		keys[markKey] = m.self
	}
	m.keys.Put(keys)
}

// sameMap reports whether a and b are the same map. A map value is one
// pointer, to the runtime's map (the pointer reflect.Value.UnsafePointer
// returns for a map); comparing those directly spares the two reflect
// calls per request. TestMarkMapReuse fails if it answers wrongly either
// way.
func sameMap(a, b map[any]any) bool {
	return *(*unsafe.Pointer)(unsafe.Pointer(&a)) == *(*unsafe.Pointer)(unsafe.Pointer(&b))
}
