package flow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/textproto"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// Engine is the middleware of one framework adapter: it turns a request
// view into a core.Request and a cost with key functions, asks a
// core.Limiter, waits out a shaping delay, and says what the adapter does
// next as an Outcome, with the header fields and problem body to send. An
// Engine is immutable and safe for concurrent use.
type Engine struct {
	limiter *core.Limiter
	settings
	bodies sync.Pool // *[]byte, for problem bodies
	self   *Mark     // the Mark of a request only e has checked

	// marks counts the middlewares over the limiter, shared by its
	// Engines (see HandlerMade and MiddlewareMade).
	marks *markCounts

	endpointByRoute bool                        // the endpoint scope is keyed by the default, the route
	need            atomic.Pointer[policyNeeds] // for the policy last seen
	logOnce         sync.Once                   // the first ErrRouteUnknown is logged

	// httpNames are the fields' names as http.Header stores them
	// (canonical).
	httpNames [core.NumHeaderFields]string
}

// policyNeeds is what a request needs of the policy last seen: which rule
// needs the request's route, if any, and which key functions have a rule
// to key.
type policyNeeds struct {
	policy *core.Policy
	rule   string // "" for none
	// routeKey names, for ErrRouteUnknown's message, a key function given
	// per route (WithRouteKey) whose selector needs the route, of a scope
	// an enabled rule limits; "" for none.
	routeKey string
	// when is whether an enabled rule has a When predicate, which may read
	// the route through the view.
	when bool
	// route is whether deciding reads the request's route: a rule needs
	// it (rule), has a When predicate (which may read core.Request.Route),
	// a key function is chosen by route, or an observer is given the
	// request.
	route bool
	// keyed[i] is whether an enabled rule has e.keys[i]'s scope, or a When
	// predicate, which may read any: the key functions of the other scopes
	// are not called, for no tier would use what they return.
	keyed []bool
}

type scopedFunc struct {
	scope  core.Scope
	dim    string        // the Dimension's name, for custom scopes
	fn     keyfuncs.Func // nil: keyed only on the routes of byRoute
	routes []routeKey    // route-specific key functions, tried first, in order
}

// routeKey is a key function for the requests a selector picks.
type routeKey struct {
	sel core.RouteSelector
	fn  keyfuncs.Func
}

