package nethttp

import (
	"context"
	"net/http"

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

// muxRequest is the view of a request in front of a ServeMux, whose
// pattern the middleware asked the mux for: the route is known, and ""
// when no route matches.
type muxRequest struct{ request }

// RouteKnown reports true: the mux said which route the request reaches.
func (muxRequest) RouteKnown() bool { return true }

// FullMethod returns "": this is HTTP.
func (v request) FullMethod() string { return "" }

// RemoteAddr returns the TCP peer, "ip:port".
func (v request) RemoteAddr() string { return v.r.RemoteAddr }

// Values returns the header's field values. The key functions of keyfuncs
// pass canonical names, which http.Header looks up without allocating.
func (v request) Values(name string) []string { return v.r.Header.Values(name) }

// Native returns the request, for key functions given with WithKeyFunc.
func (v request) Native() *http.Request { return v.r }
