package rueidis_test

import (
	"testing"

	"github.com/redis/rueidis"

	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
)

// TestLeaseMath: TakeLease and ReturnLease follow the bucket math on the
// key Take uses (see redistests.RunLeaseMath).
func TestLeaseMath(t *testing.T) {
	opts := [2]rueidis.ClientOption{standaloneOpt(sharedStandalone(t)), clusterOpt(sharedCluster(t))}
	redistests.RunLeaseMath(t, func(t testing.TB, cluster bool, o redistests.Options) core.Store {
		opt := opts[0]
		if cluster {
			opt = opts[1]
		}
		return kit.Store(t, newClient(t, opt), o)
	})
}

// TestLeaseFleet: a fleet of leasing instances, joining and dying, holds
// the bounds core.Lease states (see redistests.RunLeaseFleet).
func TestLeaseFleet(t *testing.T) {
	opts := [2]rueidis.ClientOption{standaloneOpt(sharedStandalone(t)), clusterOpt(sharedCluster(t))}
	redistests.RunLeaseFleet(t, func(t testing.TB, cluster bool, o redistests.Options) (core.Store, func()) {
		opt := opts[0]
		if cluster {
			opt = opts[1]
		}
		c := newClient(t, opt)
		return kit.Store(t, c, o), c.Close
	})
}
