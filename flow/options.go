package flow

import (
	"fmt"
	"reflect"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// Option configures an Engine, and so the middleware of every adapter:
// nethttp.New, ginlimit.New, fiberlimit.New and the grpcinterceptor
// constructors all take Options. The options of this package mean the same
// in every adapter; an adapter's own options (a deny handler of its
// framework's type, a key function over its native request) are Options
// too, built with Native and NativeKey, and are refused by the other
// adapters. Options are applied in order; a nil Option is an error.
type Option interface{ apply(*config) }

// config is what the options set, while New applies them.
type config struct {
	adapter   string
	routeKeys []routeKeyOption
	settings
	errs []error
}

type routeKeyOption struct {
	sel   core.RouteSelector
	scope core.Scope
	fn    keyfuncs.Func
}

// settings are what an Engine keeps of its options.
type settings struct {
	adapter string
	keys    []scopedFunc
	plan    keyfuncs.Func
	cost    func(keyfuncs.Request) (int64, error)
	skip    func(keyfuncs.Request) bool
	format  *core.HeaderFormat
	onAllow bool
	native  map[string]any // by setting name (see Native)
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: "+format, append([]any{core.ErrInvalidOption}, args...)...))
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithKey sets the key function of scope: core.ScopeUser, core.ScopeIP,
// core.ScopeEndpoint or a core.Dimension. Without it, ScopeIP is keyed by
// keyfuncs.ClientIP() (the TCP peer: no proxy is trusted), ScopeEndpoint by
// keyfuncs.Endpoint() (the route template, or the gRPC method), and the
// other scopes are not keyed, so New rejects a policy with an enabled rule
// on them. One scope takes one key function. A key function runs only while
// an enabled rule of the policy in force limits its scope: with no
// endpoint rule, no endpoint key is built, and with no per-ip rule a
// request without a usable client address is not refused.
func WithKey(scope core.Scope, fn keyfuncs.Func) Option {
	return optionFunc(func(c *config) {
		switch {
		case fn == nil:
			c.fail("WithKey(%q): nil key function", scope)
		case !scope.Valid() || scope == core.ScopeGlobal:
			c.fail("WithKey(%q): want user, ip, endpoint or a core.Dimension", scope)
		default:
			c.addKey(scope, fn)
		}
	})
}

// WithRouteKey sets the key function of scope on the routes route selects
// ("GET /search", "/search", a gRPC method; see core.ParseRoute), in place
// of the scope's key function given by WithKey, if any: a route keyed its
// own way (an API key on /search, a user elsewhere), installed once with
// the other options. A scope keyed only by WithRouteKey has no identity on
// other routes, so New refuses a rule on it that is not limited
// (core.Rule.Routes) to routes its key functions cover. Give a scope's
// route key functions in the order to try them; the first whose selector
// matches the request keys it. The identities either key returns count in
// the same buckets of the scope's rules: key a credential of another kind
// (an API key where the scope holds user ids) under a core.Dimension of
// its own, so that equal strings of the two kinds never share a bucket.
func WithRouteKey(route string, scope core.Scope, fn keyfuncs.Func) Option {
	return optionFunc(func(c *config) {
		sel, err := core.ParseRoute(route)
		switch {
		case err != nil:
			c.errs = append(c.errs, fmt.Errorf("%w: WithRouteKey(%q, %q): %w", core.ErrInvalidOption, route, scope, err))
		case fn == nil:
			c.fail("WithRouteKey(%q, %q): nil key function", route, scope)
		case !scope.Valid() || scope == core.ScopeGlobal:
			c.fail("WithRouteKey(%q, %q): want user, ip, endpoint or a core.Dimension", route, scope)
		default:
			c.routeKeys = append(c.routeKeys, routeKeyOption{sel: sel, scope: scope, fn: fn})
		}
	})
}

// When returns a predicate for core.Rule.When that calls fn with the
// middleware's request view: a rule that applies to the requests fn
// returns true for (a header present, a query parameter). Outside a
// middleware (a core.Request with no view) the rule does not apply. Where
// the middleware cannot tell the route, a request whose predicate reads
// the view's Route fails with ErrRouteUnknown (see RouteReadReporter);
// core.Request.Route is "" there.
func When(fn func(keyfuncs.Request) bool) func(*core.Request) bool {
	return func(r *core.Request) bool {
		v, ok := r.View.(keyfuncs.Request)
		return ok && fn(v)
	}
}

func (c *config) addKey(scope core.Scope, fn keyfuncs.Func) {
	dim, _ := scope.Dimension()
	c.keys = append(c.keys, scopedFunc{scope: scope, dim: dim, fn: fn})
}

// WithPlan sets the function that reads the caller's plan ("free", "pro"),
// which selects the rules that apply. keyfuncs.ErrNotApplicable means no
// plan: the request gets the policy's default plan (core.Plans.Default),
// or, with no default, fails as BadInput wrapping core.ErrUnknownPlan.
// Without it no request has a plan, and each gets the same.
func WithPlan(fn keyfuncs.Func) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			c.fail("WithPlan: nil function")
		}
		c.plan = fn
	})
}

