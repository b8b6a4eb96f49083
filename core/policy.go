package core

import (
	"fmt"
	"strings"
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
	// Empty: every plan.
	Plan string
	// Disabled rules are kept in the policy but never applied.
	Disabled bool
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

// Policy is a validated, immutable set of rules. Make one with NewPolicy. It
// is safe for concurrent use. The zero value has no rules, like NewPolicy()
// with no arguments, and allows every request.
type Policy struct {
	rules []Rule // validated copies, derived limit fields filled in
}

// NewPolicy validates rules and returns a policy. Every problem is reported
// as a *RuleError naming the rule: a missing or malformed name, an unknown
// scope, an invalid rate, burst, window or wait, or two rules with the same
// name whose plans overlap (the same plan, or one of them for every plan).
// A policy with no rules is valid and allows everything.
func NewPolicy(rules ...Rule) (*Policy, error) {
	p := &Policy{rules: make([]Rule, len(rules))}
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
		for _, plan := range seen[r.Name] {
			if plan == r.Plan || plan == "" || r.Plan == "" {
				return fail(fmt.Errorf("%w: name already used for plan %q; a name may repeat only on distinct plans", ErrDuplicateRule, plan))
			}
		}
		seen[r.Name] = append(seen[r.Name], r.Plan)
		p.rules[i] = r
	}
	return p, nil
}

// Rules returns a copy of the policy's rules, in order; nil for a nil or
// zero Policy. It is safe for concurrent use.
func (p *Policy) Rules() []Rule {
	if p == nil {
		return nil
	}
	return append([]Rule(nil), p.rules...)
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
// anonymous request of no plan: only global rules for every plan apply to it.
type Request struct {
	Plan     string // the caller's plan; rules with another plan do not apply
	User     string // identity for ScopeUser rules
	IP       string // identity for ScopeIP rules
	Endpoint string // identity for ScopeEndpoint rules
	Dims     []Dim  // identities for Dimension rules; the first of a name counts
}

// identity returns the request's identity for scope, or "" when absent.
func (r *Request) identity(s Scope) string {
	switch s {
	case ScopeUser:
		return r.User
	case ScopeIP:
		return r.IP
	case ScopeEndpoint:
		return r.Endpoint
	case ScopeGlobal:
		return globalKey
	}
	name := string(s[len(dimPrefix):])
	for _, d := range r.Dims {
		if d.Name == name {
			return d.Value
		}
	}
	return ""
}

// globalKey is the identity of a global rule's one bucket.
const globalKey = "*"

// applies reports whether rule r applies to req, and the identity its bucket
// is keyed by.
func (r *Rule) applies(req *Request) (identity string, ok bool) {
	if r.Disabled || (r.Plan != "" && r.Plan != req.Plan) {
		return "", false
	}
	id := req.identity(r.Scope)
	return id, id != ""
}
