package rules

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// Spec is one rule as a file or a table row states it. Its fields mirror
// the seed's RateLimitRule table (key_pattern, scope, rate_per_second,
// burst_capacity, plan, is_active, description) and add what core's rules
// can say beyond it (algorithm, windows, routes, shadow). The JSON and YAML
// names are in the tags; the package documentation gives the rules that
// Compile applies. The zero value is not a valid rule: it has no scope and
// no rate.
type Spec struct {
	// Name is the core rule name: 1 to 64 characters of [A-Za-z0-9_.-].
	// Optional when KeyPattern is set: the name is then derived from the
	// key pattern and the plan (see the package documentation).
	Name string `json:"name,omitempty" yaml:"name,omitempty"`
	// KeyPattern is the seed's key pattern: "user:{user_id}", "ip:{ip}",
	// "endpoint:{endpoint}", "endpoint:/api/search", "global",
	// "dim:{tenant}". It gives the scope, and for "endpoint:ROUTE" the
	// route. Empty: Scope must be set.
	KeyPattern string `json:"key_pattern,omitempty" yaml:"key_pattern,omitempty"`
	// Scope is user, ip, endpoint, global or dim:NAME (core.Dimension).
	// Empty: taken from KeyPattern; when both are set they must agree.
	Scope string `json:"scope,omitempty" yaml:"scope,omitempty"`
	// Algorithm is token_bucket (the default, when empty), shaping,
	// fixed_window, sliding_window or sliding_log.
	Algorithm string `json:"algorithm,omitempty" yaml:"algorithm,omitempty"`
	// RatePerSecond is the refill rate in tokens per second, the seed's
	// column: converted exactly (0.5 is 1 token every 2s). Token bucket and
	// shaping only; give it or Rate and Period, not both.
	RatePerSecond *float64 `json:"rate_per_second,omitempty" yaml:"rate_per_second,omitempty"`
	// Rate is the refill rate as Rate tokens every Period, the other way to
	// write it ("rate: 100, period: 1m").
	Rate *int64 `json:"rate,omitempty" yaml:"rate,omitempty"`
	// Period is the period of Rate.
	Period Duration `json:"period,omitempty" yaml:"period,omitempty"`
	// BurstCapacity is the bucket's capacity (token bucket, shaping) or the
	// count allowed per window (window algorithms); at least 1.
	BurstCapacity int64 `json:"burst_capacity,omitempty" yaml:"burst_capacity,omitempty"`
	// Window is the window of fixed_window, sliding_window and
	// sliding_log, in whole milliseconds.
	Window Duration `json:"window,omitempty" yaml:"window,omitempty"`
	// MaxWait is the longest delay of a shaping rule; shaping only.
	MaxWait Duration `json:"max_wait,omitempty" yaml:"max_wait,omitempty"`
	// Plan restricts the rule to one plan; empty (or null): every plan.
	Plan string `json:"plan,omitempty" yaml:"plan,omitempty"`
	// Routes restricts the rule to these route selectors, in the forms of
	// core.ParseRoute ("GET /search", "/search", "POST"). Empty: every
	// route.
	Routes []string `json:"routes,omitempty" yaml:"routes,omitempty"`
	// IsActive false keeps the rule in the policy but never applies it
	// (core.Rule.Disabled). nil: true, the seed's default.
	IsActive *bool `json:"is_active,omitempty" yaml:"is_active,omitempty"`
	// Shadow makes the rule decided and reported but never denying
	// (core.Rule.Shadow).
	Shadow bool `json:"shadow,omitempty" yaml:"shadow,omitempty"`
	// Description is free text for people; it is not compiled.
	Description string `json:"description,omitempty" yaml:"description,omitempty"`
}

// File is the document a rules file holds: the policy-level settings at
// the top level and the rules in a list. Parse and Load read one; marshal
// one with encoding/json or a YAML encoder to write a file they read back.
// The zero value has no rules and no plans: its policy allows everything.
type File struct {
	// DefaultPlan is the plan of a request whose plan is empty or unknown
	// (core.Plans.Default). It must be a plan some rule names.
	DefaultPlan string `json:"default_plan,omitempty" yaml:"default_plan,omitempty"`
	// RejectUnknownPlan makes a request of a plan no rule names an error
	// instead of giving it DefaultPlan (core.Plans.RejectUnknown).
	RejectUnknownPlan bool `json:"reject_unknown_plan,omitempty" yaml:"reject_unknown_plan,omitempty"`
	// Rules are the rules, in policy order.
	Rules []Spec `json:"rules" yaml:"rules"`
}

