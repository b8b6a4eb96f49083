// Package chilimit is the chi middleware of ratelimit: it limits the
// requests of a chi router with a core.Limiter, writes the rate-limit
// header fields, and answers denials with 429 and a problem body. Its
// import path ends in /chi, beside the net/http, gin, fiber and gRPC
// adapters; its name is chilimit so that it never shadows chi itself,
// which every file that uses it imports too.
//
// Build a Middleware once with New, then install its Handler once, on the
// root router, with r.Use, before the routes (chi requires middleware
// first):
//
//	policy, err := core.NewPolicy(
//		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(60), 10)},
//		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerSecond(100), 200)},
//		core.Rule{Name: "search", Scope: core.ScopeIP, Routes: []string{"GET /api/search"}, Limit: core.TokenBucket(core.PerMinute(10), 5)},
//	)
//	limiter, err := core.NewLimiter(policy)
//	rl, err := chilimit.New(limiter)
//	r := chi.NewRouter()
//	r.Use(rl.Handler)
//	r.Route("/api", func(r chi.Router) {
//		r.Get("/items/{id:[0-9]+}", item) // route "/api/items/{id}"
//		r.Get("/search", search)          // also limited by the "search" tier
//	})
//
// A stricter limit on some routes is a rule limited to them
// (core.Rule.Routes), decided with the others in one call, rather than a
// second middleware: see "Installed twice" below.
//
// # Routes
//
// Routes are written as in every adapter (see core.ParseRoute): chi's
// pattern, with the prefixes of the routers it is mounted in (r.Route,
// r.Mount), its regular expressions dropped ("{id:[0-9]+}" is "{id}"), a
// catch-all "*" written "{*}", and no method: "/api/items/{id}". The
// endpoint scope is keyed by the method and the route ("GET
// /api/items/{id}"), so that /api/items/1 and /api/items/2 share a bucket.
// A request no route matches (chi's 404, or 405 for a method the route
// does not serve) has no route: the endpoint tiers and the rules limited to
// routes do not apply to it, the other tiers do, which keeps a client
// probing for paths within its per-ip limit.
//
// chi runs the middleware of r.Use before it routes the request, when
// chi.RouteContext(ctx).RoutePattern() is still empty. The middleware
// therefore asks the router, as chi's own middleware.GetHead does, which
// route the request will reach (chi.Routes.Find on the path chi will
// route), following mounted routers, and where Find stops short of what
// chi does (the root of a mounted router, "/api" for r.Route("/api", ...),
// which chi routes into the mounted router at "/") it goes on as chi does.
// Installed with r.With or in a Group, it runs once chi has matched the
// route and reads it; with r.Use in a mounted router, or r.With on a
// Mount, it reads the mounts chi has matched and asks the mounted router
// for the rest. Wrapped around a chi router, m.Handler(r), it asks that
// router, and stays a chi.Routes, so that r.Mount("/api", m.Handler(api))
// keeps api's routes in sight. A router mounted through any other handler,
// r.Mount("/admin", auth(admin)), is out of sight of chi.Routes.Find and so
// of a middleware on the root router: its requests have the mount's route,
// "/admin/{*}"; mount the router itself and install such wrappers with
// admin.Use or r.With. Outside chi (no chi routing context, around a
// handler that is not a chi router) the route is unknown, and a request to
// which a rule that needs it could apply, or whose key, plan, cost or skip
// function reads it, fails with flow.ErrRouteUnknown (500, through the
// error handler) instead of silently skipping that tier.
//
// Install the middleware after the middlewares that change how chi routes
// (middleware.StripSlashes, middleware.CleanPath, middleware.GetHead), and
// register the routes before serving: the middleware reads each router's
// table (chi.Routes.Routes) once, to follow mounts. A route or router
// added later is found, at the cost of reading the table again, except a
// route added at the root of a mounted router ("/api" beside
// r.Route("/api", ...)) once the middleware has read the table: requests
// to it are still taken for the mounted router's root.
//
// # Installed twice
//
// A request passes the middleware once. The same Middleware installed at
// two levels (r.Use and again r.With on a route) checks the request once,
// at the first, and lets it through at the second without charging it
// again. A second Middleware over the same limiter on the same request
// would charge every tier the two share: the request fails with
// flow.ErrInstalledTwice through the error handler (500 by default), and
// its handler does not run. Two middlewares over different limiters each
// check the request.
//
// # Keys
//
// By default the ip scope is keyed by the TCP peer (no proxy is trusted, so
// a forged X-Forwarded-For changes nothing; chi's middleware.RealIP, which
// believes those fields, would change the peer the middleware sees, so do
// not install it before this one) and the endpoint scope by the method and
// route. flow.WithKey sets a scope's key function from package keyfuncs
// (keyfuncs.ClientIP with trusted proxies, keyfuncs.Header, keyfuncs.APIKey,
// keyfuncs.FromContext, ...), which work in every adapter; WithKeyFunc
// takes a native func(*http.Request) (string, error) instead, for values an
// authentication middleware installed before this one stored in the
// request's context. flow.WithPlan, flow.WithCost and flow.WithSkip, and
// their native forms WithPlanFunc, WithCostFunc and WithSkipFunc, select the
// plan, price requests and exempt them. The options of package flow are
// shared by every adapter, so the net/http, chi, gin, fiber and gRPC
// middleware of one service take one option list.
//
// # What clients see
//
// An allowed response carries X-RateLimit-Limit, X-RateLimit-Remaining,
// X-RateLimit-Reset (Unix seconds), RateLimit-Policy and RateLimit, as
// core.HeaderFormat documents (flow.WithHeaderFormat,
// flow.WithHeadersOnAllow), with names as http.Header stores them. A denied
// request gets the same fields with Retry-After (whole seconds, rounded
// up) and Cache-Control: no-store, status 429 and an
// application/problem+json body of type
// https://iana.org/assignments/http-problem-types#quota-exceeded naming the
// violated tiers; the next handler is not called. When the store fails, the
// limiter's core.FailureMode decides: under FailOpen the request goes on
// without rate-limit fields, under FailClosed it gets 503 with
// Retry-After. WithDenyHandler replaces the body and status of denials.
//
// A request that cannot be decided goes to the error handler
// (WithErrorHandler): by default 400 when the client sent input no limit
// accepts (a key over core.MaxKeyLen bytes, a negative cost), 500 when a
// key, plan or cost function failed, the route is unknown or a second
// middleware checked the request, each with only its status text as the
// body, and nothing at all when the client has gone.
//
// # Cost
//
// Per allowed request on the in-memory store the middleware allocates the
// request copy that carries its mark to the next handler (two
// allocations, as any middleware that adds a context value does), the key
// strings its key functions build (none for the client IP when it is the
// TCP peer's IPv4 address; key functions run only for the scopes the
// policy's rules limit) and one for the header fields that change from
// response to response (their values and the slices holding them share it
// unless they are long, as with many tiers reported; the constant ones are
// shared slices, made once per rule set): three with the default keys. Resolving the route before chi routes it allocates nothing
// more for a route of the root router (the middleware reuses pooled
// routing contexts and each router's table); a route in a mounted router
// costs four more, two in chi.Routes.Find and two to join the patterns as
// chi does. See BenchmarkMiddleware.
package chilimit
