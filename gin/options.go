package ginlimit

import (
	"github.com/gin-gonic/gin"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
)

// adapter names this package's options, so that flow.New refuses them in
// another adapter's constructor.
const adapter = "ginlimit"

// Option configures the middleware; pass options to New. The options that
// shape the decision are those of package flow (flow.WithKey,
// flow.WithPlan, flow.WithCost, flow.WithSkip, flow.WithHeaderFormat,
// flow.WithHeadersOnAllow) and mean the same in every adapter; this
// package adds the ones that take gin types. Options are applied in order.
type Option = flow.Option

// DenyHandler answers a request the limiter denied: see WithDenyHandler.
type DenyHandler = func(c *gin.Context, d *core.Decision)

// ErrorHandler answers a request that could not be decided: see
// WithErrorHandler.
type ErrorHandler = func(c *gin.Context, err error)

// WithKeyFunc sets the key function of scope to a native one that reads the
// *gin.Context, for keys that only gin code can reach, such as a value an
// authentication middleware stored with c.Set. fn returns the identity,
// keyfuncs.ErrNotApplicable when the tier does not apply to the request (no
// user on an anonymous request), or another error, which goes to the error
// handler. It is called on the request's goroutine and must not keep c,
// which gin reuses for another request once the handlers return. One scope
// takes one key function, given by flow.WithKey or WithKeyFunc. Without
// either, ScopeIP is keyed by the TCP peer (keyfuncs.ClientIP() trusts no
// proxy, whatever the engine's trusted proxies) and ScopeEndpoint by the
// method and route ("GET /items/{id}", from gin.Context.FullPath in the
// shared form).
func WithKeyFunc(scope core.Scope, fn func(c *gin.Context) (string, error)) Option {
	return flow.NativeKey(adapter, scope, fn)
}

// WithPlanFunc sets the plan function to a native one that reads the
// *gin.Context, such as the plan an authentication middleware stored with
// c.Set: fn returns the plan, keyfuncs.ErrNotApplicable for none (the
// policy's default plan applies), or another error, which goes to the
// error handler. It replaces flow.WithPlan.
func WithPlanFunc(fn func(c *gin.Context) (string, error)) Option {
	return flow.NativePlan(adapter, fn)
}

// WithCostFunc sets the cost function to a native one that reads the
// *gin.Context: fn returns the request's cost in tokens, or an error,
// which goes to the error handler. It replaces flow.WithCost.
func WithCostFunc(fn func(c *gin.Context) (int64, error)) Option { return flow.NativeCost(adapter, fn) }

// WithSkipFunc sets the skip function to a native one that reads the
// *gin.Context: a request it returns true for proceeds unlimited, with no
// header fields. It replaces flow.WithSkip.
func WithSkipFunc(fn func(c *gin.Context) bool) Option { return flow.NativeSkip(adapter, fn) }

// WithDenyHandler sets the handler that answers a request the limiter
// denied, in place of the default 429 (or 503, when the store failed and
// the limiter fails closed) with an application/problem+json body. When it
// is called, the context is already aborted (c.IsAborted() is true, so the
// next handlers do not run), the rate-limit header fields, Retry-After and
// Cache-Control are set on c.Writer.Header(), and the pending status is 429
// (or 503); the handler writes the body, and may write another status
// (c.JSON(http.StatusTooManyRequests, ...)). d is the denial (d.Reason is
// core.ReasonUnavailable for a store failure); it is a copy the handler may
// keep, unlike c.
func WithDenyHandler(fn DenyHandler) Option { return flow.DenyHandler(adapter, fn) }

// WithErrorHandler sets the handler that answers a request that could not
// be decided: a key, plan or cost function failed, the client sent input no
// limit can accept (a key too long, a negative cost), or the request's
// context ended. When it is called the context is already aborted, so the
// next handlers do not run, and the pending status is the default's (below;
// none when the context ended).
//
// The default records err on the context (c.Error, so that gin's Logger and
// the service's error middleware see it) and answers 400 for the client's
// input (errors wrapping core.ErrInvalidKey, core.ErrInvalidCost or
// keyfuncs.ErrNoAddress) and 500 otherwise, each with its status text as a
// plain-text body, so that no internal detail reaches the client; when the
// request's context ended (the client is gone) it writes nothing.
func WithErrorHandler(fn ErrorHandler) Option { return flow.ErrorHandler(adapter, fn) }