// New returns the Engine of the adapter named adapter ("nethttp",
// "ginlimit", ...) over limiter, with the adapter's defaults and then the
// caller's opts applied in order, so that opts replace the defaults (a
// header format, say). It fails with
// an error wrapping core.ErrInvalidOption for a nil limiter, a nil or
// invalid option, an option of another adapter (see Native), two key
// functions for one scope, or an enabled rule of the limiter's policy whose
// scope has no key function (its tier would silently never apply); and
// with one wrapping core.ErrNotConstructed for a Limiter not made by
// core.NewLimiter. Errors name an option by its position in opts.
//
// New registers that last check with the limiter
// (core.Limiter.AddPolicyCheck), so that limiter.SetPolicy refuses, naming
// the rule, its scope and the adapter, a policy with an enabled rule on a
// scope the Engine has no key function for, and keeps the policy in force.
// The check lasts as long as the Engine is reachable: a middleware that is
// dropped stops checking once the garbage collector has reclaimed it.
func New(limiter *core.Limiter, adapter string, defaults []Option, opts ...Option) (*Engine, error) {
	cfg := config{adapter: adapter, settings: settings{adapter: adapter, onAllow: true}}
	for _, o := range defaults {
		o.apply(&cfg)
	}
	for i, o := range opts {
		if o == nil {
			cfg.fail("%s: option %d is nil", adapter, i)
			continue
		}
		o.apply(&cfg)
	}
	if limiter == nil {
		cfg.fail("%s: nil limiter", adapter)
	}
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	e := &Engine{limiter: limiter, settings: cfg.settings}
	e.self = &Mark{engines: []*Engine{e}}
	e.marks = markCountsOf(limiter)
	seen := map[core.Scope]bool{}
	for _, k := range e.keys {
		if seen[k.scope] {
			return nil, fmt.Errorf("%w: %s: a key function for scope %q given twice", core.ErrInvalidOption, adapter, k.scope)
		}
		seen[k.scope] = true
	}
	if !seen[core.ScopeIP] {
		ip, err := keyfuncs.ClientIP()
		if err != nil {
			return nil, err
		}
		e.keys = append(e.keys, scopedFunc{scope: core.ScopeIP, fn: ip})
		seen[core.ScopeIP] = true
	}
	if !seen[core.ScopeEndpoint] {
		e.keys = append(e.keys, scopedFunc{scope: core.ScopeEndpoint, fn: keyfuncs.Endpoint()})
		seen[core.ScopeEndpoint] = true
		e.endpointByRoute = true
	}
	// Route-specific key functions join their scope's entry, or make one
	// keyed only on their routes.
	routeOnly := map[core.Scope][]core.RouteSelector{}
	for _, rk := range cfg.routeKeys {
		i := slices.IndexFunc(e.keys, func(k scopedFunc) bool { return k.scope == rk.scope })
		if i < 0 {
			dim, _ := rk.scope.Dimension()
			e.keys = append(e.keys, scopedFunc{scope: rk.scope, dim: dim})
			i = len(e.keys) - 1
		}
		e.keys[i].routes = append(e.keys[i].routes, routeKey{sel: rk.sel, fn: rk.fn})
		if !seen[rk.scope] {
			routeOnly[rk.scope] = append(routeOnly[rk.scope], rk.sel)
		}
	}
	if e.format == nil {
		f, err := core.NewHeaderFormat()
		if err != nil {
			return nil, err
		}
		e.format = f
	}
	for h := range core.HeaderField(core.NumHeaderFields) {
		e.httpNames[h] = textproto.CanonicalMIMEHeaderKey(h.Name(e.format))
	}
	e.bodies.New = func() any {
		b := make([]byte, 0, 512)
		return &b
	}
	// Last, so that a failed New leaves no check behind. The check runs on
	// the policy in force now and on every policy SetPolicy gets later. It
	// holds the keyed scopes, not e: the limiter outlives the middleware,
	// and must not keep it alive.
	remove, err := limiter.AddPolicyCheck(func(p *core.Policy) error { return checkKeys(adapter, seen, routeOnly, p) })
	if err != nil {
		return nil, err
	}
	// A middleware no longer used checks no more policies.
	runtime.AddCleanup(e, func(remove func()) { remove() }, remove)
	return e, nil
}

// checkKeys returns an error wrapping core.ErrInvalidOption for each
// enabled rule of p whose scope is not global and not in keyed, unless
// its scope is keyed on routes only (routeOnly) and the rule is limited to
// routes those key functions cover: its tier would silently never apply,
// for no request would have its identity.
func checkKeys(adapter string, keyed map[core.Scope]bool, routeOnly map[core.Scope][]core.RouteSelector, p *core.Policy) error {
	var errs []error
	for _, r := range p.Rules() {
		if r.Scope == core.ScopeGlobal || keyed[r.Scope] || r.Disabled {
			continue
		}
		sels, ok := routeOnly[r.Scope]
		if !ok {
			errs = append(errs, fmt.Errorf("%w: %s: rule %q limits scope %q, which has no key function: add flow.WithKey(%q, ...)", core.ErrInvalidOption, adapter, r.Name, r.Scope, r.Scope))
			continue
		}
		if len(r.Routes) == 0 {
			errs = append(errs, fmt.Errorf("%w: %s: rule %q limits scope %q on every route, but %q is keyed only on routes %v: limit the rule to those routes (Rule.Routes) or add flow.WithKey(%q, ...)", core.ErrInvalidOption, adapter, r.Name, r.Scope, r.Scope, sels, r.Scope))
			continue
		}
		for _, rt := range r.Routes {
			rs, _ := core.ParseRoute(rt) // valid: NewPolicy parsed it
			if !slices.ContainsFunc(sels, func(s core.RouteSelector) bool { return s.Covers(rs) }) {
				errs = append(errs, fmt.Errorf("%w: %s: rule %q limits scope %q on route %q, where %q has no key function (it is keyed on %v)", core.ErrInvalidOption, adapter, r.Name, r.Scope, rt, r.Scope, sels))
			}
		}
	}
	return errors.Join(errs...)
}

