// Package flow is the middleware engine that every framework adapter of
// ratelimit (nethttp, gin, fiber, grpcinterceptor) runs: one place that
// turns a request into keys, a plan and a cost, asks a core.Limiter, waits
// out a shaping delay, and says what happens next.
//
// An adapter builds one Engine with New from the caller's Options, and for
// each request passes its framework-neutral view (a keyfuncs.Request) to
// Check, with a Result of its own (on its stack) that Check writes. The
// Result's Outcome is all the adapter switches on:
//
//	Proceed      write the header fields (Headers), call the next handler
//	Skipped      call the next handler, no header fields
//	Denied       header fields, then 429 (HTTPStatus) and the problem body (WriteProblem)
//	Unavailable  header fields, then 503 and the problem body: the store failed, fail-closed
//	BadInput     400: the client's input cannot be a key or a cost
//	Failed       500: a key, plan or cost function failed
//	ClientGone   nothing: the request's context ended
//
// gRPC maps the same outcomes to ResourceExhausted, Unavailable,
// InvalidArgument, Internal and the context's status.
//
// The options of this package (WithKey, WithPlan, WithCost, WithSkip,
// WithHeaderFormat, WithHeadersOnAllow) are passed to any adapter and mean
// the same in all of them, so a service with HTTP and gRPC front ends
// writes its options once:
//
//	opts := []flow.Option{flow.WithKey(core.ScopeUser, user), flow.WithPlan(plan)}
//	rl, err := ginlimit.New(limiter, opts...)
//
// Options that take a framework's own types (a deny handler, a key
// function over *gin.Context) belong to their adapter, which builds them
// with Native and NativeKey; another adapter's constructor refuses them.
// Every mistake in the options is an error from New wrapping
// core.ErrInvalidOption: a nil option or function, two key functions for
// one scope, an enabled rule whose scope has no key function.
package flow
