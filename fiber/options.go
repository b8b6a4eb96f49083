package fiberlimit

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
)

// adapter names this package's options, so that flow.New refuses them in
// another adapter's constructor.
const adapter = "fiberlimit"

// Option configures the middleware; pass options to New. The options that
// shape the decision are those of package flow (flow.WithKey,
// flow.WithPlan, flow.WithCost, flow.WithSkip, flow.WithHeaderFormat,
// flow.WithHeadersOnAllow) and mean the same in every adapter; this
// package adds the ones that take fiber types. Options are applied in
// order.
type Option = flow.Option

// DenyHandler answers a request the limiter denied: see WithDenyHandler.
type DenyHandler = func(c *fiber.Ctx, d *core.Decision) error

// ErrorHandler answers a request that could not be decided: see
// WithErrorHandler.
type ErrorHandler = func(c *fiber.Ctx, err error) error

// WithKeyFunc sets the key function of scope to a native one that reads the
// *fiber.Ctx, for keys that only fiber code can reach, such as a value an
// authentication middleware stored with c.Locals. fn returns the identity,
// keyfuncs.ErrNotApplicable when the tier does not apply to the request (no
// user on an anonymous request), or another error, which goes to the error
// handler. It is called on the request's goroutine and must not keep c,
// which fiber reuses for another request once the handlers return. One
// scope takes one key function, given by flow.WithKey or WithKeyFunc.
// Without either, ScopeIP is keyed by the TCP peer (keyfuncs.ClientIP()
// trusts no proxy, whatever fiber's EnableTrustedProxyCheck and
// ProxyHeader say) and ScopeEndpoint by the method and route ("GET
// /items/{id}", from the route's registered path in the shared form).
//
// fn may return a string that aliases fasthttp's buffers, such as
// c.Get("X-User") or c.Params("id") without fiber's Immutable setting: the
// middleware copies the key before it goes to the store, which keeps it
// past the request.
func WithKeyFunc(scope core.Scope, fn func(c *fiber.Ctx) (string, error)) Option {
	var owned func(*fiber.Ctx) (string, error) // nil for a nil fn, which flow refuses
	if fn != nil {
		owned = func(c *fiber.Ctx) (string, error) {
			key, err := fn(c)
			if err != nil {
				return "", err
			}
			// Strings that fiber hands out (c.Get, c.Params, c.Query, ...)
			// point into fasthttp's buffers, which the next request on the
			// connection overwrites, unless the app is Immutable. The memory
			// store keeps keys in its table and the Redis stores may batch
			// them, so the key must own its bytes.
			return strings.Clone(key), nil
		}
	}
	return flow.NativeKey(adapter, scope, owned)
}

// WithPlanFunc sets the plan function to a native one that reads the
// *fiber.Ctx, such as the plan an authentication middleware stored with
// c.Locals: fn returns the plan, keyfuncs.ErrNotApplicable for none (the
// policy's default plan applies), or another error, which goes to the
// error handler. The plan is copied, as WithKeyFunc copies keys. It
// replaces flow.WithPlan.
func WithPlanFunc(fn func(c *fiber.Ctx) (string, error)) Option {
	var owned func(*fiber.Ctx) (string, error) // nil for a nil fn, which flow refuses
	if fn != nil {
		owned = func(c *fiber.Ctx) (string, error) {
			p, err := fn(c)
			return strings.Clone(p), err
		}
	}
	return flow.NativePlan(adapter, owned)
}

// WithCostFunc sets the cost function to a native one that reads the
// *fiber.Ctx: fn returns the request's cost in tokens, or an error, which
// goes to the error handler. It replaces flow.WithCost.
func WithCostFunc(fn func(c *fiber.Ctx) (int64, error)) Option { return flow.NativeCost(adapter, fn) }

// WithSkipFunc sets the skip function to a native one that reads the
// *fiber.Ctx: a request it returns true for proceeds unlimited, with no
// header fields. It replaces flow.WithSkip.
func WithSkipFunc(fn func(c *fiber.Ctx) bool) Option { return flow.NativeSkip(adapter, fn) }

// WithDenyHandler sets the handler that answers a request the limiter
// denied, in place of the default 429 (or 503, when the store failed and
// the limiter fails closed) with an application/problem+json body. When it
// is called, the rate-limit header fields, Retry-After and Cache-Control are
// already set, and so is the status (429 or 503), which the handler may
// change with c.Status; it writes the body. d is the denial (d.Reason is
// core.ReasonUnavailable for a store failure); it is a copy the handler may
// keep. Its error is returned to fiber, which hands it to the app's
// ErrorHandler. The next handler is not called.
func WithDenyHandler(fn DenyHandler) Option { return flow.DenyHandler(adapter, fn) }

// WithErrorHandler sets the handler that answers a request that could not
// be decided: a key, plan or cost function failed, the client sent input no
// limit can accept (a key too long, a negative cost), or the request's
// context ended. When it is called the status is already set to the one the
// default would answer (400 or 500), which the handler may change; its
// error is returned to fiber. To let the app's ErrorHandler answer, return
// a *fiber.Error rather than err itself: fiber's DefaultErrorHandler sends
// err.Error() as the body, and err may name keys, rules or a store address.
//
// The default answers 400 for the client's input (errors wrapping
// core.ErrInvalidKey, core.ErrInvalidCost or keyfuncs.ErrNoAddress) and 500
// otherwise, each with its status text as a plain-text body, so that no
// internal detail reaches the client. When the request's context ended it
// returns that context's error to fiber, which decides the answer (fiber's
// timeout middleware answers 408; see the package documentation). The next
// handler is not called.
func WithErrorHandler(fn ErrorHandler) Option { return flow.ErrorHandler(adapter, fn) }
