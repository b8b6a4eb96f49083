package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
)

// TestOutageLatency measures what a dead and a hung server add to each
// decision with the store's defaults: see redistests.RunOutageLatency.
func TestOutageLatency(t *testing.T) {
	redistests.RunOutageLatency(t, "goredis", func(t testing.TB, addr string) core.Store {
		// go-redis's defaults but ContextTimeoutEnabled (3 retries, 5
		// dials per connection, 3s reads): the store's bound alone must
		// end every wait.
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { client.Close() })
		s, err := goredis.New(client)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return s
	})
}