// Outcome is what an adapter does with a request once the Engine has
// checked it. Its zero value is not an outcome Check returns.
type Outcome uint8

const (
	// Proceed: the request is allowed. Write the header fields (Headers)
	// and call the next handler.
	Proceed Outcome = iota + 1
	// Skipped: the request is exempt (WithSkip). Call the next handler,
	// with no header fields.
	Skipped
	// Denied: a tier denied the request. Write the header fields and the
	// denial: 429 Too Many Requests with a problem body (WriteProblem), or
	// gRPC ResourceExhausted.
	Denied
	// Unavailable: the store failed and the limiter fails closed. Write the
	// header fields (Retry-After) and the denial: 503 Service Unavailable
	// with a problem body, or gRPC Unavailable.
	Unavailable
	// BadInput: the client sent what no configuration can accept (a key too
	// long or with control characters, a negative cost, no usable client
	// address). Result.Err says what; 400 Bad Request or gRPC
	// InvalidArgument.
	BadInput
	// Failed: the request could not be decided (a key, plan or cost
	// function failed, or the limiter returned an error). Result.Err says
	// why; 500 Internal Server Error or gRPC Internal.
	Failed
	// ClientGone: the request's context ended before the decision, or
	// while it waited out a shaping delay. Write nothing: nobody is there.
	// An error wrapping a context's error while the request's context is
	// alive (a key function's call, or a limit lookup, that timed out on
	// its own bound) is Failed.
	ClientGone
)

