package grpcinterceptor

import (
	"context"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// adapter names this package's options, so that flow.New refuses them in
// another adapter's constructor.
const adapter = "grpcinterceptor"

// Option configures an interceptor; pass the same options to
// UnaryServerInterceptor and StreamServerInterceptor. The options that
// shape the decision are those of package flow (flow.WithKey,
// flow.WithRouteKey, flow.WithPlan, flow.WithCost, flow.WithSkip,
// flow.WithHeaderFormat, flow.WithHeadersOnAllow) and mean the same in
// every adapter (the package documentation says what they do to calls and
// streams); this package adds the ones that take gRPC types. Options are
// applied in order.
type Option = flow.Option

// DenyHandler returns the error sent for a denied call: see
// WithDenyHandler.
type DenyHandler = func(ctx context.Context, d *core.Decision) error

// ErrorHandler returns the error sent for a call that could not be
// decided: see WithErrorHandler.
type ErrorHandler = func(ctx context.Context, err error) error

const perMessageName = "WithPerMessage"

// WithKeyFunc sets the key function of scope to a native gRPC function of
// the call's context (which carries the incoming metadata, the peer and
// whatever an authentication interceptor put there) and its full method,
// "/package.Service/Method". It returns keyfuncs.ErrNotApplicable when the
// tier does not apply to the call, and any other error when it cannot
// decide, which goes to the error handler. One scope takes one key
// function, given by flow.WithKey (keyfuncs.Metadata("x-user"),
// keyfuncs.GRPCMethod(), ...) or WithKeyFunc. Without either, ScopeIP is
// keyed by the TCP peer's address and ScopeEndpoint by the full method;
// other scopes are not keyed, and a rule on one makes the constructors
// fail.
func WithKeyFunc(scope core.Scope, fn func(ctx context.Context, fullMethod string) (string, error)) Option {
	if fn == nil {
		return flow.NativeKey[*view](adapter, scope, nil)
	}
	return flow.NativeKey(adapter, scope, func(v *view) (string, error) { return fn(v.ctx, v.fullMethod) })
}

// WithPlanFunc sets the plan function to a native gRPC function of the
// call's context and its full method, as WithKeyFunc's are: it reads the
// plan an authentication interceptor put in the context, say. fn returns
// the plan, keyfuncs.ErrNotApplicable for none (the policy's default plan
// applies), or another error, which goes to the error handler. It
// replaces flow.WithPlan; the last of the two given wins.
func WithPlanFunc(fn func(ctx context.Context, fullMethod string) (string, error)) Option {
	if fn == nil {
		return flow.NativePlan[*view](adapter, nil)
	}
	return flow.NativePlan(adapter, func(v *view) (string, error) { return fn(v.ctx, v.fullMethod) })
}

// WithCostFunc sets the cost function to a native gRPC function of the
// call's context and its full method: fn returns the call's cost in
// tokens, from 0 (consumes nothing) to core.MaxCost, or an error, which
// goes to the error handler; a negative cost is codes.InvalidArgument. On
// a stream it prices the opening; WithPerMessage prices its messages. It
// replaces flow.WithCost; the last of the two given wins.
func WithCostFunc(fn func(ctx context.Context, fullMethod string) (int64, error)) Option {
	if fn == nil {
		return flow.NativeCost[*view](adapter, nil)
	}
	return flow.NativeCost(adapter, func(v *view) (int64, error) { return fn(v.ctx, v.fullMethod) })
}

// WithSkipFunc sets the skip function to a native gRPC function of the
// call's context and its full method: a call it returns true for (a health
// check, reflection, an internal caller) proceeds unlimited, with no
// rate-limit metadata, and a stream it returns true for is neither checked
// nor paced. It replaces flow.WithSkip; the last of the two given wins.
func WithSkipFunc(fn func(ctx context.Context, fullMethod string) bool) Option {
	if fn == nil {
		return flow.NativeSkip[*view](adapter, nil)
	}
	return flow.NativeSkip(adapter, func(v *view) bool { return fn(v.ctx, v.fullMethod) })
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
func WithDenyHandler(fn DenyHandler) Option { return flow.DenyHandler(adapter, fn) }

// WithErrorHandler sets the function that returns the error sent when a
// call cannot be decided: a key, plan or cost function failed, the input is
// invalid (a key too long or with control characters, a negative cost), or
// the call's context ended. It should return a status error; nil sends the
// default one. The default maps the flow.Outcome: input the client
// controls (flow.BadInput) is codes.InvalidArgument with the error's text,
// an ended context (flow.ClientGone) is codes.Canceled or
// codes.DeadlineExceeded, and any other error (flow.Failed) is
// codes.Internal with a fixed message, since key functions may fail with
// text not meant for clients. Log err here.
func WithErrorHandler(fn ErrorHandler) Option { return flow.ErrorHandler(adapter, fn) }

// perMessage is the setting of WithPerMessage: a struct, so that a nil
// cost (every message costs 1) is a value flow.Native accepts.
type perMessage struct {
	cost func(r keyfuncs.Request, msg any) (int64, error)
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
	return flow.Native(adapter, perMessageName, perMessage{cost: cost})
}