// Plans returns the file's plan settings as core.Plans.
func (f *File) Plans() core.Plans {
	return core.Plans{Default: f.DefaultPlan, RejectUnknown: f.RejectUnknownPlan}
}

// Policy compiles the file's rules with its plans, as Compile does.
func (f *File) Policy() (*core.Policy, error) {
	return Compile(f.Rules, WithPlans(f.Plans()))
}

// CompileOption configures Compile. Pass options to Compile; a nil one is
// an error.
type CompileOption interface{ applyCompile(*compileConfig) }

type compileConfig struct {
	plans core.Plans
}

type compileOptionFunc func(*compileConfig)

func (f compileOptionFunc) applyCompile(c *compileConfig) { f(c) }

// WithPlans sets what a request of no plan or an unknown plan gets
// (core.Plans), the file's default_plan and reject_unknown_plan. The
// default is the zero core.Plans, which suits rules that name no plan.
func WithPlans(p core.Plans) CompileOption {
	return compileOptionFunc(func(c *compileConfig) { c.plans = p })
}

// Compile turns specs into a policy: CompileRules, then core.NewPlanPolicy
// with the plans of WithPlans. Every error is an *Error naming the rule (by
// name, or "#i" by position) and the field, and wraps ErrInvalidSpec or a
// core sentinel.
func Compile(specs []Spec, opts ...CompileOption) (*core.Policy, error) {
	var cfg compileConfig
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: rules: Compile: option %d is nil", core.ErrInvalidOption, i)
		}
		o.applyCompile(&cfg)
	}
	rules, err := CompileRules(specs)
	if err != nil {
		return nil, err
	}
	return policy(rules, cfg.plans)
}

// policy checks plans against the rules, as core does but naming the
// file's fields, and builds the policy.
func policy(rules []core.Rule, plans core.Plans) (*core.Policy, error) {
	var known []string
	for _, r := range rules {
		if r.Plan != "" && !slices.Contains(known, r.Plan) {
			known = append(known, r.Plan)
		}
	}
	slices.Sort(known)
	switch {
	case plans.Default != "" && !slices.Contains(known, plans.Default):
		return nil, &Error{index: -1, Field: "default_plan", Err: because(core.ErrInvalidPlan, "%q is not the plan of any rule (the rules name %q)", plans.Default, known)}
	case len(known) > 0 && plans.Default == "" && !plans.RejectUnknown:
		return nil, &Error{index: -1, Field: "default_plan", Err: because(core.ErrInvalidPlan,
			"missing: the rules name plans %q, so a request of no plan or another plan needs default_plan (or reject_unknown_plan: true)", known)}
	}
	p, err := core.NewPlanPolicy(plans, rules...)
	if err != nil {
		// The checks above and in CompileRules cover what NewPlanPolicy
		// checks; should it refuse something more, report it by rule.
		e := &Error{index: -1, Err: err}
		if re, ok := errors.AsType[*core.RuleError](err); ok {
			e.Rule, e.Err = re.Rule, re.Err
			for i, r := range rules {
				if r.Name == re.Rule {
					e.index = i
					break
				}
			}
		}
		return nil, e
	}
	return p, nil
}

// CompileRules turns specs into core rules, in order, without building a
// policy: for a caller that adds rules of its own (with a Lookup or a
// When) before calling core.NewPlanPolicy. It checks each spec as Compile
// does, and that no two rules share a name on overlapping plans.
func CompileRules(specs []Spec) ([]core.Rule, error) {
	rules := make([]core.Rule, len(specs))
	derived := make([]bool, len(specs))
	for i := range specs {
		r, d, err := compileSpec(i, &specs[i])
		if err != nil {
			return nil, err
		}
		rules[i], derived[i] = r, d
	}
	for i, r := range rules {
		for j := range i {
			o := rules[j]
			if o.Name != r.Name || (o.Plan != r.Plan && o.Plan != "" && r.Plan != "") {
				continue
			}
			err := &DuplicateError{Name: r.Name, Other: j, Plan: o.Plan}
			if derived[i] {
				err.Derived = specs[i].KeyPattern
			}
			return nil, &Error{index: i, Rule: label(i, &specs[i]), Field: "name", Err: err}
		}
	}
	return rules, nil
}

// label names spec i in errors: its name, or "#i".
func label(i int, s *Spec) string {
	if s.Name != "" {
		return s.Name
	}
	return "#" + strconv.Itoa(i)
}

