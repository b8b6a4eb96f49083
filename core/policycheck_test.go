package core

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// rulePolicy returns a policy of one user rule per name, each of burst 1.
func rulePolicy(t *testing.T, names ...string) *Policy {
	t.Helper()
	rules := make([]Rule, len(names))
	for i, n := range names {
		rules[i] = Rule{Name: n, Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)}
	}
	p, err := NewPolicy(rules...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// refuse returns a check refusing a policy with a rule named name, with an
// error that wraps ErrInvalidOption when wrapped is set.
func refuse(name string, wrapped bool) func(*Policy) error {
	return func(p *Policy) error {
		for _, r := range p.Rules() {
			if r.Name != name {
				continue
			}
			if wrapped {
				return fmt.Errorf("%w: test: rule %q refused", ErrInvalidOption, name)
			}
			return fmt.Errorf("test: rule %q refused", name)
		}
		return nil
	}
}

func ruleNames(p *Policy) []string {
	var names []string
	for _, r := range p.Rules() {
		names = append(names, r.Name)
	}
	return names
}

func newCheckLimiter(t *testing.T, names ...string) *Limiter {
	t.Helper()
	l, err := NewLimiter(rulePolicy(t, names...))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestAddPolicyCheckRunsAtOnce(t *testing.T) {
	l := newCheckLimiter(t, "a")
	var seen []*Policy
	remove, err := l.AddPolicyCheck(func(p *Policy) error {
		seen = append(seen, p)
		return nil
	})
	if err != nil {
		t.Fatalf("AddPolicyCheck = %v, want nil", err)
	}
	defer remove()
	if len(seen) != 1 || seen[0] != l.Policy() {
		t.Fatalf("check saw %v, want the policy in force once", seen)
	}
	p := rulePolicy(t, "b")
	if err := l.SetPolicy(p); err != nil {
		t.Fatalf("SetPolicy(b) = %v, want nil", err)
	}
	if len(seen) != 2 || seen[1] != p {
		t.Fatalf("check saw %d policies, want SetPolicy's second", len(seen))
	}
	_ = l.SetPolicy(nil)
	if len(seen) != 2 {
		t.Errorf("SetPolicy(nil) ran the check")
	}
}

func TestAddPolicyCheckRefusesPolicyInForce(t *testing.T) {
	l := newCheckLimiter(t, "a", "bad")
	remove, err := l.AddPolicyCheck(refuse("bad", false))
	checkOptionError(t, "AddPolicyCheck(refuse bad)", err, `test: rule "bad" refused`)
	remove() // never nil, and harmless
	// Not registered: a policy it would refuse is accepted.
	if err := l.SetPolicy(rulePolicy(t, "bad", "c")); err != nil {
		t.Fatalf("SetPolicy after a refused AddPolicyCheck = %v, want nil", err)
	}
}

func TestSetPolicyRefused(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		wrapped bool   // the check's error wraps ErrInvalidOption
		want    string // the whole message
	}{
		{"wrapped", true, `ratelimit: invalid option: test: rule "bad" refused`},
		{"not wrapped", false, `ratelimit: invalid option: policy refused by a check: test: rule "bad" refused`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newCheckLimiter(t, "a")
			old := l.Policy()
			remove, err := l.AddPolicyCheck(refuse("bad", tc.wrapped))
			if err != nil {
				t.Fatal(err)
			}
			defer remove()
			// Spend rule a's only token: the policy in force decides.
			if d, err := l.Allow(ctx, Request{User: "u"}); err != nil || !d.Allowed {
				t.Fatalf("Allow(u) = %v, %v; want allowed", d.Allowed, err)
			}
			err = l.SetPolicy(rulePolicy(t, "bad"))
			checkOptionError(t, "SetPolicy(bad)", err)
			if err.Error() != tc.want {
				t.Errorf("SetPolicy(bad) = %q, want %q", err, tc.want)
			}
			if l.Policy() != old {
				t.Fatalf("Policy() = %v after a refused SetPolicy, want the old policy %v", ruleNames(l.Policy()), ruleNames(old))
			}
			if d, err := l.Allow(ctx, Request{User: "u"}); err != nil || d.Allowed || d.Rule != "a" {
				t.Errorf("Allow(u) after a refused SetPolicy = %v by %q, %v; want denied by rule a", d.Allowed, d.Rule, err)
			}
			// A policy the check accepts takes effect.
			good := rulePolicy(t, "a", "c")
			if err := l.SetPolicy(good); err != nil || l.Policy() != good {
				t.Fatalf("SetPolicy(a, c) = %v, Policy() = %v; want accepted", err, ruleNames(l.Policy()))
			}
		})
	}
}

