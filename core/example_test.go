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
// A request of no plan, or of a plan no rule names, gets the free plan's.
func ExampleLimiter_Allow() {
	policy, err := core.NewPlanPolicy(core.Plans{Default: "free"},
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
	req := core.Request{User: "bob", Plan: "enterprise", Endpoint: "GET /search"}
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

// A stricter tier on one route, decided with the others in one take: a
// search the search tier denies takes nothing from per-user.
func ExampleRule_routes() {
	policy, err := core.NewPolicy(
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(60), 5)},
		core.Rule{Name: "search", Scope: core.ScopeUser, Routes: []string{"GET /search"}, Limit: core.TokenBucket(core.PerMinute(6), 2)},
	)
	if err != nil {
		panic(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	search := core.Request{User: "ann", Method: "GET", Route: "/search"}
	item := core.Request{User: "ann", Method: "GET", Route: "/items/{id}"}
	for _, req := range []core.Request{search, search, search, item} {
		d, _ := limiter.AllowAt(context.Background(), t0, req, 1)
		fmt.Printf("%s allowed=%v tier=%s remaining=%d\n", req.Route, d.Allowed, d.Rule, d.Remaining)
	}
	// Output:
	// /search allowed=true tier=search remaining=1
	// /search allowed=true tier=search remaining=0
	// /search allowed=false tier=search remaining=0
	// /items/{id} allowed=true tier=per-user remaining=2
}

// Per-tenant limits from a table the service fills and changes at run
// time, with the rule's Limit for tenants the table has none for. A
// tenant whose limit changes keeps its bucket.
func ExampleLimitTable() {
	tenants := core.NewLimitTable()
	if err := tenants.Set("acme", core.TokenBucket(core.PerHour(4), 4)); err != nil {
		panic(err)
	}
	policy, err := core.NewPolicy(core.Rule{
		Name: "per-tenant", Scope: core.Dimension("tenant"), Lookup: tenants,
		Limit: core.TokenBucket(core.PerHour(2), 2), // tenants not in the table
	})
	if err != nil {
		panic(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	take := func(tenant string) {
		req := core.Request{Dims: []core.Dim{{Name: "tenant", Value: tenant}}}
		d, _ := limiter.AllowAt(context.Background(), t0, req, 1)
		fmt.Printf("%s allowed=%v limit=%d remaining=%d\n", tenant, d.Allowed, d.Limit, d.Remaining)
	}
	take("acme")
	take("acme")
	take("beta")
	// acme upgrades: twice the burst at twice the rate. Its bucket, half
	// full, stays half full.
	if err := tenants.Set("acme", core.TokenBucket(core.PerHour(8), 8)); err != nil {
		panic(err)
	}
	take("acme")
	// Output:
	// acme allowed=true limit=4 remaining=3
	// acme allowed=true limit=4 remaining=2
	// beta allowed=true limit=2 remaining=1
	// acme allowed=true limit=8 remaining=3
}
