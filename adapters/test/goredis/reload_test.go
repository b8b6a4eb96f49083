package goredis_test

import (
	"testing"

	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// TestReloadSoak reloads a limiter on the store 10,000 times: the heap stays
// flat (see redistests.RunReloadSoak).
func TestReloadSoak(t *testing.T) {
	client := standaloneClient(redistest.Standalone(t))(t)
	redistests.RunReloadSoak(t, "goredis", func(t testing.TB, o redistests.Options) core.Store {
		return kit.Store(t, client, o)
	})
}
