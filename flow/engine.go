package keyfuncs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// Middleware is the framework-neutral part of a rate-limit middleware: it
// turns a Request into a core.Request and a cost with key functions, asks a
// core.Limiter, waits out a shaping delay, and formats what the client
// sees. The framework adapters (nethttp, gin, fiber, grpcinterceptor) build
// one from their options, so an option means the same in every framework,
// and only translate: none holds policy of its own. A Middleware is
// immutable and safe for concurrent use.
type Middleware struct {
	limiter *core.Limiter
	keys    []scopedFunc
	plan    Func
	cost    func(Request) (int64, error)
	skip    func(Request) bool
	format  *core.HeaderFormat
	onAllow bool
}

type scopedFunc struct {
	scope core.Scope
	dim   string // the Dimension's name, for custom scopes
	fn    Func
}

// Option configures a Middleware. Adapters re-export these options under
// the same names.
type Option interface{ apply(*config) }

type config struct {
	keys    []scopedFunc
	plan    Func
	cost    func(Request) (int64, error)
	skip    func(Request) bool
	format  *core.HeaderFormat
	onAllow bool
	errs    []error
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithKey sets the key function of scope: core.ScopeUser, core.ScopeIP,
// core.ScopeEndpoint or a core.Dimension. Without it, ScopeIP is keyed by
// ClientIP() (the TCP peer: no proxy is trusted), ScopeEndpoint by Endpoint()
// (the route template, or the gRPC method), and the other scopes are not
// keyed, so their rules do not apply. core.ScopeGlobal needs no key.
func WithKey(scope core.Scope, fn Func) Option {
	return optionFunc(func(c *config) {
		switch {
		case fn == nil:
			c.errs = append(c.errs, fmt.Errorf("%w: WithKey(%q): nil key function", ErrInvalidOption, scope))
		case !scope.Valid() || scope == core.ScopeGlobal:
			c.errs = append(c.errs, fmt.Errorf("%w: WithKey(%q): want user, ip, endpoint or a core.Dimension", ErrInvalidOption, scope))
		default:
			dim, _ := scope.Dimension()
			c.keys = append(c.keys, scopedFunc{scope: scope, dim: dim, fn: fn})
		}
	})
}

// WithPlan sets the function that reads the caller's plan ("free", "pro"),
// which selects the rules that apply. ErrNotApplicable means no plan: only
// the rules for every plan apply. Without it no request has a plan.
func WithPlan(fn Func) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithPlan: nil function", ErrInvalidOption))
		}
		c.plan = fn
	})
}

// WithCost sets the function that prices a request in tokens (0 reads
// without consuming). Without it every request costs 1.
func WithCost(fn func(Request) (int64, error)) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithCost: nil function", ErrInvalidOption))
		}
		c.cost = fn
	})
}

// WithSkip sets a function that exempts requests from limiting: when it
// returns true the request proceeds without a decision or headers.
func WithSkip(fn func(Request) bool) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithSkip: nil function", ErrInvalidOption))
		}
		c.skip = fn
	})
}

// WithHeaderFormat sets which header fields are sent and how (see
// core.NewHeaderFormat). The default is core.NewHeaderFormat().
func WithHeaderFormat(f *core.HeaderFormat) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithHeaderFormat: nil format", ErrInvalidOption))
		}
		c.format = f
	})
}

// WithHeadersOnAllow says whether allowed responses carry the rate-limit
// fields too (denials always do). The default is true.
func WithHeadersOnAllow(on bool) Option {
	return optionFunc(func(c *config) { c.onAllow = on })
}

// NewMiddleware returns the Middleware of limiter with opts. It fails with
// an error wrapping ErrInvalidOption for a nil limiter, an invalid option,
// two key functions for one scope, or a rule of the limiter's policy whose
// scope has no key function (its tier would silently never apply).
func NewMiddleware(limiter *core.Limiter, opts ...Option) (*Middleware, error) {
	cfg := config{onAllow: true}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if limiter == nil {
		cfg.errs = append(cfg.errs, fmt.Errorf("%w: nil limiter", ErrInvalidOption))
	}
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	m := &Middleware{limiter: limiter, plan: cfg.plan, cost: cfg.cost, skip: cfg.skip, format: cfg.format, onAllow: cfg.onAllow}
	seen := map[core.Scope]bool{}
	for _, k := range cfg.keys {
		if seen[k.scope] {
			return nil, fmt.Errorf("%w: WithKey(%q) given twice", ErrInvalidOption, k.scope)
		}
		seen[k.scope] = true
		m.keys = append(m.keys, k)
	}
	if !seen[core.ScopeIP] {
		ip, err := ClientIP()
		if err != nil {
			return nil, err
		}
		m.keys = append(m.keys, scopedFunc{scope: core.ScopeIP, fn: ip})
		seen[core.ScopeIP] = true
	}
	if !seen[core.ScopeEndpoint] {
		m.keys = append(m.keys, scopedFunc{scope: core.ScopeEndpoint, fn: Endpoint()})
		seen[core.ScopeEndpoint] = true
	}
	for _, r := range limiter.Policy().Rules() {
		if r.Scope != core.ScopeGlobal && !seen[r.Scope] && !r.Disabled {
			return nil, fmt.Errorf("%w: rule %q limits scope %q, which has no key function: add WithKey(%q, ...)", ErrInvalidOption, r.Name, r.Scope, r.Scope)
		}
	}
	if m.format == nil {
		f, err := core.NewHeaderFormat()
		if err != nil {
			return nil, err
		}
		m.format = f
	}
	return m, nil
}

