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

// muxView is the view of a request in front of a ServeMux. The route is
// the pattern the mux will match ("" when none does), which the view asks
// the mux for (http.ServeMux.Handler, a second match of the request's
// path) only when something reads it: the Engine does only for a policy
// that needs the route, and a key, plan or skip function may. Until the
// Engine is done with it, the request carries that pattern once asked
// for, so that a function of the request itself (WithKeyFunc) reads it in
// r.Pattern; the mux sets it again when it dispatches. The middleware
// takes views from muxViews.
type muxView struct {
	request
	mux      *http.ServeMux
	came     string // the request's Pattern before
	resolved bool   // r.Pattern is the mux's
}

var muxViews = sync.Pool{New: func() any { return new(muxView) }}

var _ flow.RouteReporter = (*muxView)(nil)

// resolve sets the request's Pattern to the one the mux will match.
func (v *muxView) resolve() {
	if !v.resolved {
		_, v.r.Pattern = v.mux.Handler(v.r)
		v.resolved = true
	}
}

// Route returns the route of the pattern the mux will match.
func (v *muxView) Route() string {
	v.resolve()
	return flow.MuxRoute(v.r.Pattern)
}

// RouteKnown reports true: the mux tells which route the request reaches.
func (*muxView) RouteKnown() bool { return true }

// Native returns the request, with the pattern the mux will match.
func (v *muxView) Native() *http.Request {
	v.resolve()
	return v.r
}

// done gives the request its Pattern back and empties the view.
func (v *muxView) done() {
	if v.resolved {
		v.r.Pattern = v.came
	}
	*v = muxView{}
}

// FullMethod returns "": this is HTTP.
func (v request) FullMethod() string { return "" }

// RemoteAddr returns the TCP peer, "ip:port".
func (v request) RemoteAddr() string { return v.r.RemoteAddr }

// Values returns the header's field values. The key functions of keyfuncs
// pass canonical names, which http.Header looks up without allocating.
func (v request) Values(name string) []string { return v.r.Header.Values(name) }

// Native returns the request, for key functions given with WithKeyFunc.
func (v request) Native() *http.Request { return v.r }
