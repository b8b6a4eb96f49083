package rueidis_test

import (
	"testing"

	"github.com/redis/rueidis"

	rstore "github.com/bucketry/ratelimit/adapters/rueidis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
)

// TestClusterFaultKillMaster kills a master of a Cluster without replicas
// under load and restarts it: see redistests.RunClusterFault.
func TestClusterFaultKillMaster(t *testing.T) {
	redistests.RunClusterFault(t, clusterFault)
}

// TestRefundWhenCallerEnds: see redistests.RunRefundWhenCallerEnds.
func TestRefundWhenCallerEnds(t *testing.T) {
	redistests.RunRefundWhenCallerEnds(t, sharedCluster(t), clusterFault)
}

// clusterFault makes the stores of the Cluster fault tests.
var clusterFault = redistests.ClusterFault{
	Name: "rueidis",
	NewStore: func(t testing.TB, addrs []string, prefix string) redistests.FaultStore {
		// rueidis's defaults.
		s, err := rstore.New(newClient(t, rueidis.ClientOption{InitAddress: addrs}),
			rstore.WithPrefix(prefix), rstore.WithBreaker(redistests.FaultFailures, redistests.FaultCooldown), rstore.WithTimeout(redistests.FaultBound))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return redistests.NewFaultStore(s, func() (int64, int64) { st := s.Stats(); return st.Refused, st.Refunds })
	},
}