func TestSetPolicySeveralChecks(t *testing.T) {
	l := newCheckLimiter(t, "a")
	removeX, err := l.AddPolicyCheck(refuse("x", true))
	if err != nil {
		t.Fatal(err)
	}
	removeY, err := l.AddPolicyCheck(refuse("y", false))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rules []string
		want  []string // in the error; none: accepted
	}{
		{[]string{"a", "x"}, []string{`rule "x" refused`}},
		{[]string{"a", "y"}, []string{`rule "y" refused`}},
		{[]string{"x", "y"}, []string{`rule "x" refused`, `rule "y" refused`}},
		{[]string{"a", "b"}, nil},
	} {
		name := strings.Join(tc.rules, ",")
		before := l.Policy()
		err := l.SetPolicy(rulePolicy(t, tc.rules...))
		if tc.want == nil {
			if err != nil {
				t.Errorf("SetPolicy(%s) = %v, want nil", name, err)
			}
			continue
		}
		checkOptionError(t, "SetPolicy("+name+")", err, tc.want...)
		if l.Policy() != before {
			t.Errorf("SetPolicy(%s) refused, but Policy() = %v", name, ruleNames(l.Policy()))
		}
	}
	// Removing one check leaves the other; removing twice is harmless.
	removeX()
	removeX()
	if err := l.SetPolicy(rulePolicy(t, "x")); err != nil {
		t.Errorf("SetPolicy(x) after removing its check = %v, want nil", err)
	}
	if err := l.SetPolicy(rulePolicy(t, "y")); err == nil {
		t.Errorf("SetPolicy(y) = nil after removing the other check, want refused")
	}
	removeY()
	if err := l.SetPolicy(rulePolicy(t, "y")); err != nil {
		t.Errorf("SetPolicy(y) after removing every check = %v, want nil", err)
	}
}

func TestAddPolicyCheckNil(t *testing.T) {
	l := newCheckLimiter(t, "a")
	var (
		remove func()
		err    error
	)
	noPanic(t, "AddPolicyCheck(nil)", func() { remove, err = l.AddPolicyCheck(nil) })
	checkOptionError(t, "AddPolicyCheck(nil)", err, "AddPolicyCheck: check is nil")
	if remove == nil {
		t.Fatal("AddPolicyCheck(nil) returned a nil remove")
	}
	noPanic(t, "remove", remove)
	if err := l.SetPolicy(rulePolicy(t, "b")); err != nil {
		t.Errorf("SetPolicy after AddPolicyCheck(nil) = %v, want nil", err)
	}
}

// TestPolicyChecksConcurrent races SetPolicy calls, good and bad, with a
// check being registered and removed: once registered, a check has
// accepted the policy in force, and no policy it refuses takes effect
// until it is removed.
func TestPolicyChecksConcurrent(t *testing.T) {
	const want, attempts, setters = 50, 100_000, 4
	l := newCheckLimiter(t, "a")
	good, bad := rulePolicy(t, "a"), rulePolicy(t, "a", "bad")
	var (
		wg   sync.WaitGroup
		stop = make(chan struct{})
	)
	for range setters {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = l.SetPolicy(bad)
				_ = l.SetPolicy(good)
			}
		})
	}
	registered := 0
	for i := 0; i < attempts && registered < want; i++ {
		remove, err := l.AddPolicyCheck(refuse("bad", true))
		if err != nil {
			continue // the bad policy was in force: refused, not registered
		}
		registered++
		if slices.Contains(ruleNames(l.Policy()), "bad") {
			t.Fatalf("attempt %d: the bad policy is in force with its check registered", i)
		}
		if err := l.SetPolicy(bad); err == nil {
			t.Fatalf("attempt %d: SetPolicy(bad) = nil with its check registered", i)
		}
		if slices.Contains(ruleNames(l.Policy()), "bad") {
			t.Fatalf("attempt %d: the bad policy took effect with its check registered", i)
		}
		remove()
	}
	close(stop)
	wg.Wait()
	if registered < want {
		t.Fatalf("the check was registered %d times in %d attempts, want %d", registered, attempts, want)
	}
	if err := l.SetPolicy(bad); err != nil {
		t.Errorf("SetPolicy(bad) after every check was removed = %v, want nil", err)
	}
}
