package rueidis_test

import (
	"testing"

	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// TestReloadSoak reloads a limiter on the store 10,000 times: the heap stays
// flat (see redistests.RunReloadSoak).
func TestReloadSoak(t *testing.T) {
	client := newClient(t, standaloneOpt(redistest.Standalone(t)))
	redistests.RunReloadSoak(t, "rueidis", func(t testing.TB, o redistests.Options) core.Store {
		return kit.Store(t, client, o)
	})
}