// compileSpec turns spec i into a rule, and reports whether its name was
// derived from its key pattern.
func compileSpec(i int, s *Spec) (core.Rule, bool, error) {
	fail := func(field string, err error) (core.Rule, bool, error) {
		return core.Rule{}, false, &Error{index: i, Rule: label(i, s), Field: field, Err: err}
	}
	var r core.Rule

	// Scope, from key_pattern and scope.
	var kp keyPattern
	if s.KeyPattern != "" {
		var err error
		if kp, err = parseKeyPattern(s.KeyPattern); err != nil {
			return fail("key_pattern", err)
		}
	}
	switch {
	case s.Scope != "":
		r.Scope = core.Scope(s.Scope)
		if !r.Scope.Valid() {
			return fail("scope", because(core.ErrUnknownScope, "%q (want user, ip, endpoint, global or dim:NAME)", s.Scope))
		}
		if s.KeyPattern != "" && r.Scope != kp.scope {
			return fail("scope", because(ErrInvalidSpec, "%q disagrees with key_pattern %q, which is scope %q", s.Scope, s.KeyPattern, kp.scope))
		}
	case s.KeyPattern != "":
		r.Scope = kp.scope
	default:
		return fail("scope", because(ErrInvalidSpec, "missing: give scope or key_pattern"))
	}

	// Plan and name.
	if s.Plan != "" && !core.ValidName(s.Plan) {
		return fail("plan", because(core.ErrInvalidRule, "must be 1 to 64 characters of [A-Za-z0-9_.-], got %q", s.Plan))
	}
	r.Plan = s.Plan
	derived := false
	switch {
	case s.Name != "":
		if !core.ValidName(s.Name) {
			return fail("name", because(core.ErrInvalidRule, "must be 1 to 64 characters of [A-Za-z0-9_.-], got %q", s.Name))
		}
		r.Name = s.Name
	case s.KeyPattern != "":
		r.Name, derived = deriveName(s.KeyPattern, kp, s.Plan), true
	default:
		return fail("name", because(ErrInvalidSpec, "missing: give name or key_pattern"))
	}

	// The limit.
	lim, field, err := compileLimit(s)
	if err != nil {
		return fail(field, err)
	}
	r.Limit = lim

	// Routes.
	if kp.route != "" && len(s.Routes) > 0 {
		return fail("routes", because(ErrInvalidSpec, "key_pattern %q already restricts the rule to route %q; give the route in one place", s.KeyPattern, kp.route))
	}
	if kp.route != "" {
		r.Routes = []string{kp.route}
	}
	for j, rt := range s.Routes {
		if _, err := core.ParseRoute(rt); err != nil {
			return fail(fmt.Sprintf("routes[%d]", j), err)
		}
		r.Routes = append(r.Routes, rt)
	}

	r.Disabled = s.IsActive != nil && !*s.IsActive
	r.Shadow = s.Shadow
	return r, derived, nil
}

