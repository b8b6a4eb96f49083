package core

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
)

// Scope says which identity of a request a rule counts against. The zero
// value, "", is not a valid scope and NewPolicy rejects it.
type Scope string

// The built-in scopes. Custom dimensions are made with Dimension.
const (
	// ScopeUser counts against Request.User: the authenticated user or
	// tenant.
	ScopeUser Scope = "user"
	// ScopeIP counts against Request.IP: the client address.
	ScopeIP Scope = "ip"
	// ScopeEndpoint counts against Request.Endpoint: the route template or
	// gRPC method.
	ScopeEndpoint Scope = "endpoint"
	// ScopeGlobal counts against one bucket shared by every request.
	ScopeGlobal Scope = "global"
)

const dimPrefix = "dim:"

// Dimension returns the scope of a custom dimension, such as "tenant" or
// "api_key". A request carries its value in Request.Dims under the same name.
func Dimension(name string) Scope { return Scope(dimPrefix + name) }

// Dimension returns the name of a custom dimension scope, and false for the
// built-in scopes.
func (s Scope) Dimension() (string, bool) {
	if name, ok := strings.CutPrefix(string(s), dimPrefix); ok {
		return name, true
	}
	return "", false
}

// Valid reports whether s is a built-in scope or a Dimension with a valid
// name (1 to 64 characters of [A-Za-z0-9_.-]).
func (s Scope) Valid() bool { return s.valid() }

func (s Scope) valid() bool {
	switch s {
	case ScopeUser, ScopeIP, ScopeEndpoint, ScopeGlobal:
		return true
	}
	name, ok := s.Dimension()
	return ok && validName(name)
}

// Rule is one tier of a policy: a named limit on one scope, optionally for
// one plan only. The zero value has no name, scope or limit, and NewPolicy
// rejects it. A Policy keeps its own copies of its rules.
type Rule struct {
	// Name identifies the rule in bucket keys, headers and decisions: 1 to 64
	// characters of [A-Za-z0-9_.-].
	Name string
	// Scope is the identity counted against: user, ip, endpoint, global or
	// a Dimension.
	Scope Scope
	// Limit is the algorithm with its numbers.
	Limit Limit
	// Plan restricts the rule to requests of that plan ("free", "pro", ...).
	// Empty: every plan. A request whose plan no rule names gets the
	// policy's default plan (see Plans).
	Plan string
	// Routes restricts the rule to requests to these routes: each is a
	// route selector ("GET /search", "/search", "POST", a gRPC method; see
	// ParseRoute and the route form documented there). Empty: every route.
	// A middleware installed once at the router level thus applies a
	// stricter tier to one route, decided together with the others.
	Routes []string
	// When, if not nil, restricts the rule further to the requests it
	// returns true for: a predicate on the request, whose View is the
	// middleware's request view (see flow.When). It is called on every
	// decision the rule could apply to, concurrently, and must not keep
	// or modify the request.
	When func(*Request) bool
	// Lookup, if not nil, gives the rule a limit per identity (a tenant's,
	// an API key's): Limit is then the fallback for identities the lookup
	// has none for. See Lookup and LimitTable.
	Lookup Lookup
	// Disabled rules are kept in the policy but never applied.
	Disabled bool
	// Shadow rules are decided and reported like the others but never deny
	// or delay a request, nor make a Decision's summary when an enforced
	// rule applies to it: see the Limiter's shadow mode (WithShadow) for
	// what they take.
	Shadow bool
	// Lease, when its Max is not 0, has each Limiter serve the rule from
	// tokens it leases from the shared bucket (see Lease). The zero Lease
	// decides every request in the store.
	Lease Lease

	mem *ruleTableRef // set by NewPolicy: the rule's table in a MemoryStore
}

// ruleTableRef remembers the table a MemoryStore keeps for a rule, so that
// a decision on a policy's rule does not look it up by name.
type ruleTableRef struct {
	p atomic.Pointer[storeTable]
}

type storeTable struct {
	s  *MemoryStore
	rt *ruleTable
}

// RuleError reports what is wrong with one rule. It wraps one of the
// configuration errors (ErrInvalidRate, ErrInvalidBurst, ...). The zero value
// names no rule and wraps nothing.
type RuleError struct {
	Rule string // the rule's name, or "#i" (its position, from 0) when it has none
	Err  error  // the configuration error, wrapping a sentinel such as ErrInvalidRate
}

// Error formats the error as "ratelimit: rule "name": field: reason", or
// "ratelimit: rule "name": invalid rule" when Err is nil.
func (e *RuleError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("ratelimit: rule %q: invalid rule", e.Rule)
	}
	return fmt.Sprintf("ratelimit: rule %q: %s", e.Rule, strings.TrimPrefix(e.Err.Error(), "ratelimit: "))
}

