// Package grpcinterceptor rate-limits gRPC servers: a unary and a stream
// server interceptor over a core.Limiter. Like every framework adapter of
// ratelimit it only translates: the keys, plan, cost, skip and metadata
// formatting are package flow's, and so are the options that shape them,
// which the HTTP adapters take too; the interceptors map each flow.Outcome
// to a gRPC status.
//
//	policy, err := core.NewPolicy(
//		core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(10), 20)},
//		core.Rule{Name: "per-method", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerSecond(500), 1000)},
//	)
//	limiter, err := core.NewLimiter(policy)
//	user, err := keyfuncs.Metadata("x-user")
//	opts := []flow.Option{flow.WithKey(core.ScopeUser, user)}
//	unary, err := grpcinterceptor.UnaryServerInterceptor(limiter, opts...)
//	stream, err := grpcinterceptor.StreamServerInterceptor(limiter, opts...)
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(auth, unary), grpc.ChainStreamInterceptor(auth, stream))
//
// Put the interceptors after authentication, so that key functions can read
// the user it stores in the context (keyfuncs.FromContext). The full method
// ("/package.Service/Method") keys the endpoint scope by default
// (keyfuncs.Endpoint; keyfuncs.GRPCMethod says so explicitly), the TCP
// peer's address keys the ip scope, and keyfuncs.Metadata reads incoming
// metadata. flow.WithKey sets a scope's key function from package keyfuncs;
// WithKeyFunc takes a native function of the context and the full method
// instead.
//
// # Per-method tiers and keys
//
// A gRPC call's route is its full method: core.Request.Route is
// "/package.Service/Method", and a route selector of core.Rule.Routes or
// flow.WithRouteKey names a method the same way (core.ParseRoute). Install
// one pair of interceptors for the whole server and scope stricter tiers
// to methods with Rule.Routes; every tier that applies to a call, the
// method's and the others, is decided in one store call, so a call the
// stricter tier denies takes nothing from the others:
//
//	core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(10), 20)},
//	core.Rule{Name: "search", Scope: core.ScopeUser, Routes: []string{"/shop.Catalog/Search"},
//		Limit: core.TokenBucket(core.PerSecond(1), 5)},
//
// flow.WithRouteKey gives a method its own key function for a scope, in
// place of the scope's flow.WithKey there: on "/shop.Catalog/Search" the
// user tiers count per API key, elsewhere per user. A call to that method
// without the key has no identity for the scope, and its tiers of that
// scope do not apply to it.
//
//	apiKey, err := keyfuncs.Metadata("x-api-key")
//	opts := []flow.Option{
//		flow.WithKey(core.ScopeUser, user),
//		flow.WithRouteKey("/shop.Catalog/Search", core.ScopeUser, apiKey),
//	}
//
// # Installed twice
//
// A call passes the rate limit once. The interceptors record in the
// context they hand on (to the handler, or to the next interceptor; a
// stream's Context) that they checked the call, as a flow.Mark. The same
// interceptor chained twice (grpc.ChainUnaryInterceptor(unary, unary), or
// a server option and a chain that both hold it) lets the call through the
// second time without charging it or adding metadata. Two interceptors
// built over the same limiter, each of which would charge every tier they
// share, fail the call through the error path: the error handler gets an
// error wrapping flow.ErrInstalledTwice, and by default the client sees
// codes.Internal with a fixed message. Interceptors over different
// limiters both apply.
//
// # Options
//
// The options of package flow mean under gRPC: flow.WithPlan selects the
// caller's plan; flow.WithCost prices a call, or the opening of a stream
// (WithPerMessage prices the messages of a paced stream); flow.WithSkip
// exempts a call (health checks, reflection) or a whole stream, which then
// gets no decision, no rate-limit metadata and no pacing;
// flow.WithHeadersOnAllow(false) keeps the rate-limit fields out of the
// header metadata of allowed calls, while denials still carry them in the
// trailers. The default header format sends the fields below with
// lower-case names (core.NamesLower), as gRPC metadata requires, and
// neither Retry-After nor Cache-Control: gRPC clients read the retry delay
// from grpc-retry-pushback-ms and RetryInfo, and nothing caches a call. A
// flow.WithHeaderFormat whose names are not lower case works, at the cost
// of lowering each name on every call.
//
// This package's own options, WithKeyFunc, WithPlanFunc, WithCostFunc,
// WithSkipFunc, WithDenyHandler, WithErrorHandler and WithPerMessage, take
// gRPC types: the native functions read the call's context and full
// method. The constructors of the other adapters refuse them, and these
// constructors refuse theirs, so that no option is silently dropped. Pass
// one option list to both constructors: WithPerMessage has no effect on
// the unary one.
//
// # What clients see
//
// An allowed call carries the rate-limit fields of core.HeaderFormat in its
// header metadata, with lower-case names: x-ratelimit-limit,
// x-ratelimit-remaining, x-ratelimit-reset, ratelimit-policy and ratelimit
// (see core.HeaderFormat for their values).
//
// A denied call does not reach its handler. It ends with
// codes.ResourceExhausted and these status details (DenialStatus):
//
//	google.rpc.RetryInfo     retry_delay: RetryAfter rounded up to the
//	                         millisecond, never before the tokens are back
//	google.rpc.QuotaFailure  one violation per denying tier: subject and
//	                         quota_id are the rule's name
//
// and the trailers grpc-retry-pushback-ms (the same delay, in milliseconds)
// and the rate-limit fields. The response is Trailers-Only: one HEADERS
// frame holding the status and these fields, with no header metadata before
// it. This matters: grpc-go retries a call under its retry policy only when
// the response was Trailers-Only, and then waits grpc-retry-pushback-ms
// instead of its own backoff (gRFC A6); it does not read RetryInfo. A client
// with a retry policy that lists RESOURCE_EXHAUSTED thus comes back exactly
// when the bucket allows it. Since a Trailers-Only response is the HTTP
// header section, the draft's RateLimit-Policy and RateLimit fields are
// allowed there. A cost above a tier's burst, which no wait cures, gets no
// RetryInfo and a pushback of -1, which tells clients not to retry.
//
// The delay is rounded to the millisecond, not to the whole second of
// Retry-After: gRPC has a unit fine enough to say the exact refill, and a
// client that waits longer than needed only loses throughput.
//
// When the store fails and the limiter fails closed (core.FailClosed), the
// call ends with codes.Unavailable, a RetryInfo detail and
// grpc-retry-pushback-ms, from Decision.RetryAfter (1s, or the rest of the
// circuit breaker's cooldown). Under core.FailOpen and core.FailFallback
// the call proceeds.
//
// A call that cannot be decided ends with codes.InvalidArgument when the
// client's input is at fault (a metadata key too long for a bucket key, or
// no client address), codes.Internal when a key, plan or cost function
// fails or two interceptors over one limiter checked the call, and
// codes.Canceled or codes.DeadlineExceeded when the call's context ends;
// WithErrorHandler changes that, and WithDenyHandler the denial's status.
//
// # Streams
//
// A stream is checked once, when it opens: a denied stream ends before its
// handler runs, Trailers-Only as above, and the client reads the status at
// its first Recv (or sees io.EOF from Send, then the status from Recv).
// With WithPerMessage each received message is paced as well: RecvMsg
// holds a message until the tiers have its tokens, waiting as
// core.Limiter.WaitN does, because an error in the middle of a stream ends
// the whole stream. The client is slowed through HTTP/2 flow control.
package grpcinterceptor
