package flow_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
	"github.com/bucketry/ratelimit/keyfuncs"
)

func policyOf(t *testing.T, rules ...core.Rule) *core.Policy {
	t.Helper()
	p, err := core.NewPolicy(rules...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	perTenant = core.Rule{Name: "per-tenant", Scope: core.Dimension("tenant"), Limit: core.TokenBucket(core.PerMinute(1), 1)}
	perIP     = core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 1)}
)

// TestSetPolicyNeedsKeys: a reload that adds a rule on a scope the engine
// has no key function for is refused, as New refuses it, and the policy in
// force keeps deciding.
func TestSetPolicyNeedsKeys(t *testing.T) {
	user := flow.WithKey(core.ScopeUser, FromContextMust(t, ctxUser{}))
	for _, tc := range []struct {
		name  string
		start []core.Rule   // the policy the engine is built on
		opts  []flow.Option // the engine's
		added core.Rule     // the rule the reload adds
		scope string        // its scope, as the error names it
	}{
		{"dimension without WithKey", []core.Rule{flowtest.PerUser}, []flow.Option{user}, perTenant, `scope "dim:tenant"`},
		{"user without WithKey", []core.Rule{perIP}, nil, flowtest.PerUser, `scope "user"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := flowtest.Limiter(t, tc.start...)
			e, err := flow.New(l, "test", nil, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			old := l.Policy()
			err = l.SetPolicy(policyOf(t, append(tc.start, tc.added)...))
			if !errors.Is(err, core.ErrInvalidOption) {
				t.Fatalf("SetPolicy(+%s) = %v, want an error wrapping core.ErrInvalidOption", tc.added.Name, err)
			}
			for _, want := range []string{`rule "` + tc.added.Name + `"`, tc.scope, "test:", "flow.WithKey"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("SetPolicy(+%s) = %q, want it to say %s", tc.added.Name, err, want)
				}
			}
			if l.Policy() != old {
				t.Fatalf("after a refused SetPolicy, Policy() is not the policy in force before")
			}
			// The old policy decides: its rule denies the second request.
			req := userRequest("alice")
			check(e, req)
			if res := check(e, req); res.Outcome != flow.Denied || res.Decision.Rule != tc.start[0].Name {
				t.Errorf("second Check after a refused reload = %v by %q, want Denied by %q", res.Outcome, res.Decision.Rule, tc.start[0].Name)
			}
		})
	}
}

// TestSetPolicyValidReload: a reload whose rules the engine can key is
// accepted and decides the next request, including a disabled rule on an
// unkeyed scope and a global rule.
func TestSetPolicyValidReload(t *testing.T) {
	l := flowtest.Limiter(t, flowtest.PerUser)
	e, err := flow.New(l, "test", nil, flow.WithKey(core.ScopeUser, FromContextMust(t, ctxUser{})))
	if err != nil {
		t.Fatal(err)
	}
	disabled := perTenant
	disabled.Disabled = true
	global := core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerMinute(1), 1)}
	p := policyOf(t, perIP, disabled, global)
	if err := l.SetPolicy(p); err != nil {
		t.Fatalf("SetPolicy(per-ip, disabled per-tenant, global) = %v, want nil", err)
	}
	if l.Policy() != p {
		t.Fatal("SetPolicy accepted, but Policy() is not the new policy")
	}
	check(e, userRequest("alice"))
	if res := check(e, userRequest("bob")); res.Outcome != flow.Denied || (res.Decision.Rule != "per-ip" && res.Decision.Rule != "global") {
		t.Errorf("second Check after the reload = %v by %q, want Denied by a new rule", res.Outcome, res.Decision.Rule)
	}
}

// TestSetPolicySeveralEngines: every engine on a limiter checks a reload;
// the error names the one that cannot key the rule. A dropped engine stops
// checking once it is collected.
func TestSetPolicySeveralEngines(t *testing.T) {
	l := flowtest.Limiter(t, flowtest.PerUser)
	user := flow.WithKey(core.ScopeUser, FromContextMust(t, ctxUser{}))
	tenant, err := keyfuncs.Header("X-Tenant")
	if err != nil {
		t.Fatal(err)
	}
	a, err := flow.New(l, "keyed", nil, user, flow.WithKey(core.Dimension("tenant"), tenant))
	if err != nil {
		t.Fatal(err)
	}
	b, err := flow.New(l, "unkeyed", nil, user)
	if err != nil {
		t.Fatal(err)
	}
	reload := policyOf(t, flowtest.PerUser, perTenant)
	err = l.SetPolicy(reload)
	if !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), `unkeyed: rule "per-tenant"`) {
		t.Fatalf("SetPolicy(+per-tenant) = %v, want refused by the engine named unkeyed", err)
	}
	if strings.Contains(err.Error(), "option: keyed:") {
		t.Errorf("SetPolicy(+per-tenant) = %q, which blames the engine that has the key", err)
	}
	runtime.KeepAlive(b) // b is unreachable from here on
	accepted := false
	for range 100 {
		runtime.GC()
		if l.SetPolicy(reload) == nil {
			accepted = true
			break
		}
		runtime.Gosched()
	}
	if !accepted {
		t.Fatal("SetPolicy(+per-tenant) still refused after the unkeyed engine was dropped and collected")
	}
	runtime.KeepAlive(a)
}

func TestNewZeroLimiter(t *testing.T) {
	e, err := flow.New(&core.Limiter{}, "test", nil)
	if e != nil || !errors.Is(err, core.ErrNotConstructed) {
		t.Fatalf("flow.New(zero Limiter) = %v, %v; want an error wrapping core.ErrNotConstructed", e, err)
	}
}

// TestSetPolicyDuringCheck: a reload that lands while a request is being
// checked (here from its cost function, after its keys) does not change
// the policy it is decided under: it is keyed and decided under the one it
// started with.
func TestSetPolicyDuringCheck(t *testing.T) {
	l := flowtest.Limiter(t, perIP)
	perUser := core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(1), 1)}
	reload := policyOf(t, perUser)
	reloaded := false
	e, err := flow.New(l, "test", nil,
		flow.WithKey(core.ScopeUser, func(keyfuncs.Request) (string, error) { return "alice", nil }),
		flow.WithCost(func(keyfuncs.Request) (int64, error) {
			if !reloaded {
				reloaded = true
				if err := l.SetPolicy(reload); err != nil {
					t.Error(err)
				}
			}
			return 1, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	res := check(e, userRequest(""))
	if res.Outcome != flow.Proceed || res.Decision.NumTiers() != 1 || res.Decision.Rule != "per-ip" {
		t.Fatalf("Check during the reload = %v, %d tiers, rule %q; want proceed under the old policy's per-ip", res.Outcome, res.Decision.NumTiers(), res.Decision.Rule)
	}
	if res := check(e, userRequest("")); res.Outcome != flow.Proceed || res.Decision.NumTiers() != 1 || res.Decision.Rule != "per-user" {
		t.Fatalf("Check after the reload = %v, %d tiers, rule %q; want proceed under the new policy's per-user", res.Outcome, res.Decision.NumTiers(), res.Decision.Rule)
	}
}

// TestSetPolicyConcurrentChecks: while another goroutine swaps two
// policies of one tier each, on scopes both keyed, every request is
// decided with exactly one tier.
func TestSetPolicyConcurrentChecks(t *testing.T) {
	many := core.TokenBucket(core.PerSecond(1e6), 1e6)
	a := policyOf(t, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: many})
	b := policyOf(t, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: many})
	l, err := core.NewLimiter(a)
	if err != nil {
		t.Fatal(err)
	}
	e, err := flow.New(l, "test", nil, flow.WithKey(core.ScopeUser, func(keyfuncs.Request) (string, error) { return "alice", nil }))
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := a
			if i%2 == 1 {
				p = b
			}
			if err := l.SetPolicy(p); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var res flow.Result
	for i := range 20000 {
		e.Check(userRequest(""), &res)
		if res.Outcome != flow.Proceed || res.Decision.NumTiers() != 1 {
			t.Errorf("Check #%d during reloads = %v with %d tiers, want proceed with 1", i, res.Outcome, res.Decision.NumTiers())
			break
		}
	}
	close(stop)
	<-done
}
