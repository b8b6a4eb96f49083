package chilimit

import (
	"context"
	"net/http"
	"sync"

	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// request is the keyfuncs.Request view of an *http.Request whose route the
// middleware has resolved: the request's own copy, whose Pattern holds,
// while Check runs, chi's pattern of the route the request reaches (see
// Middleware.Handler), "" for none. A struct of one pointer is stored in an
// interface as the pointer itself, so making the view costs nothing: no
// copy, no allocation.
type request struct{ r *http.Request }

var (
	_ keyfuncs.Request                  = request{}
	_ flow.NativeRequest[*http.Request] = request{}
	_ flow.RouteReporter                = request{}
	_ flow.RouteReadReporter            = (*lazyView)(nil)
)

// Context returns the request's context.
func (v request) Context() context.Context { return v.r.Context() }

// Method returns the request's method.
func (v request) Method() string { return v.r.Method }

// Route returns the route in the form every adapter shares, without the
// method: chi's pattern with its mount prefixes and without regular
// expressions ("/api/items/{id}" for "/items/{id:[0-9]+}" in a router
// mounted at "/api"; see flow.BraceRoute), or "" when no route matches
// (chi's 404 and 405).
func (v request) Route() string { return flow.BraceRoute(v.r.Pattern) }

// RouteKnown reports true: the middleware resolved the route through chi.
func (request) RouteKnown() bool { return true }

// FullMethod returns "": this is HTTP.
func (request) FullMethod() string { return "" }

// RemoteAddr returns the TCP peer, "ip:port", as net/http reports it (or
// as a middleware before this one rewrote it: chi's middleware.RealIP
// does, from header fields any client can write; see keyfuncs.ClientIP for
// a client address that trusts only your proxies).
func (v request) RemoteAddr() string { return v.r.RemoteAddr }

// Values returns the header's field values. The key functions of keyfuncs
// pass canonical names, which http.Header looks up without allocating.
func (v request) Values(name string) []string { return v.r.Header.Values(name) }

// Native returns the request, for the functions given with WithKeyFunc,
// WithPlanFunc, WithCostFunc and WithSkipFunc.
func (v request) Native() *http.Request { return v.r }

// lazyView is the view of a request whose route the middleware resolves
// (see Middleware.Handler) when something first reads it (see
// flow.RouteOnRead). Where the route cannot be told (outside chi) Route is
// "" and RouteKnown false, so that a rule that needs the route, or a
// function that reads it, fails the request with flow.ErrRouteUnknown
// rather than silently not applying.
// The middleware takes views from views.
type lazyView struct {
	request
	flow.RouteOnRead
}

var views = sync.Pool{New: func() any { return new(lazyView) }}

// Route returns the route, resolved when first asked for.
func (v *lazyView) Route() string { return flow.BraceRoute(v.RoutePattern()) }

// RouteKnown reports whether the middleware can tell the route.
func (v *lazyView) RouteKnown() bool {
	_, known := v.Pattern()
	return known
}

// SetRequest makes v the view of r (nil: of none), for flow.CheckOnRead.
func (v *lazyView) SetRequest(r *http.Request) { v.request = request{r} }

var _ flow.OnReadView = (*lazyView)(nil)

// Native returns the request, with chi's pattern of its route in Pattern.
func (v *lazyView) Native() *http.Request { return v.Request() }
