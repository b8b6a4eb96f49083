package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// TestClusterFaultKillMaster kills a master of a Cluster without replicas
// under load and restarts it: see redistests.RunClusterFault.
func TestClusterFaultKillMaster(t *testing.T) {
	redistests.RunClusterFault(t, clusterFault)
}

// TestRefundWhenCallerEnds: see redistests.RunRefundWhenCallerEnds.
func TestRefundWhenCallerEnds(t *testing.T) {
	redistests.RunRefundWhenCallerEnds(t, redistest.Cluster(t), clusterFault)
}

// clusterFault makes the stores of the Cluster fault tests.
var clusterFault = redistests.ClusterFault{
	Name: "goredis",
	NewStore: func(t testing.TB, addrs []string, prefix string) redistests.FaultStore {
		// go-redis's defaults but ContextTimeoutEnabled, without which no
		// wait could be bounded.
		client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		t.Cleanup(func() { client.Close() })
		s, err := goredis.New(client, goredis.WithPrefix(prefix), goredis.WithBreaker(redistests.FaultFailures, redistests.FaultCooldown), goredis.WithTimeout(redistests.FaultBound))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return redistests.NewFaultStore(s, func() (int64, int64) { st := s.Stats(); return st.Refused, st.Refunds })
	},
}