// String returns the outcome's name in lower case ("proceed", "denied").
func (o Outcome) String() string {
	switch o {
	case Proceed:
		return "proceed"
	case Skipped:
		return "skipped"
	case Denied:
		return "denied"
	case Unavailable:
		return "unavailable"
	case BadInput:
		return "bad input"
	case Failed:
		return "failed"
	case ClientGone:
		return "client gone"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// HTTPStatus returns the HTTP status of an outcome that answers the
// request: 429, 503, 400 or 500; and 0 for Proceed, Skipped and ClientGone,
// which do not.
func (o Outcome) HTTPStatus() int {
	switch o {
	case Denied:
		return http.StatusTooManyRequests
	case Unavailable:
		return http.StatusServiceUnavailable
	case BadInput:
		return http.StatusBadRequest
	case Failed:
		return http.StatusInternalServerError
	}
	return 0
}

// Result is what Check decided for one request.
type Result struct {
	// Outcome says what the adapter does next.
	Outcome Outcome
	// Decision is the limiter's decision; zero when the limiter was not
	// asked (Skipped, and BadInput, Failed or ClientGone before it).
	Decision core.Decision
	// Err is set for BadInput, Failed and ClientGone: why the request
	// could not be decided. It may name keys, rules or a store address, so
	// the default responses never show it to the client.
	Err error
}

// Check decides r into res, which it overwrites whole: skip, keys, plan
// and cost, the limiter, and a shaping delay, which it waits out
// (ClientGone when the request's context ends first). It never panics on a
// request: a key function's error or an invalid key or cost is a Result
// with Err. Writing into the caller's Result, rather than returning one,
// spares each request the copies of a Result and its Decision.
//
// A request that fails (BadInput or Failed) is logged through the
// limiter's logger (core.WithLogger), throttled per kind of failure,
// whatever the error handler does with it; nothing when no logger is set.
//
// Check reads r's route (Route, and RouteKnown for a RouteReporter) only
// when the policy in force needs it: a rule limited to routes, an endpoint
// rule keyed by the route, a rule with a When predicate (which sees
// core.Request.Route), or a key function given per route (WithRouteKey);
// or when the limiter has observers (core.WithObserver), whose events
// carry the request.
// Otherwise core.Request.Route stays "", and a view whose route costs a
// router's match to find (nethttp around a ServeMux, chi before routing,
// fiber under app.Use) finds it only if a key, plan, cost or skip function
// asks.
//
// Where the middleware cannot tell the route (RouteKnown reports false),
// the request fails with ErrRouteUnknown if anything needs it: a rule
// limited to routes, an endpoint rule keyed by the route, a key function
// given per route, or a function that reads the view's Route (a key, plan,
// cost or skip function, or a When predicate through flow.When), which a
// RouteReadReporter reports. Such a function would otherwise read "" as
// no route, and key, or skip, a tier on that. Observers, and a When
// predicate that reads core.Request.Route, get "".
func (e *Engine) Check(r keyfuncs.Request, res *Result) {
	e.check(r, res)
	if res.Err != nil && (res.Outcome == BadInput || res.Outcome == Failed) {
		e.logFailure(r, res)
	}
}

// logFailure logs a request that could not be decided, if the limiter has
// a logger: client input at Info (a client can send it at will), the rest
// at Error.
func (e *Engine) logFailure(r keyfuncs.Request, res *Result) {
	log := e.limiter.Logger()
	if log == nil {
		return
	}
	level, msg := slog.LevelError, "ratelimit: request not decided"
	if res.Outcome == BadInput {
		level, msg = slog.LevelInfo, "ratelimit: request refused: bad input"
	}
	kind := failureKind(res.Err)
	log.Log(r.Context(), level, "flow:"+res.Outcome.String()+":"+kind, msg,
		slog.String("adapter", e.adapter), slog.String("outcome", res.Outcome.String()), slog.String("kind", kind),
		slog.String("method", r.Method()), slog.String("route", r.Route()), slog.String("error", res.Err.Error()))
}

func (e *Engine) check(r keyfuncs.Request, res *Result) {
	// A view whose route may be unknown records whether a function read
	// it all the same.
	reads, _ := r.(RouteReadReporter)
	if e.skip != nil && e.skip(r) {
		if reads != nil && reads.RouteReadUnknown() {
			*res = e.routeUnknown(readers)
			return
		}
		*res = Result{Outcome: Skipped}
		return
	}
	needs := e.needs()
	req := core.Request{Method: r.Method(), View: r}
	known := true // the route, when the policy needs it
	if needs.route {
		// Only then: finding the route may cost the adapter a match of the
		// router's (nethttp's mux), and the view still answers a key
		// function, plan or skip function that asks.
		if rr, ok := r.(RouteReporter); ok {
			known = rr.RouteKnown()
		}
		switch {
		case known:
			req.Route = r.Route()
			if req.Route == "" {
				req.Route = r.FullMethod() // gRPC: the method is the route
			}
		case needs.rule != "":
			*res = e.routeUnknown("rule " + strconv.Quote(needs.rule))
			return
		case needs.routeKey != "":
			*res = e.routeUnknown(needs.routeKey)
			return
		}
		// Unknown, and needed only by observers and When predicates:
		// they get "", and a predicate that reads the view's Route fails
		// the request below.
	}
	for i := range e.keys {
		if !needs.keyed[i] {
			continue
		}
		k := &e.keys[i]
		if !known && k.scope == core.ScopeEndpoint && e.endpointByRoute {
			// Keyed for When predicates only (an endpoint rule has failed
			// the request above): by the route, which they get as "".
			continue
		}
		fn := k.fn
		for j := range k.routes {
			if k.routes[j].sel.Match(req.Method, req.Route) {
				fn = k.routes[j].fn
				break
			}
		}
		if fn == nil {
			continue
		}
		v, err := fn(r)
		if err != nil {
			if errors.Is(err, keyfuncs.ErrNotApplicable) {
				continue
			}
			*res = failed(r.Context(), funcError{fmt.Errorf("ratelimit: %s key: %w", k.scope, err)})
			return
		}
		if v == "" {
			*res = failed(r.Context(), fmt.Errorf("ratelimit: %s key: %w: empty key (return keyfuncs.ErrNotApplicable when the tier does not apply)", k.scope, core.ErrInvalidKey))
			return
		}
		switch k.scope {
		case core.ScopeUser:
			req.User = v
		case core.ScopeIP:
			req.IP = v
		case core.ScopeEndpoint:
			req.Endpoint = v
		default:
			req.Dims = append(req.Dims, core.Dim{Name: k.dim, Value: v})
		}
	}
	if e.plan != nil {
		p, err := e.plan(r)
		switch {
		case errors.Is(err, keyfuncs.ErrNotApplicable):
		case err != nil:
			*res = failed(r.Context(), funcError{fmt.Errorf("ratelimit: plan: %w", err)})
			return
		default:
			req.Plan = p
		}
	}
	cost := int64(1)
	if e.cost != nil {
		c, err := e.cost(r)
		if err != nil {
			*res = failed(r.Context(), funcError{fmt.Errorf("ratelimit: cost: %w", err)})
			return
		}
		cost = c
	}
	if reads != nil && reads.RouteReadUnknown() {
		*res = e.routeUnknown(readers)
		return
	}
	ctx := r.Context()
	res.Outcome, res.Err = Proceed, nil
	d := &res.Decision
	// Under the policy the request was keyed for: one SetPolicy put in
	// force meanwhile may have tiers on scopes not keyed above.
	err := e.limiter.DecideUnder(ctx, needs.policy, &req, cost, d)
	if needs.when && reads != nil && reads.RouteReadUnknown() {
		// A When predicate read it, while the limiter decided: what the
		// decision took stays taken, as it will for every such request
		// until the middleware is installed where the route is known.
		*res = e.routeUnknown(readers)
		return
	}
	if err != nil {
		if errors.Is(err, core.ErrUnavailable) {
			// Fail closed: a denial (503), not a request error.
			res.Outcome = Unavailable
			return
		}
		res.Outcome, res.Err = errOutcome(ctx, err), err
		return
	}
	if !d.Allowed {
		res.Outcome = Denied
		return
	}
	if d.Delay > 0 {
		t := time.NewTimer(d.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			res.Outcome, res.Err = ClientGone, ctx.Err()
		}
	}
}

// needs returns what requests need of the policy in force, worked out once
// per policy: the name of an enabled rule that needs the request's route,
// or "" (one with a route selector, or an endpoint rule when the endpoint
// is keyed by the route), whether anything reads the route, and the key
// functions whose scope an enabled rule limits (all of them when a rule
// has a When predicate, which may read any).
func (e *Engine) needs() *policyNeeds {
	p := e.limiter.Policy()
	if n := e.need.Load(); n != nil && n.policy == p {
		return n
	}
	n := &policyNeeds{policy: p, keyed: make([]bool, len(e.keys))}
	for _, r := range p.Rules() {
		if r.Disabled {
			continue
		}
		for i := range e.keys {
			// A When predicate may read any identity of the request.
			if e.keys[i].scope == r.Scope || r.When != nil {
				n.keyed[i] = true
			}
		}
		n.route = n.route || r.When != nil
		n.when = n.when || r.When != nil
		if r.Scope == core.ScopeEndpoint && e.endpointByRoute && n.rule == "" {
			n.rule = r.Name
		}
		for _, rt := range r.Routes {
			if sel, _ := core.ParseRoute(rt); sel.Route() != "" && n.rule == "" {
				n.rule = r.Name
			}
		}
	}
	for i := range e.keys {
		for _, rk := range e.keys[i].routes {
			if n.keyed[i] && rk.sel.Route() != "" {
				n.route = true
				if n.routeKey == "" {
					n.routeKey = fmt.Sprintf("the key function WithRouteKey(%q, %q)", rk.sel, e.keys[i].scope)
				}
			}
		}
	}
	// An observer may read the route of the request it is given.
	n.route = n.route || n.rule != "" || e.limiter.Observed()
	e.need.Store(n)
	return n
}

// readers is what reads the route of a RouteReadReporter, for
// routeUnknown.
const readers = "a function that reads the route (a key, plan, cost or skip function, or a When predicate through the view)"

// routeUnknown is the Result of a request whose route is unknown where the
// middleware runs, when what needs it ("rule \"search\"").
func (e *Engine) routeUnknown(what string) Result {
	err := fmt.Errorf("%w: %s: %s needs the request's route, which the middleware cannot tell where it is installed; %s", ErrRouteUnknown, e.adapter, what, installHint(e.adapter))
	e.logOnce.Do(func() {
		slog.Error("ratelimit: requests fail: the route is unknown where the middleware runs", "err", err)
	})
	return Result{Outcome: Failed, Err: err}
}

// installHint says how to install an adapter's middleware so that it
// knows the route.
func installHint(adapter string) string {
	switch adapter {
	case "nethttp":
		return "wrap the *http.ServeMux itself (m.Handler(mux)) or each route's handler, not a handler around the mux"
	case "fiberlimit":
		return "install it with app.Use on an app whose routes it can match, or on each route"
	case "echolimit":
		return "install it on an Echo instance (e.Use, e.Pre, a group or a route)"
	case "chilimit":
		return "install it with r.Use or r.With on the chi router"
	}
	return "install it where the router has matched the route"
}

// funcError is the error of a key, plan or cost function of the app's.
type funcError struct{ error }

func (e funcError) Unwrap() error { return e.error }

// failureKind names the kind of a request's failure for its log record:
// "invalid_input" for input the client controls and no configuration makes
// valid, "key_func" for an error of a key, plan or cost function (its own
// timeout included), "route_unknown" and "installed_twice" for
// ErrRouteUnknown and ErrInstalledTwice, and core.ErrorKind's for the
// limiter's errors.
func failureKind(err error) string {
	var fe funcError
	switch {
	case errors.Is(err, core.ErrInvalidKey), errors.Is(err, core.ErrInvalidCost), errors.Is(err, keyfuncs.ErrNoAddress):
		return "invalid_input"
	case errors.As(err, &fe):
		return "key_func"
	case errors.Is(err, ErrRouteUnknown):
		return "route_unknown"
	case errors.Is(err, ErrInstalledTwice):
		return "installed_twice"
	}
	return core.ErrorKind(err)
}

// failed classifies the error of a request of context ctx: BadInput for
// input the client controls and no configuration makes valid, ClientGone
// for a context's error when ctx has ended, and Failed otherwise.
func failed(ctx context.Context, err error) Result {
	return Result{Outcome: errOutcome(ctx, err), Err: err}
}

// errOutcome is the Outcome failed gives err. A context's error with ctx
// alive comes from a bound of the function's own (a database query's
// timeout in a limit lookup): a failure, for the client is still there.
func errOutcome(ctx context.Context, err error) Outcome {
	switch {
	case errors.Is(err, core.ErrInvalidKey), errors.Is(err, core.ErrInvalidCost), errors.Is(err, keyfuncs.ErrNoAddress):
		return BadInput
	case (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && ended(ctx):
		return ClientGone
	}
	return Failed
}

// ended reports whether ctx is done or past its deadline: a call bounded
// by ctx can return its deadline's error before ctx's timer has fired.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// Headers calls set for each rate-limit header field of res: every field
// for Denied and Unavailable, and for Proceed unless
// WithHeadersOnAllow(false). Nothing for the other outcomes, or for a
// request no rule applied to.
func (e *Engine) Headers(res *Result, set func(name, value string)) {
	if e.sendsHeaders(res) {
		e.format.Headers(&res.Decision, set)
	}
}

// sendsHeaders reports whether res's outcome sends the rate-limit header
// fields: Denied and Unavailable do, Proceed unless
// WithHeadersOnAllow(false), the others never.
func (e *Engine) sendsHeaders(res *Result) bool {
	switch res.Outcome {
	case Proceed:
		return e.onAllow
	case Denied, Unavailable:
		return true
	}
	return false
}

// HeaderValues formats res's rate-limit header fields into v, as Headers
// reports them, for adapters whose framework copies header values
// (fasthttp): no allocation. v is left empty when res has no fields to
// send.
func (e *Engine) HeaderValues(res *Result, v *core.HeaderValues) {
	if !e.sendsHeaders(res) {
		v.Format(nil, nil)
		return
	}
	v.Format(e.format, &res.Decision)
}

// SetHTTPHeaders stores res's rate-limit header fields in h, as Headers
// reports them, replacing earlier values, under their canonical names
// (whatever the format's core.NameCase), without canonicalizing them per
// response (see core.HeaderFormat.SetHeader: the constant values are
// slices shared by every response; the others share one allocation).
func (e *Engine) SetHTTPHeaders(h http.Header, res *Result) {
	if e.sendsHeaders(res) {
		e.format.SetHeader(h, &e.httpNames, &res.Decision)
	}
}

// ContentTypeProblem is the media type of the bodies WriteProblem writes
// (RFC 9457).
const ContentTypeProblem = core.ContentTypeProblem

// maxPooledBody is the largest problem-body buffer kept for reuse.
const maxPooledBody = 16 << 10

// WriteProblem writes to w the application/problem+json body of a Denied
// or Unavailable res (see core.HeaderFormat.AppendProblem), from a pooled
// buffer: w must not keep the slice it is given past Write, as io.Writer
// requires. The adapter sets the status (Outcome.HTTPStatus) and the
// Content-Type (ContentTypeProblem) first. It returns w's error, which
// means the client is gone.
func (e *Engine) WriteProblem(w io.Writer, res *Result) error {
	bp := e.bodies.Get().(*[]byte)
	body := e.format.AppendProblem((*bp)[:0], &res.Decision)
	_, err := w.Write(body)
	if cap(body) <= maxPooledBody {
		*bp = body[:0]
		e.bodies.Put(bp)
	}
	return err
}

// Format returns the header format in use.
func (e *Engine) Format() *core.HeaderFormat { return e.format }

// Limiter returns the limiter.
func (e *Engine) Limiter() *core.Limiter { return e.limiter }

// Native returns the value of the adapter's own setting name, given with a
// Native option, or nil when none was given. Adapters read their settings
// (a deny handler of the framework's type, say) once, in their
// constructor.
func (e *Engine) Native(name string) any { return e.native[name] }

// AnswerHTTP acts on res for the adapters of net/http handlers (nethttp,
// chilimit): Proceed sets the header fields and calls next with marked,
// Skipped calls next with marked; Denied and Unavailable set the header
// fields and call deny with r and a copy of the decision or, when deny is
// nil, answer 429 (or 503) with the problem body; the other outcomes call
// onError with r and res.Err or, when it is nil, answer the outcome's
// status with its status text only (Err may name keys, rules or a store
// address), and nothing when the client is gone.
func (e *Engine) AnswerHTTP(w http.ResponseWriter, r *http.Request, res *Result, next http.Handler, marked *http.Request,
	deny func(http.ResponseWriter, *http.Request, *core.Decision), onError func(http.ResponseWriter, *http.Request, error)) {
	switch res.Outcome {
	case Proceed:
		e.SetHTTPHeaders(w.Header(), res)
		next.ServeHTTP(w, marked)
	case Skipped:
		next.ServeHTTP(w, marked)
	case Denied, Unavailable:
		e.SetHTTPHeaders(w.Header(), res)
		if deny != nil {
			d := res.Decision // the handler's own copy
			deny(w, r, &d)
			return
		}
		w.Header().Set("Content-Type", ContentTypeProblem)
		w.WriteHeader(res.Outcome.HTTPStatus())
		// A write error means the client is gone; there is nobody to tell.
		_ = e.WriteProblem(w, res)
	default: // BadInput, Failed, ClientGone
		if onError != nil {
			onError(w, r, res.Err)
			return
		}
		if status := res.Outcome.HTTPStatus(); status != 0 {
			http.Error(w, http.StatusText(status), status)
		}
	}
}
