package grpcinterceptor

import (
	"context"
	"fmt"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// Option configures an interceptor. The options carry the same names as
// those of the HTTP adapters (nethttp, gin, fiber) and mean the same; pass
// the same options to UnaryServerInterceptor and StreamServerInterceptor.
type Option interface{ apply(*config) }

type config struct {
	// kopts are the options of the shared flow, in the order given, after
	// the gRPC default header format.
	kopts      []keyfuncs.Option
	deny       func(ctx context.Context, d *core.Decision) error
	onError    func(ctx context.Context, err error) error
	perMessage bool
	msgCost    func(r keyfuncs.Request, msg any) (int64, error)
	errs       []error
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithKey sets the key function of scope (core.ScopeUser, core.ScopeIP,
// core.ScopeEndpoint or a core.Dimension), written against the
// framework-neutral keyfuncs.Request: keyfuncs.Metadata("x-user") or
// keyfuncs.GRPCMethod(), for instance. Without it ScopeIP is keyed by the
// TCP peer's address and ScopeEndpoint by the full gRPC method; other
// scopes are not keyed, and a rule on one makes the constructor fail.
func WithKey(scope core.Scope, fn keyfuncs.Func) Option {
	return optionFunc(func(c *config) { c.kopts = append(c.kopts, keyfuncs.WithKey(scope, fn)) })
}

// WithKeyFunc sets the key function of scope as a native gRPC function of
// the call's context (which carries the incoming metadata, the peer and
// whatever an authentication interceptor put there) and its full method,
// "/package.Service/Method". It returns keyfuncs.ErrNotApplicable when the
// tier does not apply to the call, and any other error when it cannot
// decide. It is WithKey for functions that need no framework-neutral view.
func WithKeyFunc(scope core.Scope, fn func(ctx context.Context, fullMethod string) (string, error)) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithKeyFunc(%q): nil key function", core.ErrInvalidOption, scope))
			return
		}
		c.kopts = append(c.kopts, keyfuncs.WithKey(scope, func(r keyfuncs.Request) (string, error) {
			return fn(r.Context(), r.FullMethod())
		}))
	})
}

// WithPlan sets the function that reads the caller's plan ("free", "pro"),
// which selects the rules that apply. keyfuncs.ErrNotApplicable means no
// plan. Without it no call has a plan.
func WithPlan(fn keyfuncs.Func) Option {
	return optionFunc(func(c *config) { c.kopts = append(c.kopts, keyfuncs.WithPlan(fn)) })
}

// WithCost sets the function that prices a call, or the opening of a
// stream, in tokens (0 reads without consuming). Without it each costs 1.
// Messages of a paced stream are priced by WithPerMessage.
func WithCost(fn func(keyfuncs.Request) (int64, error)) Option {
	return optionFunc(func(c *config) { c.kopts = append(c.kopts, keyfuncs.WithCost(fn)) })
}

// WithSkip sets a function that exempts calls from limiting (health checks,
// reflection): when it returns true the call proceeds without a decision
// or rate-limit metadata, and a stream is not paced.
func WithSkip(fn func(keyfuncs.Request) bool) Option {
	return optionFunc(func(c *config) { c.kopts = append(c.kopts, keyfuncs.WithSkip(fn)) })
}

// WithHeaderFormat sets which rate-limit fields are sent as metadata and how
// (see core.NewHeaderFormat). The default sends X-RateLimit-Limit,
// X-RateLimit-Remaining, X-RateLimit-Reset, RateLimit-Policy and RateLimit
// with lower-case names (core.NamesLower), as gRPC metadata requires, and
// neither Retry-After nor Cache-Control: gRPC clients read the retry delay
// from grpc-retry-pushback-ms and RetryInfo, and nothing caches a call. A
// format whose names are not lower case works, at the cost of lowering each
// name on every call.
func WithHeaderFormat(f *core.HeaderFormat) Option {
	return optionFunc(func(c *config) { c.kopts = append(c.kopts, keyfuncs.WithHeaderFormat(f)) })
}

// WithHeadersOnAllow says whether allowed calls carry the rate-limit fields
// in their header metadata. Denials always carry them, in the trailers. The
// default is true.
func WithHeadersOnAllow(on bool) Option {
	return optionFunc(func(c *config) { c.kopts = append(c.kopts, keyfuncs.WithHeadersOnAllow(on)) })
}

// WithDenyHandler sets the function that returns the error sent for a
// denied call: a rate-limit denial (d.Reason core.ReasonLimited or
// core.ReasonCostExceedsLimit) or a store failure under core.FailClosed
// (core.ReasonUnavailable). It should return a status error (status.Error);
// nil sends the default one. The rate-limit trailers and
// grpc-retry-pushback-ms are set before it runs; it may add trailers with
// grpc.SetTrailer but must not send headers (grpc.SetHeader,
// grpc.SendHeader), or the response is no longer Trailers-Only and clients
// will not retry. d must not be retained. The default sends
// codes.ResourceExhausted or codes.Unavailable with RetryInfo and
// QuotaFailure details (see the package documentation).
func WithDenyHandler(fn func(ctx context.Context, d *core.Decision) error) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithDenyHandler: nil function", core.ErrInvalidOption))
		}
		c.deny = fn
	})
}

// WithErrorHandler sets the function that returns the error sent when a
// call cannot be decided: a key, plan or cost function failed, the input is
// invalid (a key too long or with control characters, a negative cost), or
// the call's context ended. It should return a status error; nil sends the
// default one. The default maps the error as keyfuncs.Middleware.ErrorStatus
// does: input the client controls is codes.InvalidArgument with the error's
// text, an ended context is codes.Canceled or codes.DeadlineExceeded, and
// any other error is codes.Internal with a fixed message, since key
// functions may fail with text not meant for clients. Log err here.
func WithErrorHandler(fn func(ctx context.Context, err error) error) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithErrorHandler: nil function", core.ErrInvalidOption))
		}
		c.onError = fn
	})
}

// WithOptions passes options of the shared flow (keyfuncs.WithKey,
// keyfuncs.WithCost, ...) as they are, in order with the other options:
// a configuration shared by every framework adapter can be written once as
// []keyfuncs.Option.
func WithOptions(opts ...keyfuncs.Option) Option {
	return optionFunc(func(c *config) { c.kopts = append(c.kopts, opts...) })
}

// WithPerMessage turns on per-message pacing for streams: besides the check
// when a stream opens, every message the handler receives (RecvMsg) takes
// its cost from the same tiers, keyed the same way. A message that finds no
// token is not failed but held: RecvMsg returns it only once its tokens are
// there, waiting out the decision's RetryAfter (and a shaping tier's delay)
// and asking again, so the client is slowed down through HTTP/2 flow
// control instead of losing its stream. RecvMsg fails, ending the stream,
// only when no wait can help: the cost is above a tier's burst
// (codes.ResourceExhausted), the wait would outlast the stream's deadline
// (codes.ResourceExhausted), the store fails under core.FailClosed
// (codes.Unavailable), a key or cost function fails, or the stream's
// context ends.
//
// cost prices each received message in tokens (msg is the decoded message);
// nil prices every message at 1. It has no effect on
// UnaryServerInterceptor, so one option list can serve both constructors.
func WithPerMessage(cost func(r keyfuncs.Request, msg any) (int64, error)) Option {
	return optionFunc(func(c *config) { c.perMessage, c.msgCost = true, cost })
}
