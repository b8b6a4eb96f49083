package redisstore

import (
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/bucketry/ratelimit/core"
)

// deniedTake returns a take of cost 5 on one token bucket of p, as Redis
// answers it when denied: 2 tokens left, a RetryAfter of 300ms.
func deniedTake(p *core.Policy) *core.Take {
	rules := p.Rules()
	return &core.Take{
		Cost:    5,
		Buckets: []core.Bucket{{Rule: rules[0].Name, Key: "u", Limit: &rules[0].Limit}},
		States:  []core.BucketState{{Reason: core.ReasonLimited, Remaining: 2, RetryAfter: 300 * time.Millisecond, ResetAfter: time.Second}},
		At:      time.Unix(1000, 0),
	}
}

func denialPolicy(t *testing.T) *core.Policy {
	t.Helper()
	p, err := core.NewPolicy(core.Rule{Name: "r", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(10), 10)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDenialsRuleChange: a denial answers a repeat under the same limit,
// not one under the limit of a policy loaded since, even with equal numbers.
func TestDenialsRuleChange(t *testing.T) {
	c := newDenials()
	t0 := time.Now()
	t1 := t0.Add(10 * time.Millisecond)
	old := deniedTake(denialPolicy(t))
	c.record(joinKeys([]string{"k"}), old, t0, t0)

	repeat := deniedTake(denialPolicy(t))
	repeat.Buckets[0].Limit = old.Buckets[0].Limit
	if !c.answer(joinKeys([]string{"k"}), repeat, t1) {
		t.Errorf("answer(same limit, t1) = false, want true")
	}
	if c.answer(joinKeys([]string{"k"}), deniedTake(denialPolicy(t)), t1) {
		t.Errorf("answer(new policy's limit, t1) = true, want false")
	}
}

// TestDenialsKeepNoPolicy: a remembered denial does not keep the limits
// it was decided under, and so their policy, alive.
func TestDenialsKeepNoPolicy(t *testing.T) {
	c := newDenials()
	now := time.Now()
	take := deniedTake(denialPolicy(t))
	w := weak.Make(take.Buckets[0].Limit)
	c.record(joinKeys([]string{"k"}), take, now, now)
	take = nil
	for range 10 {
		runtime.GC()
		if w.Value() == nil {
			break
		}
	}
	if w.Value() != nil {
		t.Fatal("the limit of a remembered denial is still reachable after runtime.GC")
	}
	if c.answer(joinKeys([]string{"k"}), deniedTake(denialPolicy(t)), now) {
		t.Errorf("answer(new limit) = true after the old limit died, want false")
	}
	runtime.KeepAlive(c)
}
