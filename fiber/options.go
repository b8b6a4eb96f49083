package fiberlimit

import (
	"fmt"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// Option configures the middleware; pass options to New. The options that
// shape the decision (WithKey, WithKeyFunc, WithPlan, WithCost, WithSkip,
// WithHeaderFormat, WithHeadersOnAllow, WithOptions) are those of
// keyfuncs.NewMiddleware and mean the same in every adapter; WithKeyFunc,
// WithDenyHandler and WithErrorHandler take fiber types. Options are applied
// in order.
type Option interface{ apply(*config) }

type config struct {
	shared  []keyfuncs.Option
	deny    func(*fiber.Ctx, *core.Decision) error
	onError func(*fiber.Ctx, error) error
	errs    []error
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: "+format, append([]any{core.ErrInvalidOption}, args...)...))
}

// WithKey sets the key function of scope (core.ScopeUser, core.ScopeIP,
// core.ScopeEndpoint or a core.Dimension) to a framework-neutral function,
// as keyfuncs.WithKey does. Without it ScopeIP is keyed by the TCP peer
// (keyfuncs.ClientIP() trusts no proxy, whatever fiber's own
// EnableTrustedProxyCheck and ProxyHeader say), ScopeEndpoint by the method
// and route template (keyfuncs.Endpoint(): "GET /items/:id", from the
// route's registered path), and other scopes have no key, which New rejects
// when the limiter's policy has an enabled rule on them. One scope takes
// one key function, given by WithKey or WithKeyFunc.
//
// The request view that fn reads copies every string it returns out of
// fasthttp's buffers, so a key may outlive the request.
func WithKey(scope core.Scope, fn keyfuncs.Func) Option {
	return optionFunc(func(c *config) { c.shared = append(c.shared, keyfuncs.WithKey(scope, fn)) })
}

// WithKeyFunc sets the key function of scope to a native one that reads the
// *fiber.Ctx, for keys that only fiber code can reach, such as a value an
// authentication middleware stored with c.Locals. fn returns the identity,
// keyfuncs.ErrNotApplicable when the tier does not apply to the request (no
// user on an anonymous request), or another error, which goes to the error
// handler. It is called on the request's goroutine and must not keep c,
// which fiber reuses for another request once the handlers return. Give
// each route its own middleware to key each route its own way.
//
// fn may return a string that aliases fasthttp's buffers, such as
// c.Get("X-User") or c.Params("id") without fiber's Immutable setting: the
// middleware copies the key before it goes to the store, which keeps it
// past the request.
func WithKeyFunc(scope core.Scope, fn func(c *fiber.Ctx) (string, error)) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			c.fail("WithKeyFunc(%q): nil key function", scope)
			return
		}
		c.shared = append(c.shared, keyfuncs.WithKey(scope, native(fn)))
	})
}

// native adapts a key function over *fiber.Ctx to a keyfuncs.Func. The
// middleware only ever passes it a request view of this package.
func native(fn func(*fiber.Ctx) (string, error)) keyfuncs.Func {
	return func(kr keyfuncs.Request) (string, error) {
		v, ok := kr.(request)
		if !ok {
			return "", fmt.Errorf("fiberlimit: WithKeyFunc: a %T is not a fiber request", kr)
		}
		key, err := fn(v.c)
		if err != nil {
			return "", err
		}
		// Strings that fiber hands out (c.Get, c.Params, c.Query, ...) point
		// into fasthttp's buffers, which the next request on the
		// connection overwrites, unless the app is Immutable. The memory
		// store keeps keys in its table and the Redis stores may batch
		// them, so the key must own its bytes.
		return strings.Clone(key), nil
	}
}

// WithPlan sets the function that reads the caller's plan ("free", "pro"),
// which selects the rules that apply; keyfuncs.ErrNotApplicable means no
// plan, so only the rules for every plan apply. Without it no request has a
// plan.
func WithPlan(fn keyfuncs.Func) Option {
	return optionFunc(func(c *config) { c.shared = append(c.shared, keyfuncs.WithPlan(fn)) })
}

// WithCost sets the function that prices a request in tokens, from 0 (a
// read that consumes nothing) to core.MaxCost. Without it every request
// costs 1. A negative or too large cost is a client error (400 by default);
// an error from fn is a server error (500 by default).
func WithCost(fn func(keyfuncs.Request) (int64, error)) Option {
	return optionFunc(func(c *config) { c.shared = append(c.shared, keyfuncs.WithCost(fn)) })
}

// WithSkip sets a function that exempts requests from limiting: when it
// returns true the request goes to the next handler with no decision and no
// rate-limit header fields. Without it no request is exempt.
func WithSkip(fn func(keyfuncs.Request) bool) Option {
	return optionFunc(func(c *config) { c.shared = append(c.shared, keyfuncs.WithSkip(fn)) })
}

// WithHeaderFormat sets which rate-limit header fields are sent and how (see
// core.NewHeaderFormat). The default is core.NewHeaderFormat(): every field.
// fasthttp normalizes response header names ("X-Ratelimit-Limit") unless the
// app sets DisableHeaderNormalizing, whatever the format's NameCase; field
// names are case-insensitive (RFC 9110 section 5.1), so clients see no
// difference.
func WithHeaderFormat(f *core.HeaderFormat) Option {
	return optionFunc(func(c *config) { c.shared = append(c.shared, keyfuncs.WithHeaderFormat(f)) })
}

// WithHeadersOnAllow says whether allowed responses carry the rate-limit
// header fields too; denials always do. The default is true.
func WithHeadersOnAllow(on bool) Option {
	return optionFunc(func(c *config) { c.shared = append(c.shared, keyfuncs.WithHeadersOnAllow(on)) })
}

// WithOptions passes framework-neutral keyfuncs options as they are, in
// order among the other options: a set of options shared by the net/http,
// gin, fiber and gRPC middleware of one service is written once.
func WithOptions(opts ...keyfuncs.Option) Option {
	return optionFunc(func(c *config) {
		for i, o := range opts {
			if o == nil {
				c.fail("WithOptions: option %d is nil", i)
				continue
			}
			c.shared = append(c.shared, o)
		}
	})
}

// WithDenyHandler sets the handler that answers a request the limiter
// denied, in place of the default 429 (or 503, when the store failed and
// the limiter fails closed) with an application/problem+json body. When it
// is called, the rate-limit header fields, Retry-After and Cache-Control are
// already set, and so is the status (429 or 503), which the handler may
// change with c.Status; it writes the body. d is the denial (d.Reason is
// core.ReasonUnavailable for a store failure); it is a copy the handler may
// keep. Its error is returned to fiber, which hands it to the app's
// ErrorHandler. The next handler is not called.
func WithDenyHandler(fn func(c *fiber.Ctx, d *core.Decision) error) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			c.fail("WithDenyHandler: nil handler")
			return
		}
		c.deny = fn
	})
}

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
// returns that context's error (context.DeadlineExceeded or
// context.Canceled, nothing of the limiter's) to fiber: fasthttp never
// cancels a request, so the context is the app's own (a UserContext with a
// deadline, such as fiber's timeout middleware sets, which turns
// DeadlineExceeded into 408), and the app decides the answer. The next
// handler is not called.
func WithErrorHandler(fn func(c *fiber.Ctx, err error) error) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			c.fail("WithErrorHandler: nil handler")
			return
		}
		c.onError = fn
	})
}
