// Package ginlimit is the gin middleware of ratelimit: it limits the
// requests of a gin engine, group or route with a core.Limiter, writes the
// rate-limit header fields, and answers denials with 429 and a problem
// body. Its import path ends in /gin, beside the net/http, fiber and gRPC
// adapters; its name is ginlimit so that it never shadows gin itself, which
// every file that uses it imports too.
//
// Build the middleware once with New, then install it like any other gin
// middleware:
//
//	policy, err := core.NewPolicy(
//		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(60), 10)},
//		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerSecond(100), 200)},
//	)
//	limiter, err := core.NewLimiter(policy)
//	rl, err := ginlimit.New(limiter)
//	router := gin.New()
//	router.Use(rl) // every route
//
// Install it once, on the engine. gin resolves the route before it runs
// any handler, so gin.Context.FullPath is known wherever the middleware
// sits: the route, in the form every adapter shares ("/items/{id}" for
// "/items/:id", group prefix included), keys the endpoint scope with the
// method ("GET /items/{id}", so that /items/1 and /items/2 share a bucket)
// and selects the rules limited to routes (core.Rule.Routes): a stricter
// tier on /search belongs in the policy, decided with the others, not in
// a second middleware. The same middleware installed again on a group or
// route charges a request once; a second middleware over the same limiter
// fails it with flow.ErrInstalledTwice, a net/http one (nethttp, chilimit)
// around the engine or inside it (gin.WrapH) too. Middleware installed with
// engine.Use also runs for requests that no route matches, before gin's
// 404 (or 405) answer: those have no route, so the endpoint tiers do not
// apply to them and the other tiers do, which keeps a client probing for
// paths within its per-ip limit. A flow.WithSkip function that returns
// true when the request's Route() is "" exempts them instead.
//
// # Keys
//
// By default the ip scope is keyed by the TCP peer, http.Request.RemoteAddr,
// and the endpoint scope by the method and route template. flow.WithKey
// sets a scope's key function from package keyfuncs (keyfuncs.ClientIP
// with trusted proxies, keyfuncs.Header, keyfuncs.APIKey,
// keyfuncs.FromContext, ...), which work in every adapter; WithKeyFunc
// takes a native func(*gin.Context) (string, error) instead, for values an
// authentication middleware stored with c.Set (keyfuncs.FromContext reads
// c.Request.Context(), which c.Set does not touch). flow.WithPlan,
// flow.WithCost and flow.WithSkip select the plan, price requests and
// exempt them. Those options are package flow's, so the net/http, gin,
// fiber and gRPC middleware of one service share one option list.
//
// # Client addresses and proxies
//
// The middleware never calls c.ClientIP. By default gin trusts every proxy
// and takes the client from X-Forwarded-For, which any client can write;
// keyed that way, a per-ip limit would be a suggestion. Instead the ip key
// comes from keyfuncs.ClientIP, reading the TCP peer and the request's
// header fields: with no options it trusts no proxy, so a forged
// X-Forwarded-For changes nothing, and behind your own proxies you name
// them, and the header they append to, in its options:
//
//	ip, err := keyfuncs.ClientIP(keyfuncs.WithTrustedProxies("10.0.0.0/8"))
//	rl, err := ginlimit.New(limiter, flow.WithKey(core.ScopeIP, ip))
//
// The client is then the rightmost untrusted hop, never the leftmost entry.
// engine.SetTrustedProxies, engine.TrustedPlatform, engine.ForwardedByClientIP
// and engine.RemoteIPHeaders are irrelevant to this middleware: they change
// what c.ClientIP reports to your handlers, not whom the limiter counts.
//
// # What clients see
//
// An allowed response carries X-RateLimit-Limit, X-RateLimit-Remaining,
// X-RateLimit-Reset (Unix seconds), RateLimit-Policy and RateLimit, as
// core.HeaderFormat documents (flow.WithHeaderFormat,
// flow.WithHeadersOnAllow). A denied request gets the same fields with
// Retry-After (whole seconds, rounded up) and Cache-Control: no-store,
// status 429 and an application/problem+json body of type
// https://iana.org/assignments/http-problem-types#quota-exceeded naming the
// violated tiers; the chain is aborted, so the next handlers do not run.
// When the store fails, the limiter's core.FailureMode decides: under
// FailOpen the request goes on without rate-limit fields, under FailClosed
// it gets 503 with Retry-After. WithDenyHandler replaces the body and status
// of denials.
//
// A request that cannot be decided goes to the error handler
// (WithErrorHandler): by default the error is recorded with c.Error, where
// gin's Logger shows it, and the answer is 400 when the client sent input no
// limit accepts (a key over core.MaxKeyLen bytes, a negative cost), 500 when
// a key, plan or cost function failed, each with only its status text as
// the body, and nothing at all when the client has gone.
//
// # Context and lifetime
//
// The limiter and a shaping delay wait on c.Request.Context(), which ends
// when the client goes away. The middleware reads the gin.Context only
// while it runs and keeps nothing of it; native key functions and the deny
// and error handlers must not keep it either (use c.Copy), since gin reuses
// it for another request.
//
// # Cost
//
// The request view over the gin.Context costs no allocation, and neither
// does the record of the requests the middleware has let through: a slot
// in a table of the middleware's own (8 KiB), taken by a compare-and-swap
// and cleared when the chain returns, or, when more requests run at once
// than its slots spread well, an entry in a map under a lock. Per allowed
// request on the in-memory store the middleware allocates the key strings
// its key functions build (none for the client IP when it is the TCP
// peer's IPv4 address, which is used as it is; key functions run only for
// the scopes the policy's rules limit) and one for the header fields that
// change from response to response (their values and the slices holding
// them share it, unless they are long, as with many tiers reported, when
// they take two; the limit, the policy and "no-store" are slices made once
// per rule set and shared by every response, and must not be modified in
// place): one with the default keys. See BenchmarkMiddleware.
package ginlimit