// Unwrap returns the configuration error.
func (e *RuleError) Unwrap() error { return e.Err }

// ValidName reports whether s can name a rule, a plan or a Dimension: 1 to
// 64 characters of [A-Za-z0-9_.-]. NewPolicy refuses names that are not;
// rule sources check them where they read them.
func ValidName(s string) bool { return validName(s) }

func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// Policy is a validated, immutable set of rules. Make one with NewPolicy or
// NewPlanPolicy. It is safe for concurrent use. The zero value has no
// rules, like NewPolicy() with no arguments, and allows every request.
type Policy struct {
	rules  []Rule            // validated copies, derived limit fields filled in
	routes [][]RouteSelector // rules[i]'s parsed Routes
	scopes []scopeKind       // rules[i]'s scope, decoded once
	plans  Plans
	known  []string // the plans the rules name, sorted

	// Which rules can apply to a request, by route: every rule is in
	// always (no Routes), or in byRoute under each route it selects, or in
	// byMethod under each method it selects with a method-only selector.
	// Each list is ascending and without repeats.
	always   []int
	byRoute  map[string][]int
	byMethod map[string][]int

	shadow bool // some rule is in shadow mode
	leased bool // some rule has a Lease
	// plain: no rule is disabled or has a plan, routes, a When predicate
	// or a Lookup, so a rule applies to every request that has an identity
	// in its scope, under the rule's own limit (resolve's short path).
	plain bool
}

// Plans says which plan a request whose plan is empty or unknown gets. The
// known plans are those the policy's rules name. The zero value, for a
// policy whose rules name no plan, applies the rules for every plan to
// every request.
type Plans struct {
	// Default is the plan of a request whose plan is empty or names no
	// rule's plan ("Pro" where the rules say "pro", "enterprise" where no
	// rule does). It must be a plan some rule names. Empty: none, which
	// RejectUnknown must then be set for, if any rule has a plan.
	Default string
	// RejectUnknown makes a request whose plan is not empty and names no
	// rule's plan an error (wrapping ErrUnknownPlan, a key error: the
	// middleware answers 400 through its error handler), instead of giving
	// it Default. Without Default, a request with an empty plan is such an
	// error too.
	RejectUnknown bool
}

// NewPolicy validates rules and returns a policy. Every problem is reported
// as a *RuleError naming the rule: a missing or malformed name, an unknown
// scope, an invalid rate, burst, window or wait, a malformed route
// selector, a Lease that cannot work (see Lease), or two rules with the
// same name whose plans overlap (the same plan, or one of them for every
// plan). A policy with no rules is valid
// and allows everything. Rules with a Plan need NewPlanPolicy, which says
// what requests of no plan or an unknown one get; NewPolicy refuses them
// with an error wrapping ErrInvalidPlan, for such requests would silently
// skip every plan tier.
func NewPolicy(rules ...Rule) (*Policy, error) {
	return NewPlanPolicy(Plans{}, rules...)
}

