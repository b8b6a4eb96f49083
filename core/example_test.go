package core_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// A limiter with one tier, 2 per second with a burst of 4, driven at named
// instants: the corrected timeline of the seed notes.
func ExampleLimiter_AllowAt() {
	policy, err := core.NewPolicy(core.Rule{
		Name:  "per-user",
		Scope: core.ScopeUser,
		Limit: core.TokenBucket(core.PerSecond(2), 4),
	})
	if err != nil {
		panic(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	req := core.Request{User: "alice"}
	for _, at := range []time.Duration{0, 0, 0, 0, 500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second} {
		d, _ := limiter.AllowAt(context.Background(), t0.Add(at), req, 1)
		fmt.Printf("t=%-5v allowed=%-5v remaining=%d retry=%v\n", at, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// t=0s    allowed=true  remaining=3 retry=0s
	// t=0s    allowed=true  remaining=2 retry=0s
	// t=0s    allowed=true  remaining=1 retry=0s
	// t=0s    allowed=true  remaining=0 retry=0s
	// t=500ms allowed=true  remaining=0 retry=0s
	// t=1s    allowed=true  remaining=0 retry=0s
	// t=2s    allowed=true  remaining=1 retry=0s
	// t=2s    allowed=true  remaining=0 retry=0s
	// t=2s    allowed=false remaining=0 retry=500ms
}

// Several tiers on one request: all must pass, and a denial names the tier.
func ExampleLimiter_Allow() {
	policy, err := core.NewPolicy(
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Plan: "free", Limit: core.TokenBucket(core.PerMinute(10), 2)},
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Plan: "pro", Limit: core.TokenBucket(core.PerMinute(100), 20)},
		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerSecond(50), 100)},
		core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerSecond(1000), 2000)},
	)
	if err != nil {
		panic(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		panic(err)
	}
	req := core.Request{User: "bob", Plan: "free", Endpoint: "GET /search"}
	for range 3 {
		d, err := limiter.Allow(context.Background(), req)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v tier=%s remaining=%d tiers=%d\n", d.Allowed, d.Rule, d.Remaining, len(d.Tiers()))
	}
	// Output:
	// allowed=true tier=per-user remaining=1 tiers=3
	// allowed=true tier=per-user remaining=0 tiers=3
	// allowed=false tier=per-user remaining=0 tiers=3
}

// Configuration mistakes are reported when the policy is built, naming the
// rule and the field, and match a sentinel error.
func ExampleNewPolicy_error() {
	_, err := core.NewPolicy(core.Rule{
		Name:  "per-ip",
		Scope: core.ScopeIP,
		Limit: core.TokenBucket(core.PerSecond(10), 0),
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, core.ErrInvalidBurst))
	// Output:
	// ratelimit: rule "per-ip": invalid burst: burst must be between 1 and 2^50, got 0
	// true
}

// The readable constructors for a limit's numbers.
func ExampleTokenBucket() {
	for _, l := range []core.Limit{
		core.TokenBucket(core.PerSecond(10), 50),   // 10 per second, burst 50
		core.TokenBucket(core.PerMinute(100), 100), // 100 per minute
		core.TokenBucket(core.PerDay(1000), 1000),  // 1000 per day
		core.SlidingWindow(100, time.Minute),
		core.Shaping(core.PerSecond(5), 1, time.Second),
	} {
		fmt.Println(l)
	}
	// Output:
	// token_bucket 10/1s burst 50
	// token_bucket 100/1m0s burst 100
	// token_bucket 1000/24h0m0s burst 1000
	// sliding_window 100 per 1m0s
	// shaping 5/1s burst 1 max wait 1s
}

// A store that fails: the limiter's failure mode decides, and says so.
func ExampleWithFailureMode() {
	policy, _ := core.NewPolicy(core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 1)})
	for _, mode := range []core.FailureMode{core.FailOpen, core.FailClosed, core.FailFallback} {
		limiter, _ := core.NewLimiter(policy, core.WithStore(downStore{}), core.WithFailureMode(mode))
		d, err := limiter.Allow(context.Background(), core.Request{User: "u"})
		fmt.Printf("%-11v allowed=%-5v degraded=%v unavailable=%v\n", mode, d.Allowed, d.Degraded, errors.Is(err, core.ErrUnavailable))
	}
	// Output:
	// fail_open   allowed=true  degraded=true unavailable=false
	// fail_closed allowed=false degraded=true unavailable=true
	// fallback    allowed=true  degraded=true unavailable=false
}

type downStore struct{}

func (downStore) Take(context.Context, *core.Take) error { return errors.New("connection refused") }
