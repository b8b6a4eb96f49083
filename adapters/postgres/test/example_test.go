package pglimit_test

import (
	"context"
	"fmt"

	pglimit "github.com/bucketry/ratelimit/adapters/postgres"
	"github.com/bucketry/ratelimit/core"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Rules kept in PostgreSQL: the seed's example rows, loaded at start, then
// changed with an UPDATE.
func ExampleNewSource() {
	ctx := context.Background()
	url, err := shared.CreateDatabase("example_source") // a test server; use your DATABASE_URL
	if err != nil {
		panic(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	if err := pglimit.Migrate(ctx, pool); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity, plan) VALUES
		('user:{user_id}', 'user', 10, 50, 'free'),
		('user:{user_id}', 'user', 100, 500, 'pro'),
		('endpoint:/api/search', 'endpoint', 1000, 2000, NULL),
		('global', 'global', 50000, 100000, NULL)`); err != nil {
		panic(err)
	}

	empty, _ := core.NewPolicy()
	limiter, err := core.NewLimiter(empty)
	if err != nil {
		panic(err)
	}
	src, err := pglimit.NewSource(ctx, pool, limiter, pglimit.WithPlans(core.Plans{Default: "free"}))
	if err != nil {
		panic(err)
	}
	defer src.Close()
	for _, r := range limiter.Policy().Rules() {
		fmt.Printf("%s: scope %s, plan %q, %v per second, burst %d\n", r.Name, r.Scope, r.Plan, r.Limit.Rate().N, r.Limit.Burst())
	}

	// Every instance sees the change at once through LISTEN/NOTIFY;
	// Reload makes sure of it here.
	if _, err := pool.Exec(ctx, "UPDATE RateLimitRule SET burst_capacity = 80 WHERE plan = 'free'"); err != nil {
		panic(err)
	}
	if err := src.Reload(ctx); err != nil {
		panic(err)
	}
	d, err := limiter.Allow(ctx, core.Request{User: "alice", Plan: "free"})
	if err != nil {
		panic(err)
	}
	fmt.Println("free user's limit now:", d.Limit, "allowed:", d.Allowed)
	// Output:
	// user.free: scope user, plan "free", 10 per second, burst 50
	// user.pro: scope user, plan "pro", 100 per second, burst 500
	// endpoint.api.search: scope endpoint, plan "", 1000 per second, burst 2000
	// global: scope global, plan "", 50000 per second, burst 100000
	// free user's limit now: 80 allowed: true
}
