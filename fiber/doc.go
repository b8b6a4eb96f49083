// Package fiberlimit is the fiber (v2) middleware of ratelimit: it limits
// the requests of a fiber app with a core.Limiter, writes the rate-limit
// header fields, and answers denials with 429 and a problem body.
//
// The package is named fiberlimit, not fiber, so that it can be imported
// beside github.com/gofiber/fiber/v2 without renaming either; its import
// path is github.com/bucketry/ratelimit/fiber:
//
//	import (
//		"github.com/gofiber/fiber/v2"
//
//		"github.com/bucketry/ratelimit/core"
//		fiberlimit "github.com/bucketry/ratelimit/fiber"
//	)
//
// Build the middleware once with New, and install it once, app.Use:
//
//	policy, err := core.NewPolicy(
//		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(60), 10)},
//		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerSecond(100), 200)},
//		core.Rule{Name: "search", Scope: core.ScopeIP, Routes: []string{"GET /api/search"}, Limit: core.TokenBucket(core.PerMinute(10), 2)},
//	)
//	limiter, err := core.NewLimiter(policy)
//	rl, err := fiberlimit.New(limiter)
//	app := fiber.New()
//	app.Use(rl)
//	app.Get("/items/:id", items)
//	api := app.Group("/api")
//	api.Get("/search", search) // endpoint "GET /api/search", and the search tier
//
// # Routes under app.Use
//
// The route (in the form every adapter shares: "/items/{id}" for
// "/items/:id", with group and mount prefixes) keys the endpoint scope
// with the method, so that /items/1 and /items/2 share a bucket, and
// selects the rules limited to routes (core.Rule.Routes), decided with the
// others. Installed with app.Use(rl), group.Use(rl) or app.Group("/api",
// rl), the middleware runs in fiber's Use route, before fiber has matched
// the final one: it finds that route as fiber does, the first route after
// the Use route in the stack of the request's method whose path matches
// (under the app's CaseSensitive and StrictRouting), for routes of plain
// syntax: static segments, whole-segment parameters and a final "*" or
// "+". A request that matches no route has none (fiber's 404): the
// endpoint tiers do not apply to it, and the others do. The search
// passes app.Static's routes by, as fiber registers them as it does
// app.Use's middleware: a request for a file they serve gets the route of
// a later route its path matches, or none, and the rules limited to the
// static prefix's routes do not apply to it; limit such files with rules
// of other scopes (ScopeIP, ScopeUser). If a route of
// another syntax (an optional parameter, a constraint such as ":id<int>",
// a parameter within a segment) comes first, the route cannot be told,
// and a request that a route-scoped or endpoint rule could apply to, or
// whose key, plan, cost or skip function reads the route, fails with
// flow.ErrRouteUnknown (500 through the error handler) rather than
// skip the tier: install the middleware on such a route itself,
// app.Get("/n/:id<int>", rl, h), where fiber has matched it. The route is
// looked for only when something reads it: a rule limited to routes, an
// endpoint rule, a rule with a When predicate, a key function given per
// route, the limiter's observers (core.WithObserver), or a key, plan or
// skip function of the app's that asks; without any of these, no search
// of the stack is made.
//
// The same middleware installed twice on a request's way (app.Use and a
// route) charges it once; a second middleware over the same limiter fails
// it with flow.ErrInstalledTwice, a net/http one (nethttp, chilimit)
// before it in the app through adaptor.HTTPMiddleware too. fiber's app.Get
// registers a HEAD route beside the GET one, with the same handlers; a
// HEAD request counts against the GET route's endpoint bucket and GET
// route selectors.
//
// # Keys
//
// By default the ip scope is keyed by the TCP peer, c.Context().RemoteAddr()
// (no proxy is trusted, so a forged X-Forwarded-For changes nothing; fiber's
// own ProxyHeader and trusted-proxy settings are not consulted), and the
// endpoint scope by the route template. flow.WithKey sets a scope's key
// function from package keyfuncs (keyfuncs.ClientIP with trusted proxies,
// keyfuncs.Header, keyfuncs.APIKey, keyfuncs.FromContext over
// c.UserContext(), ...), which work in every adapter; WithKeyFunc takes a
// native func(*fiber.Ctx) (string, error) instead, for values such as
// c.Locals set by an authentication middleware. flow.WithPlan,
// flow.WithCost and flow.WithSkip select the plan, price requests and
// exempt them. Those options are package flow's, so the net/http, gin,
// fiber and gRPC middleware of one service share one option list; an
// option of another adapter (a gin deny handler, say) is an error from
// New.
//
// fasthttp reuses a connection's buffers for its next request, and fiber's
// strings alias them unless the app is Immutable. Keys outlive the request
// (the memory store keeps them in its table), so the middleware copies:
// the header values and address the key functions read are fresh strings,
// and the key a WithKeyFunc function returns is copied before it reaches
// the limiter. Key functions may therefore return c.Get("X-User") as it is.
//
// # What clients see
//
// An allowed response carries X-RateLimit-Limit, X-RateLimit-Remaining,
// X-RateLimit-Reset (Unix seconds), RateLimit-Policy and RateLimit, as
// core.HeaderFormat documents (flow.WithHeaderFormat,
// flow.WithHeadersOnAllow), set with fasthttp's Header.Set before the next
// handler runs. The default format is core.NewHeaderFormat(), names as
// specified; fasthttp normalizes them ("X-Ratelimit-Limit") unless the app
// sets DisableHeaderNormalizing, whatever the format's NameCase, and field
// names are case-insensitive (RFC 9110 section 5.1). A denied request
// gets the same fields with Retry-After (whole seconds, rounded up) and
// Cache-Control: no-store, status 429 and an application/problem+json body
// of type https://iana.org/assignments/http-problem-types#quota-exceeded
// naming the violated tiers; the next handler is not called. When the store
// fails, the limiter's core.FailureMode decides: under FailOpen the request
// goes on without rate-limit fields, under FailClosed it gets 503 with
// Retry-After. WithDenyHandler replaces the body and status of denials.
//
// A request that cannot be decided goes to the error handler
// (WithErrorHandler): by default 400 when the client sent input no limit
// accepts (a key over core.MaxKeyLen bytes, a negative cost) and 500 when a
// key, plan or cost function failed, each with only its status text as the
// body. The answers are written directly, not returned as errors, because
// fiber's DefaultErrorHandler would send the error's text to the client.
//
// # Context and waiting
//
// Key functions and the store get c.UserContext(). fasthttp does not cancel
// a request's context when the client disconnects, so a shaping tier's
// delay (core.Shaping) is waited out in full unless the app bounds it,
// for example with fiber's timeout.NewWithContext around the middleware; a
// context that ends is returned to fiber as its own error
// (context.DeadlineExceeded or context.Canceled, nothing of the limiter's;
// the timeout middleware answers 408), or given to the error handler.
//
// # Cost
//
// With the default keys, an allowed request on the in-memory store costs
// the middleware one allocation: the TCP peer's address, of which the
// client-IP key is a slice for an IPv4 peer. The header fields are
// formatted on the stack (core.HeaderValues) and set with their names
// already in the form fasthttp gives them (ResponseHeader.SetCanonical);
// fasthttp copies names and values into buffers it reuses. Key functions
// run only for the scopes the policy's rules limit, and the route template
// costs nothing. Each header
// a key function reads adds two (a copy of its lines and their slice), and
// each native key one (its copy). See BenchmarkMiddleware, which runs
// fiber's own middleware/limiter beside it.
package fiberlimit
