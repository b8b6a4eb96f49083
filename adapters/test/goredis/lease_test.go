package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// TestLeaseMath: TakeLease and ReturnLease follow the bucket math on the
// key Take uses (see redistests.RunLeaseMath).
func TestLeaseMath(t *testing.T) {
	clients := [2]func(t testing.TB) redis.UniversalClient{standaloneClient(redistest.Standalone(t)), clusterClient(redistest.Cluster(t))}
	redistests.RunLeaseMath(t, func(t testing.TB, cluster bool, o redistests.Options) core.Store {
		client := clients[0]
		if cluster {
			client = clients[1]
		}
		return kit.Store(t, client(t), o)
	})
}

// TestLeaseFleet: a fleet of leasing instances, joining and dying, holds
// the bounds core.Lease states (see redistests.RunLeaseFleet).
func TestLeaseFleet(t *testing.T) {
	clients := [2]func(t testing.TB) redis.UniversalClient{standaloneClient(redistest.Standalone(t)), clusterClient(redistest.Cluster(t))}
	redistests.RunLeaseFleet(t, func(t testing.TB, cluster bool, o redistests.Options) (core.Store, func()) {
		client := clients[0]
		if cluster {
			client = clients[1]
		}
		c := client(t)
		return kit.Store(t, c, o), func() { c.Close() }
	})
}