// compileLimit builds and validates the spec's limit, or returns the field
// at fault and why.
func compileLimit(s *Spec) (core.Limit, string, error) {
	alg := s.Algorithm
	if alg == "" {
		alg = "token_bucket"
	}
	bucket := alg == "token_bucket" || alg == "shaping"
	switch alg {
	case "token_bucket", "shaping", "fixed_window", "sliding_window", "sliding_log":
	default:
		return core.Limit{}, "algorithm", because(ErrInvalidSpec, "unknown algorithm %q (want token_bucket, shaping, fixed_window, sliding_window or sliding_log)", s.Algorithm)
	}
	if s.BurstCapacity < 1 {
		return core.Limit{}, "burst_capacity", because(core.ErrInvalidBurst, "must be >= 1, got %d", s.BurstCapacity)
	}
	if s.MaxWait != 0 && alg != "shaping" {
		return core.Limit{}, "max_wait", because(ErrInvalidSpec, "only shaping waits; the algorithm is %s", alg)
	}

	var lim core.Limit
	rateField := "rate_per_second"
	if bucket {
		if s.Window != 0 {
			return core.Limit{}, "window", because(ErrInvalidSpec, "%s has no window: it refills at rate_per_second (or rate per period) up to burst_capacity", alg)
		}
		var rate core.Rate
		switch {
		case s.RatePerSecond != nil && (s.Rate != nil || s.Period != 0):
			return core.Limit{}, "rate_per_second", because(core.ErrInvalidRate, "give rate_per_second or rate and period, not both")
		case s.RatePerSecond != nil:
			var err error
			if rate, err = rateFromPerSecond(*s.RatePerSecond); err != nil {
				return core.Limit{}, "rate_per_second", err
			}
		case s.Rate == nil && s.Period == 0:
			return core.Limit{}, "rate_per_second", because(core.ErrInvalidRate, "missing: give rate_per_second, or rate and period")
		case s.Rate == nil:
			return core.Limit{}, "rate", because(core.ErrInvalidRate, "missing: period %v needs a rate (tokens per period)", s.Period)
		case s.Period == 0:
			return core.Limit{}, "period", because(core.ErrInvalidRate, "missing: rate %d needs a period (\"1s\", \"1m\", ...)", *s.Rate)
		case *s.Rate < 1:
			return core.Limit{}, "rate", because(core.ErrInvalidRate, "must be >= 1, got %d", *s.Rate)
		case s.Period < 0:
			return core.Limit{}, "period", because(core.ErrInvalidRate, "must be > 0, got %v", s.Period)
		default:
			rate, rateField = core.Rate{N: *s.Rate, Per: s.Period.Std()}, "rate"
		}
		if alg == "shaping" {
			if s.MaxWait <= 0 {
				return core.Limit{}, "max_wait", because(core.ErrInvalidWindow, "shaping needs a max_wait > 0, got %v", s.MaxWait)
			}
			lim = core.Shaping(rate, s.BurstCapacity, s.MaxWait.Std())
		} else {
			lim = core.TokenBucket(rate, s.BurstCapacity)
		}
	} else {
		for _, f := range []struct {
			name  string
			given bool
		}{{"rate_per_second", s.RatePerSecond != nil}, {"rate", s.Rate != nil}, {"period", s.Period != 0}} {
			if f.given {
				return core.Limit{}, f.name, because(ErrInvalidSpec, "%s has no rate: it allows burst_capacity per window", alg)
			}
		}
		if s.Window <= 0 {
			return core.Limit{}, "window", because(core.ErrInvalidWindow, "%s needs a window > 0, got %v", alg, s.Window)
		}
		switch alg {
		case "fixed_window":
			lim = core.FixedWindow(s.BurstCapacity, s.Window.Std())
		case "sliding_window":
			lim = core.SlidingWindow(s.BurstCapacity, s.Window.Std())
		default:
			lim = core.SlidingLog(s.BurstCapacity, s.Window.Std())
		}
	}

	// core checks the numbers together (a fill time beyond 400 days, a
	// window not in whole milliseconds, ...); attribute its error to the
	// field its sentinel is about.
	if _, err := core.NewPolicy(core.Rule{Name: "check", Scope: core.ScopeGlobal, Limit: lim}); err != nil {
		if re, ok := errors.AsType[*core.RuleError](err); ok {
			err = re.Err
		}
		field := "algorithm"
		switch {
		case errors.Is(err, core.ErrInvalidRate):
			field = rateField
		case errors.Is(err, core.ErrInvalidBurst):
			field = "burst_capacity"
		case errors.Is(err, core.ErrInvalidWindow) && bucket:
			field = "max_wait"
		case errors.Is(err, core.ErrInvalidWindow):
			field = "window"
		}
		return core.Limit{}, field, err
	}
	return lim, "", nil
}

// rateFromPerSecond converts a rate in tokens per second into a core.Rate
// exactly. The float is read as the shortest decimal that converts back to
// it (strconv's 'f', -1 form), which is what a file or a FLOAT column
// wrote: 0.5 is 1 token every 2s, 2.5 is 5 every 2s, 0.1 is 1 every 10s,
// 1000 is 1000 every second. A rate whose decimal is not a whole number of
// tokens per whole number of nanoseconds is an error, never rounded.
func rateFromPerSecond(x float64) (core.Rate, error) {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return core.Rate{}, because(core.ErrInvalidRate, "must be a finite number, got %v", x)
	case x <= 0:
		return core.Rate{}, because(core.ErrInvalidRate, "must be > 0, got %v", x)
	case x > 1e9:
		return core.Rate{}, because(core.ErrInvalidRate, "must be at most 1e9 per second, got %v", x)
	}
	dec := strconv.FormatFloat(x, 'f', -1, 64)
	r, ok := new(big.Rat).SetString(dec)
	if !ok {
		return core.Rate{}, because(core.ErrInvalidRate, "cannot read %s", dec)
	}
	// r = N/D in lowest terms: N tokens every D seconds.
	if r.Num().IsInt64() && r.Denom().IsInt64() && r.Denom().Int64() <= math.MaxInt64/int64(time.Second) {
		return core.Rate{N: r.Num().Int64(), Per: time.Duration(r.Denom().Int64()) * time.Second}, nil
	}
	// N tokens every D seconds is N tokens every D*1e9 nanoseconds, which
	// may reduce to a fraction of int64s.
	r.Quo(r, big.NewRat(int64(time.Second), 1))
	if r.Num().IsInt64() && r.Denom().IsInt64() {
		return core.Rate{N: r.Num().Int64(), Per: time.Duration(r.Denom().Int64())}, nil
	}
	return core.Rate{}, because(core.ErrInvalidRate, "%s per second is not a whole number of tokens per whole number of nanoseconds; write it as rate and period", dec)
}

