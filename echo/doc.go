// Package echolimit is the Echo (v4) middleware of ratelimit: it limits
// the requests of an Echo instance, group or route with a core.Limiter,
// writes the rate-limit header fields, and answers denials with 429 and a
// problem body. Its import path ends in /echo, beside the net/http, gin,
// fiber and gRPC adapters; its name is echolimit so that it never shadows
// echo itself, which every file that uses it imports too:
//
//	import (
//		"github.com/labstack/echo/v4"
//
//		"github.com/bucketry/ratelimit/core"
//		echolimit "github.com/bucketry/ratelimit/echo"
//	)
//
// Build the middleware once with New, then install it once, with e.Use:
//
//	policy, err := core.NewPolicy(
//		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(60), 10)},
//		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerSecond(100), 200)},
//		core.Rule{Name: "search", Scope: core.ScopeIP, Routes: []string{"GET /search"}, Limit: core.TokenBucket(core.PerMinute(10), 5)},
//	)
//	limiter, err := core.NewLimiter(policy)
//	rl, err := echolimit.New(limiter)
//	e := echo.New()
//	e.Use(rl)                         // every request,
//	// api := e.Group("/api", rl)     // or one group's,
//	// e.GET("/search", search, rl)   // or one route's
//
// One middleware, at one level, sees every request: give a stricter route
// a rule limited to it (core.Rule.Routes, the "search" tier above), which
// is decided in the same store call as the other tiers, rather than a
// second middleware on the route, which would charge the request twice
// (see Installed twice).
//
// # Routes
//
// Echo has matched the route before it runs the middleware of e.Use, of a
// group or of a route, and c.Path() is the route's template, group prefix
// included ("/api/items/:id"). The middleware reports it in the form every
// adapter shares (core.ParseRoute): wildcards in braces, without the
// method, "/api/items/{id}"; Echo's "/files/*" is "/files/{*}". With the
// method it keys the endpoint scope ("GET /api/items/{id}"), so that
// /api/items/1 and /api/items/2 share a bucket, and it is what the
// selectors of core.Rule.Routes and flow.WithRouteKey match. Echo's
// router gives a wildcard that ends a route the rest of the path, slashes
// included: "/items/:id" serves /items/1/more too, which is then a request
// of "/items/{id}".
//
// The middleware of e.Use (and of e.Pre) also runs for requests that
// reach no route:
// Echo's 404, its 405 (a path with routes of other methods only), its
// automatic answer to OPTIONS, and the RouteNotFound routes that answer a
// 404, those of e.RouteNotFound and the two catch-alls ("/api" and
// "/api/*") that Group.Use and Group's middleware register for the group's
// 404s. Echo sets c.Path() to a template for most of those; the middleware
// tells them apart from routes (see Echo's Router.Routes, which lists the
// RouteNotFound routes under the method echo.RouteNotFound) and reports no
// route, "": the endpoint tiers and the tiers limited to routes do not
// apply, and the others do, which keeps a client probing for paths within
// its per-ip limit. A flow.WithSkip function that returns true when the
// request's Route() is "" exempts those requests instead.
//
// # Before routing: e.Pre
//
// Pre-middleware runs before Echo routes the request, when c.Path() is
// still empty. Installed with e.Pre, the middleware asks the router which
// route the request will reach, as Echo's ServeHTTP is about to: a
// Router.Find for the request's method and path, on the router of its
// Host when e.Host made one, into a context from Echo's pool (not c,
// which Find would change). The route is then the same as under e.Use,
// for the cost of one more lookup in the routing tree per request.
// Pre-middleware that rewrites the path or the method
// (middleware.Rewrite, middleware.RemoveTrailingSlash,
// middleware.MethodOverride) must run first, e.Pre(rewrite, rl): the route
// is that of the request as the middleware sees it.
//
// A request view whose route cannot be told reports so
// (flow.RouteReporter): then a request to which a tier that needs the
// route applies, or whose key, plan, cost or skip function reads it, fails
// with flow.ErrRouteUnknown through the error handler, rather than
// skipping the tier. Under Echo's ServeHTTP that never
// happens; it takes an echo.Context with no Echo instance.
//
// # Installed twice
//
// A request passes the middleware once: it records that it checked the
// request with c.Set (under flow.MarkName), and if it runs again on the
// same request (e.Pre and e.Use, or e.Use and a group or route) the
// second run calls next without charging. A second middleware built by
// another New over the same limiter fails the request with an error
// wrapping flow.ErrInstalledTwice, through its error handler (500 by
// default): both would charge the tiers they share. So does a net/http
// middleware (nethttp, chilimit) over the same limiter, around the Echo
// instance or inside it (echo.WrapHandler): while one exists, the
// request's context records the pass as well, in a copy of the request.
// Middlewares over different limiters are independent.
//
// # Keys
//
// By default the ip scope is keyed by the TCP peer,
// c.Request().RemoteAddr, and the endpoint scope by the method and route.
// flow.WithKey sets a scope's key function from package keyfuncs
// (keyfuncs.ClientIP with trusted proxies, keyfuncs.Header,
// keyfuncs.APIKey, keyfuncs.FromContext, ...), which work in every
// adapter; WithKeyFunc takes a native func(echo.Context) (string, error)
// instead, for values an authentication middleware stored with c.Set
// (keyfuncs.FromContext reads c.Request().Context(), which c.Set does not
// touch). WithPlanFunc, WithCostFunc and WithSkipFunc read the
// echo.Context likewise; flow.WithPlan, flow.WithCost and flow.WithSkip
// are their framework-neutral forms. Those options are package flow's, so
// the net/http, gin, fiber, Echo and gRPC middleware of one service share
// one option list; an option of another adapter (a gin deny handler, say)
// is an error from New.
//
// # Client addresses and proxies
//
// The middleware never calls c.RealIP. Without an IPExtractor, Echo takes
// the client from X-Forwarded-For or X-Real-IP, which any client can
// write; keyed that way, a per-ip limit would be a suggestion. Instead the
// ip key comes from keyfuncs.ClientIP, reading the TCP peer and the
// request's header fields: with no options it trusts no proxy, so a forged
// X-Forwarded-For changes nothing, and behind your own proxies you name
// them, and the header they append to, in its options:
//
//	ip, err := keyfuncs.ClientIP(keyfuncs.WithTrustedProxies("10.0.0.0/8"))
//	rl, err := echolimit.New(limiter, flow.WithKey(core.ScopeIP, ip))
//
// The client is then the rightmost untrusted hop, never the leftmost
// entry. e.IPExtractor is irrelevant to this middleware: it changes what
// c.RealIP reports to your handlers, not whom the limiter counts.
//
// # What clients see
//
// An allowed response carries X-RateLimit-Limit, X-RateLimit-Remaining,
// X-RateLimit-Reset (Unix seconds), RateLimit-Policy and RateLimit, as
// core.HeaderFormat documents (flow.WithHeaderFormat,
// flow.WithHeadersOnAllow), set on c.Response().Header() under canonical
// names before next runs. A denied request gets the same fields with
// Retry-After (whole seconds, rounded up) and Cache-Control: no-store,
// status 429 and an application/problem+json body of type
// https://iana.org/assignments/http-problem-types#quota-exceeded naming
// the violated tiers, written by the middleware, which returns nil; next
// does not run. When the store fails, the limiter's core.FailureMode
// decides: under FailOpen the request goes on without rate-limit fields,
// under FailClosed it gets 503 with Retry-After. WithDenyHandler replaces
// the body and status of denials.
//
// # Errors and Echo's HTTPErrorHandler
//
// Denials are answers, written by the middleware, not errors. A request
// that cannot be decided is an error, and goes to Echo's own error
// handling: by default the middleware returns an *echo.HTTPError, status
// 400 when the client sent input no limit accepts (a key over
// core.MaxKeyLen bytes, a negative cost) and 500 when a key, plan or cost
// function failed, with the status text as its Message and the cause as
// its Internal error. Echo's HTTPErrorHandler answers it in the
// application's error format (DefaultHTTPErrorHandler:
// {"message":"Internal Server Error"}), Echo's request loggers record the
// cause, and errors.Is finds core.ErrInvalidKey, flow.ErrInstalledTwice,
// or a key function's own error through it. The cause may name keys,
// rules or a store address, so it is not for clients:
// DefaultHTTPErrorHandler shows it only in Echo's Debug mode, and a custom
// HTTPErrorHandler should answer HTTPError.Message, not err.Error(). When
// the request's context ended (the client has gone), the middleware
// returns the context's error and writes nothing. WithErrorHandler
// replaces all of that.
//
// # Context and lifetime
//
// The limiter and a shaping delay wait on c.Request().Context(), which
// ends when the client goes away. The middleware reads the echo.Context
// only while it runs and keeps nothing of it; native functions and the
// deny and error handlers must not keep it either, since Echo reuses it
// for another request.
//
// # Cost
//
// Echo applies the middleware of e.Use and of routes anew for each
// request, so the handler the middleware returns to Echo is one
// allocation per request, and the request view over the echo.Context,
// two words, comes from a pool. Per allowed request on the in-memory store
// the middleware allocates that handler, the map of c.Set (Echo makes it
// on the request's first Set, here for the mark; two allocations), the
// key strings its key functions build (none for the client IP when it is
// the TCP peer's IPv4 address; key functions run only for the scopes the
// policy's rules limit) and one for the header fields that change from
// response to response (their values and the slices holding them share it
// unless they are long, as with many tiers reported; the constant ones are
// shared slices, made once per rule set): four with the default keys. Under e.Pre the router lookup
// allocates nothing (Echo itself allocates one more per request once it
// has any pre-middleware). See BenchmarkMiddleware.
package echolimit