// Result is what Check decided for one request.
type Result struct {
	// Decision is the limiter's decision; zero when Skipped or Err is set
	// before the limiter was asked.
	Decision core.Decision
	// Proceed says whether the next handler runs.
	Proceed bool
	// Skipped says the request was exempt (WithSkip): no headers.
	Skipped bool
	// Err, when set, is a request error for the adapter's error handler: a
	// key, plan or cost function failed, the input is invalid (too long a
	// key, a negative cost), or the request's context ended. Proceed is
	// false. A store failure is not an Err: it is a Decision with
	// core.ReasonUnavailable (FailClosed), or a degraded allowed one.
	Err error
}

// Check decides r: skip, keys, plan and cost, the limiter, and a shaping
// delay, which it waits out (returning the context's error if the request
// ends first).
func (m *Middleware) Check(r Request) Result {
	if m.skip != nil && m.skip(r) {
		return Result{Proceed: true, Skipped: true}
	}
	var req core.Request
	for _, k := range m.keys {
		v, err := k.fn(r)
		if errors.Is(err, ErrNotApplicable) {
			continue
		}
		if err != nil {
			return Result{Err: fmt.Errorf("ratelimit: %s key: %w", k.scope, err)}
		}
		if v == "" {
			return Result{Err: fmt.Errorf("ratelimit: %s key: %w: empty key (return keyfuncs.ErrNotApplicable when the tier does not apply)", k.scope, core.ErrInvalidKey)}
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
	if m.plan != nil {
		p, err := m.plan(r)
		switch {
		case errors.Is(err, ErrNotApplicable):
		case err != nil:
			return Result{Err: fmt.Errorf("ratelimit: plan: %w", err)}
		default:
			req.Plan = p
		}
	}
	cost := int64(1)
	if m.cost != nil {
		c, err := m.cost(r)
		if err != nil {
			return Result{Err: fmt.Errorf("ratelimit: cost: %w", err)}
		}
		cost = c
	}
	ctx := r.Context()
	d, err := m.limiter.AllowN(ctx, req, cost)
	if err != nil {
		if errors.Is(err, core.ErrUnavailable) {
			// Fail closed: a denial (503), not a request error.
			return Result{Decision: d}
		}
		return Result{Decision: d, Err: err}
	}
	if d.Allowed && d.Delay > 0 {
		t := time.NewTimer(d.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Result{Decision: d, Err: ctx.Err()}
		}
	}
	return Result{Decision: d, Proceed: d.Allowed}
}

// Headers calls set for each rate-limit header field of res: every field
// on a denial, and on an allowed request unless WithHeadersOnAllow(false).
// Nothing for a skipped request or a request no rule applied to.
func (m *Middleware) Headers(res *Result, set func(name, value string)) {
	if res.Skipped || res.Err != nil || (res.Proceed && !m.onAllow) {
		return
	}
	m.format.Headers(&res.Decision, set)
}

// ErrorStatus returns the HTTP status for a Result's Err: 400 for input the
// client controls and no configuration makes valid (a key too long or with
// control characters, no usable client address), 0 when the request's
// context ended (the client is gone: write nothing), and 500 otherwise (a
// key, plan or cost function failed).
func (m *Middleware) ErrorStatus(err error) int {
	switch {
	case errors.Is(err, core.ErrInvalidKey), errors.Is(err, core.ErrInvalidCost), errors.Is(err, ErrNoAddress):
		return 400
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return 0
	}
	return 500
}

// maxHeaders is how many fields SetHTTPHeaders gathers before storing
// them; a HeaderFormat sets at most seven.
const maxHeaders = 8

// SetHTTPHeaders stores res's rate-limit header fields in h, as Headers
// reports them, replacing earlier values: the net/http and gin adapters
// write through it. The values share one backing array, one allocation for
// all of them; each is capped at length 1, so appending to one cannot
// clobber the next. Names are canonicalized, which allocates nothing for
// names already canonical (core.NamesCanonical).
func (m *Middleware) SetHTTPHeaders(h http.Header, res *Result) {
	var (
		names [maxHeaders]string
		vals  [maxHeaders]string
		n     int
	)
	m.Headers(res, func(name, value string) {
		if n == len(names) {
			h.Set(name, value) // not reached with today's formats
			return
		}
		names[n], vals[n] = name, value
		n++
	})
	if n == 0 {
		return
	}
	backing := make([]string, n)
	copy(backing, vals[:n])
	for i := range n {
		h[textproto.CanonicalMIMEHeaderKey(names[i])] = backing[i : i+1 : i+1]
	}
}

// Denial returns the status, content type and body of the default response
// to a request that may not proceed: 429 with a problem+json quota-exceeded
// body, or 503 when the store failed under FailClosed. The body is appended
// to dst.
func (m *Middleware) Denial(dst []byte, res *Result) (status int, contentType string, body []byte) {
	return m.format.Status(&res.Decision), core.ContentTypeProblem, m.format.AppendProblem(dst, &res.Decision)
}

// Format returns the header format in use.
func (m *Middleware) Format() *core.HeaderFormat { return m.format }

// Limiter returns the limiter.
func (m *Middleware) Limiter() *core.Limiter { return m.limiter }
