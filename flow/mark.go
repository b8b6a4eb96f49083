package flow

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/bucketry/ratelimit/core"
)

// Mark records which middlewares have checked a request, so that one that
// runs again on the same request (installed at two levels: the router and
// a group or route) does not charge it twice. Adapters keep it on the
// request (a context value; fiber's user values and Echo's c.Set under
// MarkName) and ask Seen before Check; gin's records the requests each of
// its middlewares let through instead, and asks SeenBy. A Mark is
// immutable; the zero value and nil record no middleware.
type Mark struct{ engines []*Engine }

// MarkName is the name adapters keep a request's *Mark under, in
// frameworks that store values by name (fiber, Echo).
const MarkName = "github.com/bucketry/ratelimit/flow.Mark"

type markKey struct{}

// MarkFrom returns the Mark kept in ctx by WithMark, or nil.
func MarkFrom(ctx context.Context) *Mark {
	m, _ := ctx.Value(markKey{}).(*Mark)
	return m
}

// WithMark returns a copy of ctx that keeps m.
func WithMark(ctx context.Context, m *Mark) context.Context {
	return context.WithValue(ctx, markKey{}, m)
}

// Seen reports whether a request whose Mark is m was already checked by a
// middleware over e's limiter, and if so sets res to the Result to act on
// instead of calling Check: Skipped when e itself checked it (the request
// goes on, charged once), and Failed with an error wrapping
// ErrInstalledTwice when another middleware over the same limiter did
// (each would charge the tiers they share). It leaves res alone otherwise.
func (e *Engine) Seen(m *Mark, res *Result) bool {
	if m == nil {
		return false
	}
	for _, o := range m.engines {
		if o == e {
			return e.SeenBy(o, res)
		}
	}
	for _, o := range m.engines {
		if e.SeenBy(o, res) {
			return true
		}
	}
	return false
}

// SeenBy is Seen for an adapter that records which of its middlewares a
// request has passed rather than keep a Mark (gin): it reports whether a
// request that o checked before e needs no Check by e, setting res as
// Seen does: Skipped when o is e, Failed with an error wrapping
// ErrInstalledTwice when o is another middleware over e's limiter. It
// leaves res alone and reports false for a middleware over another
// limiter, or a nil o.
func (e *Engine) SeenBy(o *Engine, res *Result) bool {
	switch {
	case o == e:
		*res = Result{Outcome: Skipped}
		return true
	case o != nil && o.limiter == e.limiter:
		*res = Result{Outcome: Failed, Err: fmt.Errorf("%w: a %s middleware and a %s middleware over the same limiter checked this request, each charging its tiers: install one, at the router level, and limit stricter tiers to routes with core.Rule.Routes", ErrInstalledTwice, o.adapter, e.adapter)}
		return true
	}
	return false
}

// Mark returns the Mark of a request whose Mark was m once e has checked
// it. It allocates only when m already records another middleware.
func (e *Engine) Mark(m *Mark) *Mark {
	if m == nil || len(m.engines) == 0 {
		return e.self
	}
	engines := make([]*Engine, len(m.engines)+1)
	copy(engines, m.engines)
	engines[len(m.engines)] = e
	return &Mark{engines: engines}
}

// marks counts, per limiter, the middlewares made over it, by where they
// keep a request's Mark: a request can meet a second one over the same
// limiter only if there is one. The limiter is held weakly, and its entry
// dropped when it is collected.
var marks sync.Map // weak.Pointer[core.Limiter] -> *markCounts

// markCounts is one limiter's count of middlewares.
type markCounts struct {
	// ctx counts the handlers that keep the Mark in the request's context
	// (net/http's: nethttp, chilimit; see HandlerMade).
	ctx atomic.Int64
	// native counts the middlewares that keep it on the framework's own
	// request (gin's record, Echo's c.Set, fiber's c.Locals) and read the
	// context's too (see MiddlewareMade).
	native atomic.Int64
	// shared holds what adapters keep per limiter (see Shared).
	shared sync.Map
}

