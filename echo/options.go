package echolimit

import (
	"github.com/labstack/echo/v4"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
)

// adapter names this package's options, so that flow.New refuses them in
// another adapter's constructor.
const adapter = "echolimit"

// Option configures the middleware; pass options to New. The options that
// shape the decision are those of package flow (flow.WithKey,
// flow.WithRouteKey, flow.WithPlan, flow.WithCost, flow.WithSkip,
// flow.WithHeaderFormat, flow.WithHeadersOnAllow) and mean the same in
// every adapter; this package adds the ones that take Echo types. Options
// are applied in order.
type Option = flow.Option

// DenyHandler answers a request the limiter denied: see WithDenyHandler.
type DenyHandler = func(c echo.Context, d *core.Decision) error

// ErrorHandler answers a request that could not be decided: see
// WithErrorHandler.
type ErrorHandler = func(c echo.Context, err error) error

// WithKeyFunc sets the key function of scope to a native one that reads the
// echo.Context, for keys that only Echo code can reach, such as a value an
// authentication middleware stored with c.Set. fn returns the identity,
// keyfuncs.ErrNotApplicable when the tier does not apply to the request (no
// user on an anonymous request), or another error, which goes to the error
// handler. It is called on the request's goroutine and must not keep c,
// which Echo reuses for another request once the handlers return. One
// scope takes one key function, given by flow.WithKey or WithKeyFunc.
// Without either, ScopeIP is keyed by the TCP peer (keyfuncs.ClientIP()
// trusts no proxy, whatever the Echo instance's IPExtractor) and
// ScopeEndpoint by the method and route ("GET /items/{id}", from Echo's
// route template "/items/:id" in the shared form).
func WithKeyFunc(scope core.Scope, fn func(c echo.Context) (string, error)) Option {
	return flow.NativeKey(adapter, scope, fn)
}

// WithPlanFunc sets the plan function to a native one that reads the
// echo.Context, such as the plan an authentication middleware stored with
// c.Set: fn returns the plan, keyfuncs.ErrNotApplicable for none (the
// policy's default plan applies), or another error, which goes to the
// error handler. It replaces flow.WithPlan.
func WithPlanFunc(fn func(c echo.Context) (string, error)) Option {
	return flow.NativePlan(adapter, fn)
}

// WithCostFunc sets the cost function to a native one that reads the
// echo.Context: fn returns the request's cost in tokens, or an error,
// which goes to the error handler. It replaces flow.WithCost.
func WithCostFunc(fn func(c echo.Context) (int64, error)) Option {
	return flow.NativeCost(adapter, fn)
}

// WithSkipFunc sets the skip function to a native one that reads the
// echo.Context: a request it returns true for proceeds unlimited, with no
// header fields. It replaces flow.WithSkip.
func WithSkipFunc(fn func(c echo.Context) bool) Option { return flow.NativeSkip(adapter, fn) }

// WithDenyHandler sets the handler that answers a request the limiter
// denied, in place of the default 429 (or 503, when the store failed and
// the limiter fails closed) with an application/problem+json body. When it
// is called, the rate-limit header fields, Retry-After and Cache-Control
// are set on c.Response().Header(), and the pending status
// (c.Response().Status) is 429 (or 503); the next handler is not called.
// The handler writes the answer (c.JSON(http.StatusTooManyRequests, ...)),
// or writes only a body, which goes out with the pending status, or
// returns an error, which the middleware returns to Echo for its
// HTTPErrorHandler (an *echo.HTTPError with the status and message to
// send). When it returns nil having written nothing, the middleware
// answers the pending status with an empty body. d is the denial
// (d.Reason is core.ReasonUnavailable for a store failure); it is a copy
// the handler may keep, unlike c.
func WithDenyHandler(fn DenyHandler) Option { return flow.DenyHandler(adapter, fn) }

// WithErrorHandler sets the handler that answers a request that could not
// be decided: a key, plan or cost function failed, the client sent input no
// limit can accept (a key too long, a negative cost), the middleware was
// installed twice over one limiter (flow.ErrInstalledTwice), the route
// it needs is unknown (flow.ErrRouteUnknown), or the request's context
// ended. When it is called the pending status (c.Response().Status) is
// the default's (below; untouched when the context ended), and the next
// handler is not called. Its error, if any, is returned to Echo; when it
// returns nil having written nothing, the middleware answers the pending
// status with an empty body.
//
// The default returns to Echo an *echo.HTTPError of status 400 for the
// client's input (errors wrapping core.ErrInvalidKey, core.ErrInvalidCost
// or keyfuncs.ErrNoAddress) and 500 otherwise, whose Message is the status
// text and whose Internal is err: Echo's HTTPErrorHandler answers it in
// the application's own error format (DefaultHTTPErrorHandler:
// {"message":"Bad Request"}), and Echo's request loggers record err, which
// errors.Is and errors.As reach through the HTTPError. err is not meant
// for the client: it may name keys, rules or a store address, and
// DefaultHTTPErrorHandler shows it only with e.Debug set, which no
// production server sets; a custom HTTPErrorHandler should answer
// HTTPError.Message, not err.Error(). When the request's context ended
// (the client is gone), the default returns the context's error to Echo.
func WithErrorHandler(fn ErrorHandler) Option { return flow.ErrorHandler(adapter, fn) }