// WithCost sets the function that prices a request in tokens, from 0 (a
// read that consumes nothing) to core.MaxCost. Without it every request
// costs 1. A negative or too large cost is BadInput; an error from fn is
// Failed.
func WithCost(fn func(keyfuncs.Request) (int64, error)) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			c.fail("WithCost: nil function")
		}
		c.cost = fn
	})
}

// WithSkip sets a function that exempts requests from limiting: when it
// returns true the request proceeds with no decision and no header fields
// (Skipped). Without it no request is exempt.
func WithSkip(fn func(keyfuncs.Request) bool) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			c.fail("WithSkip: nil function")
		}
		c.skip = fn
	})
}

// WithHeaderFormat sets which rate-limit header fields are sent and how
// (see core.NewHeaderFormat). Each adapter has its default, which its
// documentation states: every field, with names as net/http canonicalizes
// them for nethttp and gin (core.NamesCanonical: field names are
// case-insensitive, RFC 9110 section 5.1, and canonical names spare a
// conversion per response), names as specified for fiber (fasthttp
// normalizes them), lower-case names without Retry-After and Cache-Control
// for gRPC. Without an adapter default, core.NewHeaderFormat().
func WithHeaderFormat(f *core.HeaderFormat) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.fail("WithHeaderFormat: nil format")
		}
		c.format = f
	})
}

// WithHeaderOptions sets the header format to core.NewHeaderFormat(opts...):
// WithHeaderFormat without the error to handle at the call site. An error
// of core.NewHeaderFormat is New's error.
func WithHeaderOptions(opts ...core.HeaderOption) Option {
	return optionFunc(func(c *config) {
		f, err := core.NewHeaderFormat(opts...)
		if err != nil {
			c.errs = append(c.errs, fmt.Errorf("WithHeaderOptions: %w", err))
			return
		}
		c.format = f
	})
}

// WithHeadersOnAllow says whether allowed requests get the rate-limit
// fields too; denials always do. The default is true.
func WithHeadersOnAllow(on bool) Option {
	return optionFunc(func(c *config) { c.onAllow = on })
}

// Native returns an option of one adapter: the setting name (the option's
// name, "WithDenyHandler") with value v, which the adapter reads back with
// Engine.Native. Given to another adapter's constructor it is an error, so
// that a gin deny handler passed to net/http is never silently dropped; so
// is a nil v, or a nil function or pointer in it. Applications call the
// adapters' options, which are built on Native; adapters call Native.
func Native(adapter, name string, v any) Option {
	return optionFunc(func(c *config) {
		switch {
		case c.adapter != adapter:
			c.fail("%s.%s is an option of %s, given to %s", adapter, name, adapter, c.adapter)
		case isNil(v):
			c.fail("%s.%s: nil value", adapter, name)
		default:
			if c.native == nil {
				c.native = map[string]any{}
			}
			c.native[name] = v
		}
	})
}

// isNil reports whether v is nil or holds a nil function, pointer, map,
// slice, channel or interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Func, reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// NativeRequest is the request view of an adapter whose native request
// type is R (*http.Request, *gin.Context, *fiber.Ctx): key functions given
// with NativeKey read R through it.
type NativeRequest[R any] interface {
	keyfuncs.Request
	// Native returns the framework's own request. It is valid only while
	// the key function runs.
	Native() R
}

