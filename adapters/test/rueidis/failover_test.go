package rueidis_test

// What a master failover costs the store: see redistests.RunFailover. The
// tests start servers of their own, not the shared ones: they kill a master.

import (
	"net"
	"testing"
	"time"

	"github.com/redis/rueidis"

	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// failoverTimeout bounds every dial, write and wait for a reply of the
// failover tests' clients, well below redistests.FailoverDecisionTimeout:
// a dead master costs a decision this long at most.
const failoverTimeout = 200 * time.Millisecond

// failoverStore returns a store with prefix on a client of its own, made
// from opt with bounded waits.
func failoverStore(t testing.TB, opt rueidis.ClientOption, prefix string) core.Store {
	t.Helper()
	opt.Dialer = net.Dialer{Timeout: failoverTimeout}
	opt.ConnWriteTimeout = failoverTimeout
	return kit.Store(t, newClient(t, opt), redistests.Options{Prefix: prefix})
}

// TestFailoverSentinel kills the master under load; the sentinel promotes
// the replica and the clients follow it.
func TestFailoverSentinel(t *testing.T) {
	s := redistest.Sentinel(t)
	redistests.RunFailover(t, redistests.Failover{
		Name: "rueidis/sentinel",
		NewStore: func(t testing.TB, prefix string) core.Store {
			opt := sentinelOpt(s)
			opt.Sentinel.Dialer = net.Dialer{Timeout: failoverTimeout}
			return failoverStore(t, opt, prefix)
		},
		Masters:  []string{s.Master.Addr},
		Victim:   s.Master.Addr,
		MasterOf: func(testing.TB, string) string { return s.Master.Addr },
		Kill:     s.Master.Kill,
		Promoted: func(string) bool {
			addr, err := s.MasterAddr()
			return err == nil && addr != s.Master.Addr
		},
	})
}

// TestFailoverCluster kills one of three masters under load; its replica
// takes over its slots.
func TestFailoverCluster(t *testing.T) {
	cl := redistest.Cluster(t, redistest.WithReplicas(1))
	victim := cl.Masters[1]
	redistests.RunFailover(t, redistests.Failover{
		Name:     "rueidis/cluster",
		NewStore: func(t testing.TB, prefix string) core.Store { return failoverStore(t, clusterOpt(cl), prefix) },
		Masters:  cl.Addrs(),
		Victim:   victim.Addr,
		MasterOf: func(t testing.TB, key string) string {
			owner := cl.SlotOwner(redistest.KeySlot(key))
			if owner == nil {
				t.Fatalf("slot %d of %q has no owner", redistest.KeySlot(key), key)
			}
			return owner.Addr
		},
		Kill: victim.Kill,
		Promoted: func(key string) bool {
			owner := cl.SlotOwner(redistest.KeySlot(key))
			return owner != nil && owner != victim
		},
	})
}
