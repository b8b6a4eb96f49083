package goredis_test

// What a master failover costs the store: see redistests.RunFailover.

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// failoverTimeout bounds every dial, read, write and wait for a pooled
// connection of the failover tests' clients, well below
// redistests.FailoverDecisionTimeout: a dead master costs a decision this
// long at most per step.
const failoverTimeout = 200 * time.Millisecond

// failoverStore returns a store with prefix on client, which it closes when
// t ends.
func failoverStore(t testing.TB, client redis.UniversalClient, prefix string) core.Store {
	t.Helper()
	t.Cleanup(func() { client.Close() })
	return kit.Store(t, client, redistests.Options{Prefix: prefix})
}

// TestFailoverSentinel kills the master under load; the sentinel promotes
// the replica and the failover clients follow it.
func TestFailoverSentinel(t *testing.T) {
	s := redistest.Sentinel(t)
	redistests.RunFailover(t, redistests.Failover{
		Name: "goredis/sentinel",
		NewStore: func(t testing.TB, prefix string) core.Store {
			return failoverStore(t, redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName:    s.MasterName,
				SentinelAddrs: []string{s.SentinelAddr},
				DialTimeout:   failoverTimeout,
				ReadTimeout:   failoverTimeout,
				WriteTimeout:  failoverTimeout,
				PoolTimeout:   failoverTimeout,
				// The decision's context bounds the socket too.
				ContextTimeoutEnabled: true,
				// -1, not 0: go-redis reads 0 as its default of 3 retries.
				MaxRetries: -1,
				// One dial, not five 100ms apart: a dead master fails a
				// decision at once.
				DialerRetries: 1,
			}), prefix)
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
		Name: "goredis/cluster",
		NewStore: func(t testing.TB, prefix string) core.Store {
			return failoverStore(t, redis.NewClusterClient(&redis.ClusterOptions{
				Addrs:                 cl.Addrs(),
				DialTimeout:           failoverTimeout,
				ReadTimeout:           failoverTimeout,
				WriteTimeout:          failoverTimeout,
				PoolTimeout:           failoverTimeout,
				ContextTimeoutEnabled: true,
				MaxRetries:            -1,
				DialerRetries:         1,
				// ClusterStateReloadInterval stays at go-redis's default
				// (a minute): the store has the client reload its slot map
				// after a failure, as it reloads its own.
			}), prefix)
		},
		Masters: cl.Addrs(),
		Victim:  victim.Addr,
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