// NewPlanPolicy is NewPolicy with plans: a request whose plan is empty or
// unknown gets plans.Default, or is an error (plans.RejectUnknown). It
// fails with an error wrapping ErrInvalidPlan when rules name plans and
// plans sets neither, or when plans.Default is not a plan the rules name.
func NewPlanPolicy(plans Plans, rules ...Rule) (*Policy, error) {
	p := &Policy{rules: make([]Rule, len(rules)), routes: make([][]RouteSelector, len(rules)), scopes: make([]scopeKind, len(rules)), plans: plans}
	seen := make(map[string][]string) // name -> plans
	for i, r := range rules {
		label := r.Name
		if label == "" {
			label = fmt.Sprintf("#%d", i)
		}
		fail := func(err error) (*Policy, error) { return nil, &RuleError{Rule: label, Err: err} }
		if !validName(r.Name) {
			return fail(fmt.Errorf("%w: name must be 1 to 64 characters of [A-Za-z0-9_.-], got %q", ErrInvalidRule, r.Name))
		}
		if r.Plan != "" && !validName(r.Plan) {
			return fail(fmt.Errorf("%w: plan must be 1 to 64 characters of [A-Za-z0-9_.-], got %q", ErrInvalidRule, r.Plan))
		}
		if !r.Scope.valid() {
			return fail(fmt.Errorf("%w: %q (want user, ip, endpoint, global or a Dimension)", ErrUnknownScope, r.Scope))
		}
		if err := r.Limit.validate(); err != nil {
			return fail(err)
		}
		p.shadow = p.shadow || r.Shadow
		for _, plan := range seen[r.Name] {
			if plan == r.Plan || plan == "" || r.Plan == "" {
				return fail(fmt.Errorf("%w: name already used for plan %q; a name may repeat only on distinct plans", ErrDuplicateRule, plan))
			}
		}
		if r.Lookup != nil && isNil(r.Lookup) {
			// It would panic on the first request: refuse it now.
			return fail(fmt.Errorf("%w: Lookup is a nil %T", ErrInvalidRule, r.Lookup))
		}
		if err := r.Lease.check(&r); err != nil {
			return fail(err)
		}
		p.leased = p.leased || r.Lease.Max > 0
		for _, rt := range r.Routes {
			sel, err := ParseRoute(rt)
			if err != nil {
				return fail(fmt.Errorf("Routes: %w", err))
			}
			p.routes[i] = append(p.routes[i], sel)
		}
		if r.Routes != nil && len(r.Routes) == 0 {
			// An empty, non-nil list is every route, like nil.
			r.Routes = nil
		}
		r.Routes = slices.Clone(r.Routes)
		seen[r.Name] = append(seen[r.Name], r.Plan)
		r.mem = new(ruleTableRef)
		p.rules[i] = r
		p.scopes[i] = kindOf(r.Scope)
		if r.Plan != "" && !slices.Contains(p.known, r.Plan) {
			p.known = append(p.known, r.Plan)
		}
	}
	slices.Sort(p.known)
	if err := p.checkPlans(); err != nil {
		return nil, err
	}
	p.index()
	p.plain = len(p.known) == 0 && !slices.ContainsFunc(p.rules, func(r Rule) bool {
		return r.Disabled || r.Plan != "" || len(r.Routes) > 0 || r.When != nil || r.Lookup != nil
	})
	return p, nil
}

// checkPlans checks p.plans against the plans the rules name.
func (p *Policy) checkPlans() error {
	switch {
	case p.plans.Default != "" && !slices.Contains(p.known, p.plans.Default):
		return fmt.Errorf("%w: Plans.Default %q is not a plan of any rule (the rules name %q)", ErrInvalidPlan, p.plans.Default, p.known)
	case len(p.known) > 0 && p.plans.Default == "" && !p.plans.RejectUnknown:
		return fmt.Errorf("%w: the rules name plans %q, so requests of no plan or another plan need Plans.Default (or Plans.RejectUnknown): use NewPlanPolicy", ErrInvalidPlan, p.known)
	}
	return nil
}

// index fills always, byRoute and byMethod.
func (p *Policy) index() {
	add := func(m *map[string][]int, k string, i int) {
		if *m == nil {
			*m = map[string][]int{}
		}
		if l := (*m)[k]; len(l) == 0 || l[len(l)-1] != i {
			(*m)[k] = append(l, i)
		}
	}
	for i, sels := range p.routes {
		if len(sels) == 0 {
			p.always = append(p.always, i)
			continue
		}
		for _, s := range sels {
			switch {
			case s.route != "":
				add(&p.byRoute, s.route, i)
			default:
				add(&p.byMethod, s.method, i)
				if s.method == "GET" {
					add(&p.byMethod, "HEAD", i)
				}
			}
		}
	}
}

// Plans returns the policy's plans, as given to NewPlanPolicy.
func (p *Policy) Plans() Plans {
	if p == nil {
		return Plans{}
	}
	return p.plans
}

// KnownPlans returns the plans the rules name, sorted.
func (p *Policy) KnownPlans() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.known)
}

// plan returns the plan req is decided under, or an error wrapping
// ErrUnknownPlan.
func (p *Policy) plan(req *Request) (string, error) {
	if len(p.known) == 0 {
		return req.Plan, nil
	}
	if req.Plan != "" {
		for _, k := range p.known {
			if k == req.Plan {
				return k, nil
			}
		}
		if p.plans.RejectUnknown {
			return "", fmt.Errorf("%w: %q (the policy knows %q)", ErrUnknownPlan, req.Plan, p.known)
		}
	}
	if p.plans.Default == "" {
		return "", fmt.Errorf("%w: the request has no plan and the policy has no default plan", ErrUnknownPlan)
	}
	return p.plans.Default, nil
}

// candidates returns an iterator over the index of every rule that may
// apply to a request of method to route, in policy order.
func (p *Policy) candidates(method, route string) ruleIter {
	if p.byRoute == nil && p.byMethod == nil {
		return ruleIter{all: len(p.rules)}
	}
	return ruleIter{all: -1, a: p.always, b: p.byRoute[route], c: p.byMethod[method]}
}

