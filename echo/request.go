package echolimit

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// request is the keyfuncs.Request view of an echo.Context. An
// echo.Context is an interface, two words, so a view holding one would
// be allocated for each request it is passed as a keyfuncs.Request;
// views come from the middleware's pool instead, and go back to it once
// Engine.Check returns. Key functions must not keep the view, nor the
// echo.Context, which Echo reuses for another request once the handlers
// return.
type request struct {
	c      echo.Context
	routes *routeTables // the middleware's, to tell Echo's 404 routes

	route       string // in the shared form, once resolved
	known       bool
	resolved    bool
	readUnknown bool // Route was read, and the route cannot be told
}

var (
	_ keyfuncs.Request                 = (*request)(nil)
	_ flow.NativeRequest[echo.Context] = (*request)(nil)
	_ flow.RouteReadReporter           = (*request)(nil)
)

// Context returns the context of the net/http request, the one that ends
// when the client goes away.
func (v *request) Context() context.Context { return v.c.Request().Context() }

// Method returns the request's method.
func (v *request) Method() string { return v.c.Request().Method }

// Route returns the template of the Echo route the request reaches, group
// prefix included, in the shared form ("/items/{id}" for Echo's
// "/items/:id", "/files/{*}" for "/files/*"; see flow.ColonRoute), without
// the method; or "" when it reaches no route: Echo's 404, a RouteNotFound
// route (among them the catch-alls Group.Use registers), its 405, or the
// answer it gives OPTIONS on a path with routes of other methods. After
// the router has matched (e.Use, a group, a route) it is read from
// c.Path(); before (e.Pre) the middleware asks the router, as
// resolveRoute says.
func (v *request) Route() string {
	v.resolve()
	v.readUnknown = v.readUnknown || !v.known
	return v.route
}

// RouteReadUnknown reports whether Route was read while the route cannot
// be told: the request then fails with flow.ErrRouteUnknown.
func (v *request) RouteReadUnknown() bool { return v.readUnknown }

// RouteKnown reports whether Route says which route the request reaches:
// false only for an echo.Context with no Echo instance to ask, which no
// Echo server makes.
func (v *request) RouteKnown() bool {
	v.resolve()
	return v.known
}

func (v *request) resolve() {
	if !v.resolved {
		v.route, v.known = resolveRoute(v.c, v.routes)
		v.resolved = true
	}
}

// FullMethod returns "": this is HTTP.
func (v *request) FullMethod() string { return "" }

// RemoteAddr returns the TCP peer, "ip:port", as net/http reports it.
// Deliberately not c.RealIP(): which proxies to believe is
// keyfuncs.ClientIP's configuration, not the Echo instance's IPExtractor,
// whose default believes X-Forwarded-For and X-Real-IP from anyone.
func (v *request) RemoteAddr() string { return v.c.Request().RemoteAddr }

// Values returns the header's field values. The key functions of keyfuncs
// pass canonical names, which http.Header looks up without allocating.
func (v *request) Values(name string) []string { return v.c.Request().Header.Values(name) }

// Native returns the echo.Context, for the functions given with
// WithKeyFunc, WithPlanFunc, WithCostFunc and WithSkipFunc.
func (v *request) Native() echo.Context { return v.c }

// resolveRoute returns the route of the request of c, in the shared form,
// and whether it is known.
//
// Where the router has matched the request (middleware installed with
// e.Use, on a group or on a route), c.Path() is the template of the route
// it matched, or of the route that answers for it: Echo's router sets the
// template of the node whose methods it reports in a 405 (and in the
// automatic answer to OPTIONS, its Allow field in the context under
// echo.ContextKeyHeaderAllow), and that of a RouteNotFound route it
// answers a 404 with. Neither is a route the request reaches: both give
// "". So does a request nothing matched, whose c.Path() is "".
//
// c.Path() is "" too before the router has run (e.Pre), so then, and for
// a 404 after it, the middleware asks the router itself, as Echo's
// ServeHTTP will: Router.Find with the request's method and path, on the
// router of the request's Host (e.Host) or the default one, into a
// context of Echo's pool, not into c, whose handler and path Find would
// set for a request that a later pre-middleware may rewrite. Echo then
// finds the same route, unless a pre-middleware that runs after this one
// rewrites the path or the method (middleware.Rewrite,
// RemoveTrailingSlash, MethodOverride): install those first.
func resolveRoute(c echo.Context, routes *routeTables) (string, bool) {
	e := c.Echo()
	if e == nil {
		return "", false
	}
	r := c.Request()
	router := routerOf(e, r.Host)
	template, allow := c.Path(), c.Get(echo.ContextKeyHeaderAllow) != nil
	if template == "" {
		found := e.AcquireContext()
		found.Reset(r, nil)
		router.Find(r.Method, echo.GetPath(r), found)
		template, allow = found.Path(), found.Get(echo.ContextKeyHeaderAllow) != nil
		found.Reset(nil, nil) // keep nothing of the request in the pool
		e.ReleaseContext(found)
	}
	if template == "" || allow {
		return "", true
	}
	return flow.ColonRoute(routes.route(router, r.Method, template)), true
}

// routerOf returns the router Echo's ServeHTTP routes a request for host
// with: the one e.Host made for it, or the default.
func routerOf(e *echo.Echo, host string) *echo.Router {
	if routers := e.Routers(); len(routers) > 0 {
		if r, ok := routers[host]; ok {
			return r
		}
	}
	return e.Router()
}