// Shared returns the value an adapter keeps under key for limiter, shared
// by all its middlewares over that limiter, which newValue makes when
// there is none yet (a nil newValue makes none: Shared returns nil). The
// value goes when the limiter is collected. key must be comparable, and of
// a type of the adapter's own, so that adapters never share a value. gin
// keeps its middlewares over the limiter there, to find a request another
// one has let through.
func Shared(limiter *core.Limiter, key any, newValue func() any) any {
	c := markCountsOf(limiter)
	if v, ok := c.shared.Load(key); ok || newValue == nil {
		return v
	}
	v, _ := c.shared.LoadOrStore(key, newValue())
	return v
}

// markCountsOf returns limiter's counts.
func markCountsOf(limiter *core.Limiter) *markCounts {
	wp := weak.Make(limiter)
	if c, ok := marks.Load(wp); ok {
		return c.(*markCounts)
	}
	c, loaded := marks.LoadOrStore(wp, new(markCounts))
	if !loaded {
		runtime.AddCleanup(limiter, func(wp weak.Pointer[core.Limiter]) { marks.Delete(wp) }, wp)
	}
	return c.(*markCounts)
}

// HandlerMade records that an adapter made one more handler over e's
// limiter that keeps a request's Mark in its context (a net/http
// handler): adapters call it once per handler they return, so that
// MarkRequest knows whether a request may meet a second middleware, and
// ContextMark whether one may have marked it.
func (e *Engine) HandlerMade() { e.marks.ctx.Add(1) }

// MiddlewareMade records that an adapter made one more middleware over e's
// limiter that keeps a request's Mark on the framework's own request (gin,
// Echo, fiber) and reads the one in the request's context too
// (ContextMark): adapters call it once per middleware, so that the
// net/http handlers over the limiter mark the requests they pass on
// (MarkRequest), which such an app may be behind.
func (e *Engine) MiddlewareMade() { e.marks.native.Add(1) }

// MarkRequest returns the request the handlers after e get, for r, whose
// Mark was prev, once e has checked it. While another middleware exists
// over e's limiter, of this adapter or another (see HandlerMade and
// MiddlewareMade), it is a copy of r whose context records e. With none,
// no handler after e can charge e's tiers again, and it is r itself: the
// copy is a request and a context allocated per request, more than half
// of what the middleware would allocate otherwise.
func (e *Engine) MarkRequest(r *http.Request, prev *Mark) *http.Request {
	if e.marks.ctx.Load()+e.marks.native.Load() <= 1 {
		return r
	}
	return r.WithContext(WithMark(r.Context(), e.Mark(prev)))
}

// ContextMark returns the Mark that a handler over e's limiter which keeps
// it in the request's context (see HandlerMade) left in ctx, for a
// middleware that keeps its own elsewhere: the request may have passed
// such a handler first (nethttp around a gin engine). It is nil, and ctx
// is not searched, while no such handler exists.
func (e *Engine) ContextMark(ctx context.Context) *Mark {
	if e.marks.ctx.Load() == 0 {
		return nil
	}
	return markFrom(ctx)
}

// markFrom is MarkFrom, not inlined, so that ContextMark's common case,
// no such handler, is inlined into the middleware.
//
//go:noinline
func markFrom(ctx context.Context) *Mark { return MarkFrom(ctx) }

// MarkContext returns, for a middleware that keeps a request's Mark on the
// framework's own request, the *http.Request the handlers after e get, for
// r, whose context Mark was prev (ContextMark), once e has checked it:
// while a handler that keeps the Mark in the request's context exists over
// e's limiter, which a handler after e may be (a net/http handler in a gin
// or Echo app: gin.WrapH, echo.WrapHandler), a copy of r whose context
// records e; otherwise r itself, with no allocation.
func (e *Engine) MarkContext(r *http.Request, prev *Mark) *http.Request {
	if e.marks.ctx.Load() == 0 {
		return r // inlined into the middleware, as ContextMark's is
	}
	return e.markContext(r, prev)
}

// markContext is MarkContext's copy of r whose context records e.
func (e *Engine) markContext(r *http.Request, prev *Mark) *http.Request {
	return r.WithContext(WithMark(r.Context(), e.Mark(prev)))
}
