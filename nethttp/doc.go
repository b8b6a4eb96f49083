// Package nethttp is the net/http middleware of ratelimit: it limits the
// requests of an http.Handler with a core.Limiter, writes the rate-limit
// header fields, and answers denials with 429 and a problem body.
//
// Build a Middleware once with New, and install it once, around the whole
// mux:
//
//	policy, err := core.NewPolicy(
//		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(60), 10)},
//		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerSecond(100), 200)},
//		core.Rule{Name: "search", Scope: core.ScopeIP, Routes: []string{"GET /search"}, Limit: core.TokenBucket(core.PerMinute(10), 2)},
//	)
//	limiter, err := core.NewLimiter(policy)
//	rl, err := nethttp.New(limiter)
//	mux := http.NewServeMux()
//	mux.Handle("GET /items/{id}", items)
//	mux.Handle("GET /search", search)
//	http.ListenAndServe(addr, rl.Handler(mux))
//
// In front of a ServeMux the middleware asks it which pattern the request
// matches (http.ServeMux.Handler) before it dispatches: the route, that
// pattern without its method ("/items/{id}", so that /items/1 and /items/2
// share a bucket, and a path nobody routes, or that the mux redirects,
// gets none), keys the endpoint scope with the method and selects the
// rules limited to routes (core.Rule.Routes), all decided together.
// Wrapping each route's handler works too, for the mux has set the pattern
// by then. Around any other handler the route is unknown: a request that a
// route-scoped or endpoint rule could apply to, or whose key function
// reads the route, fails with flow.ErrRouteUnknown, never skipping the
// tier. The same Middleware installed twice on a request's way charges it
// once; a second Middleware over the same limiter fails it with
// flow.ErrInstalledTwice. Handler has the signature of the usual
// middleware, func(http.Handler) http.Handler, for routers that take one.
//
// # Keys
//
// By default the ip scope is keyed by the TCP peer (no proxy is trusted, so
// a forged X-Forwarded-For changes nothing) and the endpoint scope by the
// route template. flow.WithKey sets a scope's key function from package
// keyfuncs (keyfuncs.ClientIP with trusted proxies, keyfuncs.Header,
// keyfuncs.APIKey, keyfuncs.FromContext, ...), which work in every adapter;
// WithKeyFunc takes a native func(*http.Request) (string, error) instead.
// flow.WithPlan, flow.WithCost and flow.WithSkip select the plan, price
// requests and exempt them. Those options are package flow's, so the
// net/http, gin, fiber and gRPC middleware of one service share one option
// list.
//
// # What clients see
//
// An allowed response carries X-RateLimit-Limit, X-RateLimit-Remaining,
// X-RateLimit-Reset (Unix seconds), RateLimit-Policy and RateLimit, as
// core.HeaderFormat documents (flow.WithHeaderFormat, flow.WithHeadersOnAllow). A
// denied request gets the same fields with Retry-After (whole seconds,
// rounded up) and Cache-Control: no-store, status 429 and an
// application/problem+json body of type
// https://iana.org/assignments/http-problem-types#quota-exceeded naming the
// violated tiers; the next handler is not called. When the store fails, the
// limiter's core.FailureMode decides: under FailOpen the request goes on
// without rate-limit fields, under FailClosed it gets 503 with Retry-After.
// WithDenyHandler replaces the body and status of denials.
//
// A request that cannot be decided goes to the error handler
// (WithErrorHandler): by default 400 when the client sent input no limit
// accepts (a key over core.MaxKeyLen bytes, a negative cost), 500 when a key,
// plan or cost function failed, each with only its status text as the body,
// and nothing at all when the client has gone.
//
// # Cost
//
// The middleware allocates, per allowed request on the in-memory store, the
// request copy that carries its mark to the next handler (two allocations,
// as any middleware that adds a context value does), the key strings its
// key functions build (none for the client IP when it is the TCP peer's
// IPv4 address; key functions run only for the scopes the policy's rules
// limit) and one for the header fields that change from response to
// response (their values and the slices holding them share it, unless they
// are long, as with many tiers reported, when they take two; the limit, the
// policy and "no-store" are slices made once per rule set and shared by
// every response, and must not be modified in place); route templates and
// header lookups allocate nothing. See BenchmarkMiddleware.
package nethttp