// NativeKey returns an option of adapter that sets the key function of
// scope to fn, which reads the framework's own request R: the request view
// the adapter passes to Check must be a NativeRequest[R]. Like Native, it
// is refused by the other adapters, and a nil fn is an error. It is the
// base of each adapter's WithKeyFunc.
func NativeKey[R any](adapter string, scope core.Scope, fn func(R) (string, error)) Option {
	if fn == nil {
		return optionFunc(func(c *config) { c.fail("%s.WithKeyFunc(%q): nil key function", adapter, scope) })
	}
	key := func(r keyfuncs.Request) (string, error) {
		n, ok := r.(NativeRequest[R])
		if !ok {
			return "", fmt.Errorf("%s.WithKeyFunc(%q): a %T has no native request of the key function's type", adapter, scope, r)
		}
		return fn(n.Native())
	}
	return optionFunc(func(c *config) {
		if c.adapter != adapter {
			c.fail("%s.WithKeyFunc(%q) is an option of %s, given to %s", adapter, scope, adapter, c.adapter)
			return
		}
		WithKey(scope, key).apply(c)
	})
}

// native returns fn over the view's native request, or an error for a view
// of another type.
func native[R, T any](adapter, option string, fn func(R) (T, error)) func(keyfuncs.Request) (T, error) {
	return func(r keyfuncs.Request) (T, error) {
		n, ok := r.(NativeRequest[R])
		if !ok {
			var zero T
			return zero, fmt.Errorf("%s.%s: a %T has no native request of the function's type", adapter, option, r)
		}
		return fn(n.Native())
	}
}

// onlyFor wraps set, an option's effect, so that it applies only to
// adapter's constructor.
func onlyFor(adapter, option string, set func(*config)) Option {
	return optionFunc(func(c *config) {
		if c.adapter != adapter {
			c.fail("%s.%s is an option of %s, given to %s", adapter, option, adapter, c.adapter)
			return
		}
		set(c)
	})
}

// NativePlan returns an option of adapter that sets the plan function to
// fn, which reads the framework's own request R (a value an
// authentication middleware stored in it, say): WithPlan over R. It is the
// base of each adapter's WithPlanFunc; like NativeKey, the other adapters
// refuse it, and a nil fn is an error.
func NativePlan[R any](adapter string, fn func(R) (string, error)) Option {
	if fn == nil {
		return optionFunc(func(c *config) { c.fail("%s.WithPlanFunc: nil function", adapter) })
	}
	plan := native(adapter, "WithPlanFunc", fn)
	return onlyFor(adapter, "WithPlanFunc", func(c *config) { WithPlan(plan).apply(c) })
}

// NativeCost returns an option of adapter that sets the cost function to
// fn, over the framework's own request R: WithCost over R. It is the base
// of each adapter's WithCostFunc.
func NativeCost[R any](adapter string, fn func(R) (int64, error)) Option {
	if fn == nil {
		return optionFunc(func(c *config) { c.fail("%s.WithCostFunc: nil function", adapter) })
	}
	cost := native(adapter, "WithCostFunc", fn)
	return onlyFor(adapter, "WithCostFunc", func(c *config) { WithCost(cost).apply(c) })
}

// NativeSkip returns an option of adapter that sets the skip function to
// fn, over the framework's own request R: WithSkip over R. A view of
// another type is never skipped. It is the base of each adapter's
// WithSkipFunc.
func NativeSkip[R any](adapter string, fn func(R) bool) Option {
	if fn == nil {
		return optionFunc(func(c *config) { c.fail("%s.WithSkipFunc: nil function", adapter) })
	}
	skip := func(r keyfuncs.Request) bool {
		n, ok := r.(NativeRequest[R])
		return ok && fn(n.Native())
	}
	return onlyFor(adapter, "WithSkipFunc", func(c *config) { WithSkip(skip).apply(c) })
}

// The names of the two settings every adapter has.
const (
	denySetting  = "WithDenyHandler"
	errorSetting = "WithErrorHandler"
)

// DenyHandler returns the WithDenyHandler option of adapter: fn, of the
// adapter's own handler type, answers the requests its limiter denies. It
// is Native(adapter, "WithDenyHandler", fn); read it back with Handlers.
func DenyHandler(adapter string, fn any) Option { return Native(adapter, denySetting, fn) }

// ErrorHandler returns the WithErrorHandler option of adapter: fn, of the
// adapter's own handler type, answers the requests that could not be
// decided. It is Native(adapter, "WithErrorHandler", fn); read it back with
// Handlers.
func ErrorHandler(adapter string, fn any) Option { return Native(adapter, errorSetting, fn) }

// Handlers returns the deny and error handlers given to e by DenyHandler and
// ErrorHandler, as the adapter's types D and E; each is the zero value
// (nil) when not given, or when given with another type, which only an
// adapter's own mistake can do.
func Handlers[D, E any](e *Engine) (deny D, onError E) {
	deny, _ = e.Native(denySetting).(D)
	onError, _ = e.Native(errorSetting).(E)
	return deny, onError
}