// ruleIter merges up to three ascending lists of rule indices, or counts
// from 0 to all when all >= 0.
type ruleIter struct {
	all, i  int
	a, b, c []int
}

func (it *ruleIter) next() (int, bool) {
	if it.all >= 0 {
		if it.i == it.all {
			return 0, false
		}
		it.i++
		return it.i - 1, true
	}
	i := -1
	for _, l := range [3][]int{it.a, it.b, it.c} {
		if len(l) > 0 && (i < 0 || l[0] < i) {
			i = l[0]
		}
	}
	if i < 0 {
		return 0, false
	}
	if len(it.a) > 0 && it.a[0] == i {
		it.a = it.a[1:]
	}
	if len(it.b) > 0 && it.b[0] == i {
		it.b = it.b[1:]
	}
	if len(it.c) > 0 && it.c[0] == i {
		it.c = it.c[1:]
	}
	return i, true
}

// Rules returns a copy of the policy's rules, in order; nil for a nil or
// zero Policy. It is safe for concurrent use.
func (p *Policy) Rules() []Rule {
	if p == nil {
		return nil
	}
	rules := append([]Rule(nil), p.rules...)
	for i := range rules {
		rules[i].Routes = slices.Clone(rules[i].Routes)
	}
	return rules
}

// Dim is the value of a custom dimension on a request. The zero value names
// no dimension and matches no rule.
type Dim struct {
	Name  string // as passed to Dimension
	Value string // the identity; empty: absent, as if the Dim were not there
}

// Request carries the identities of one request. An empty identity is
// absent, and rules on that scope do not apply: an anonymous request skips
// the per-user rules. Global rules always apply. The zero value is an
// anonymous request of no plan to no route: only global rules that are
// for every route apply to it, those of the default plan if the policy has
// plans.
type Request struct {
	Plan     string // the caller's plan; rules with another plan do not apply
	User     string // identity for ScopeUser rules
	IP       string // identity for ScopeIP rules
	Endpoint string // identity for ScopeEndpoint rules
	Dims     []Dim  // identities for Dimension rules; the first non-empty one of a name counts

	// Method is the HTTP method ("GET"), "" for gRPC, and Route the route
	// the router matched, as documented at ParseRoute ("/items/{id}", a
	// gRPC method), "" when none did: they select the rules with Routes.
	Method, Route string
	// View is the middleware's view of the request (a keyfuncs.Request),
	// for Rule.When; nil outside a middleware.
	View any
}

// scopeKind is a Scope decoded: one of the built-in scopes, or a dimension.
type scopeKind uint8

const (
	kindDim scopeKind = iota
	kindUser
	kindIP
	kindEndpoint
	kindGlobal
)

func kindOf(s Scope) scopeKind {
	switch s {
	case ScopeUser:
		return kindUser
	case ScopeIP:
		return kindIP
	case ScopeEndpoint:
		return kindEndpoint
	case ScopeGlobal:
		return kindGlobal
	}
	return kindDim
}

// Identity returns the request's identity in scope s, the key of its
// bucket under a rule of that scope: User, IP or Endpoint, "*" for
// ScopeGlobal, the first non-empty value of a Dimension's name in Dims
// (an empty one is absent, see Dim); "" when the request has none.
func (r *Request) Identity(s Scope) string { return r.identityOf(kindOf(s), s) }

// identityOf is identity for s, of kind k.
func (r *Request) identityOf(k scopeKind, s Scope) string {
	switch k {
	case kindUser:
		return r.User
	case kindIP:
		return r.IP
	case kindEndpoint:
		return r.Endpoint
	case kindGlobal:
		return globalKey
	}
	name := string(s[len(dimPrefix):])
	for _, d := range r.Dims {
		if d.Name == name && d.Value != "" {
			return d.Value
		}
	}
	return ""
}

// globalKey is the identity of a global rule's one bucket.
const globalKey = "*"

// applies reports whether rule i applies to req, of plan plan, and the
// identity its bucket is keyed by.
func (p *Policy) applies(i int, req *Request, plan string) (identity string, ok bool) {
	r := &p.rules[i]
	if r.Disabled || (r.Plan != "" && r.Plan != plan) {
		return "", false
	}
	if sels := p.routes[i]; len(sels) > 0 {
		match := false
		for _, s := range sels {
			if s.Match(req.Method, req.Route) {
				match = true
				break
			}
		}
		if !match {
			return "", false
		}
	}
	id := req.identityOf(p.scopes[i], r.Scope)
	if id == "" {
		return "", false
	}
	if r.When != nil {
		// A copy: the predicate may keep what it is given, and req must
		// stay on the caller's stack.
		rc := *req
		if !r.When(&rc) {
			return "", false
		}
	}
	return id, true
}