// keyPattern is a parsed key_pattern.
type keyPattern struct {
	kind  string // global, user, ip, endpoint, dim
	scope core.Scope
	route string // endpoint:ROUTE only
	dim   string // dim:{NAME} only
}

// parseKeyPattern reads the key pattern forms of the package
// documentation.
func parseKeyPattern(p string) (keyPattern, error) {
	if p == "global" {
		return keyPattern{kind: "global", scope: core.ScopeGlobal}, nil
	}
	forms := `want "global", "user:{user_id}", "ip:{ip}", "endpoint:{endpoint}", "endpoint:ROUTE" or "dim:{NAME}"`
	kind, rest, ok := strings.Cut(p, ":")
	if !ok || rest == "" {
		return keyPattern{}, because(ErrInvalidSpec, "%q: %s", p, forms)
	}
	placeholder := len(rest) > 2 && rest[0] == '{' && rest[len(rest)-1] == '}' && !strings.ContainsAny(rest[1:len(rest)-1], "{}/: ")
	switch kind {
	case "user", "ip":
		if !placeholder {
			return keyPattern{}, because(ErrInvalidSpec, "%q: a %s pattern takes one placeholder, as in \"%s:{id}\"", p, kind, kind)
		}
		return keyPattern{kind: kind, scope: core.Scope(kind)}, nil
	case "endpoint":
		if placeholder {
			return keyPattern{kind: kind, scope: core.ScopeEndpoint}, nil
		}
		if _, err := core.ParseRoute(rest); err != nil {
			return keyPattern{}, fmt.Errorf("%q: %w", p, err)
		}
		return keyPattern{kind: kind, scope: core.ScopeEndpoint, route: rest}, nil
	case "dim":
		name := strings.Trim(rest, "{}")
		if !placeholder || !core.Dimension(name).Valid() {
			return keyPattern{}, because(ErrInvalidSpec, "%q: a dim pattern names its dimension in braces, 1 to 64 characters of [A-Za-z0-9_.-], as in \"dim:{tenant}\"", p)
		}
		return keyPattern{kind: kind, scope: core.Dimension(name), dim: name}, nil
	}
	return keyPattern{}, because(ErrInvalidSpec, "%q: %s", p, forms)
}

// deriveName names a rule that has only a key pattern: its kind ("user",
// "ip", "global", "endpoint"), then the dimension ("dim.tenant") or the
// route's letters, digits, '_' and '-', every other run of characters
// written '.' ("endpoint.api.search", "endpoint.GET.items.id"), then
// "." and the plan, if any ("user.free"). A name longer than 64
// characters keeps its first 55 and ends in "-" and 8 hex digits of the
// FNV-1a hash of the key pattern and plan.
func deriveName(pattern string, kp keyPattern, plan string) string {
	parts := []string{kp.kind}
	switch {
	case kp.dim != "":
		parts = append(parts, kp.dim)
	case kp.route != "":
		slug := slugify(kp.route)
		if slug == "" {
			slug = "root"
		}
		parts = append(parts, slug)
	}
	if plan != "" {
		parts = append(parts, plan)
	}
	name := strings.Join(parts, ".")
	if len(name) > 64 {
		h := fnv.New32a()
		h.Write([]byte(pattern + "\x00" + plan))
		name = fmt.Sprintf("%s-%08x", name[:55], h.Sum32())
	}
	return name
}

// slugify keeps letters, digits, '_' and '-' and writes every other run of
// characters as one '.', trimmed at both ends.
func slugify(s string) string {
	var b strings.Builder
	dot := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' {
			if dot && b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteByte(c)
			dot = false
		} else {
			dot = true
		}
	}
	return b.String()
}
