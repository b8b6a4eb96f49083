package nethttp

import (
	"context"
	"net/http"
	"sync"

	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// request is the keyfuncs.Request view of an *http.Request. A struct of one
// pointer is stored in an interface as the pointer itself, so making the
// view costs nothing: no copy, no allocation.
type request struct{ r *http.Request }

var (
	_ keyfuncs.Request   = request{}
	_ flow.RouteReporter = request{}
)

// Context returns the request's context.
func (v request) Context() context.Context { return v.r.Context() }

// Method returns the request's method.
func (v request) Method() string { return v.r.Method }

// Route returns the route of the http.ServeMux pattern that matched,
// without its method ("/items/{id}" for "GET /items/{id}"), which the mux
// sets before calling the route's handler, or "" when the middleware runs
// outside a ServeMux route.
func (v request) Route() string { return flow.MuxRoute(v.r.Pattern) }

// RouteKnown reports whether a ServeMux has matched the request: outside
// one, the route is unknown.
func (v request) RouteKnown() bool { return v.r.Pattern != "" }

// muxView is the view of a request in front of a ServeMux, whose route is
// the pattern the mux will match ("" when none does), asked of the mux
// (http.ServeMux.Handler, a second match of the path) only when something
// reads it (see flow.RouteOnRead); and of a request outside a ServeMux
// route, whose route cannot be told, so that a function that reads it
// fails the request (see flow.RouteReadReporter). The middleware takes
// views from muxViews.
type muxView struct {
	request
	flow.RouteOnRead
}

var muxViews = sync.Pool{New: func() any { return new(muxView) }}

var _ flow.RouteReadReporter = (*muxView)(nil)

// Route returns the route of the pattern the mux will match.
func (v *muxView) Route() string { return flow.MuxRoute(v.RoutePattern()) }

// RouteKnown reports whether the route can be told: around a ServeMux, the
// mux tells which route the request reaches; outside one, it cannot be
// told.
func (v *muxView) RouteKnown() bool {
	_, known := v.Pattern()
	return known
}

// SetRequest makes v the view of r (nil: of none), for flow.CheckOnRead.
func (v *muxView) SetRequest(r *http.Request) { v.request = request{r} }

var _ flow.OnReadView = (*muxView)(nil)

// Native returns the request, with the pattern the mux will match.
func (v *muxView) Native() *http.Request { return v.Request() }

// FullMethod returns "": this is HTTP.
func (v request) FullMethod() string { return "" }

// RemoteAddr returns the TCP peer, "ip:port".
func (v request) RemoteAddr() string { return v.r.RemoteAddr }

// Values returns the header's field values. The key functions of keyfuncs
// pass canonical names, which http.Header looks up without allocating.
func (v request) Values(name string) []string { return v.r.Header.Values(name) }

// Native returns the request, for key functions given with WithKeyFunc.
func (v request) Native() *http.Request { return v.r }
