package chilimit

import (
	"net/http"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
)

// adapter names this package's options, so that flow.New refuses them in
// another adapter's constructor.
const adapter = "chilimit"

// Option configures a Middleware; pass options to New. The options that
// shape the decision are those of package flow (flow.WithKey,
// flow.WithRouteKey, flow.WithPlan, flow.WithCost, flow.WithSkip,
// flow.WithHeaderFormat, flow.WithHeadersOnAllow) and mean the same in
// every adapter; this package adds the ones that take net/http types.
// Options are applied in order.
type Option = flow.Option

// DenyHandler answers a request the limiter denied: see WithDenyHandler.
type DenyHandler = func(w http.ResponseWriter, r *http.Request, d *core.Decision)

// ErrorHandler answers a request that could not be decided: see
// WithErrorHandler.
type ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error)

// WithKeyFunc sets the key function of scope to a native one that reads the
// *http.Request, for keys that only net/http code can reach, such as a
// value an authentication middleware put in the request's context. fn
// returns the identity, keyfuncs.ErrNotApplicable when the tier does not
// apply to the request (no user on an anonymous request), or another
// error, which goes to the error handler. It is called on the request's
// goroutine and must not keep the request. While it runs, r.Pattern is
// chi's pattern of the route the request reaches ("/items/{id:[0-9]+}",
// "" for none or when the route is unknown), even under r.Use, before chi
// has routed the request; chi's URL parameters (chi.URLParam) are not set
// then. The native plan, cost and skip functions see the same request.
// One scope takes one key function, given by
// flow.WithKey or WithKeyFunc. Without either, ScopeIP is keyed by the
// TCP peer (keyfuncs.ClientIP() trusts no proxy) and ScopeEndpoint by the
// method and the route, "GET /items/{id}".
func WithKeyFunc(scope core.Scope, fn func(*http.Request) (string, error)) Option {
	return flow.NativeKey(adapter, scope, fn)
}

// WithPlanFunc sets the plan function to a native one that reads the
// *http.Request, such as the plan an authentication middleware put in its
// context: fn returns the plan, keyfuncs.ErrNotApplicable for none (the
// policy's default plan applies), or another error, which goes to the
// error handler. It replaces flow.WithPlan.
func WithPlanFunc(fn func(*http.Request) (string, error)) Option { return flow.NativePlan(adapter, fn) }

// WithCostFunc sets the cost function to a native one that reads the
// *http.Request: fn returns the request's cost in tokens, or an error,
// which goes to the error handler. It replaces flow.WithCost.
func WithCostFunc(fn func(*http.Request) (int64, error)) Option { return flow.NativeCost(adapter, fn) }

// WithSkipFunc sets the skip function to a native one that reads the
// *http.Request: a request it returns true for proceeds unlimited, with no
// header fields. It replaces flow.WithSkip.
func WithSkipFunc(fn func(*http.Request) bool) Option { return flow.NativeSkip(adapter, fn) }

// WithDenyHandler sets the handler that answers a request the limiter
// denied, in place of the default 429 (or 503, when the store failed and
// the limiter fails closed) with an application/problem+json body. When it
// is called, the rate-limit header fields, Retry-After and Cache-Control are
// already set on w.Header(); it writes the status and the body. d is the
// denial (d.Reason is core.ReasonUnavailable for a store failure); it is a
// copy the handler may keep. The next handler is not called.
func WithDenyHandler(fn DenyHandler) Option { return flow.DenyHandler(adapter, fn) }

// WithErrorHandler sets the handler that answers a request that could not
// be decided: a key, plan or cost function failed, the client sent input no
// limit can accept (a key too long, a negative cost), the request's
// context ended, the route is unknown where the middleware runs
// (flow.ErrRouteUnknown), or a second middleware over the same limiter
// checked the request (flow.ErrInstalledTwice). The default answers 400 for
// the client's input (errors wrapping core.ErrInvalidKey,
// core.ErrInvalidCost or keyfuncs.ErrNoAddress), writes nothing when the
// context ended (the client is gone), and answers 500 otherwise, each with
// its status text as a plain-text body, so that no internal detail reaches
// the client. The next handler is not called.
func WithErrorHandler(fn ErrorHandler) Option { return flow.ErrorHandler(adapter, fn) }
