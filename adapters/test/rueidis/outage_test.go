package rueidis_test

import (
	"testing"

	"github.com/redis/rueidis"

	rstore "github.com/bucketry/ratelimit/adapters/rueidis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
)

// TestOutageLatency measures what a dead and a hung server add to each
// decision with the store's defaults: see redistests.RunOutageLatency.
func TestOutageLatency(t *testing.T) {
	redistests.RunOutageLatency(t, "rueidis", func(t testing.TB, addr string) core.Store {
		// rueidis's defaults (5s dials, 10s write timeout): the store's
		// bound alone must end every wait.
		s, err := rstore.New(newClient(t, rueidis.ClientOption{InitAddress: []string{addr}}))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return s
	})
}
