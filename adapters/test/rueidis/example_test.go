package rueidis_test

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	rlrueidis "github.com/bucketry/ratelimit/adapters/rueidis"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// A limiter on Redis through rueidis, with local denials: once Redis has
// denied alice, her next requests are denied from the client-side cache.
func ExampleNew() {
	srv, stop, err := redistest.StartStandalone() // a redis-server for the example
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	store, err := rlrueidis.New(client, rlrueidis.WithLocalDenials())
	if err != nil {
		fmt.Println(err)
		return
	}
	policy, err := core.NewPolicy(core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(1), 2)})
	if err != nil {
		fmt.Println(err)
		return
	}
	limiter, err := core.NewLimiter(policy, core.WithStore(store))
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 5 {
		d, err := limiter.Allow(context.Background(), core.Request{User: "alice"})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(d.Allowed, d.Remaining)
	}
	s := store.Stats()
	fmt.Printf("script calls %d, denied from a fetched state %d, from the cache %d\n", s.Remote, s.Fetched, s.Local)
	// Output:
	// true 1
	// true 0
	// false 0
	// false 0
	// false 0
	// script calls 3, denied from a fetched state 1, from the cache 1
}
