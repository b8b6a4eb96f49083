package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// kit is the store, for the shared tests.
var kit = redistests.Kit[redis.UniversalClient, goredis.Option, *goredis.Store]{New: goredis.New, Prefix: goredis.WithPrefix, Clock: goredis.WithClientClock, MinTTL: goredis.WithMinTTL, Unbatched: goredis.WithoutBatching, LocalDenials: goredis.WithLocalDenials, Timeout: goredis.WithTimeout}

// mustStore returns a store on c with a prefix of its own, then opts.
func mustStore(t testing.TB, c redis.UniversalClient, opts ...goredis.Option) *goredis.Store {
	t.Helper()
	return kit.Store(t, c, redistests.Options{}, opts...)
}

// harness builds every case's store on a client of its own from client.
func harness(client func(t testing.TB) redis.UniversalClient, opts ...goredis.Option) conformance.StoreHarness {
	return redistests.Harness(func(t testing.TB, o redistests.Options) core.Store { return kit.Store(t, client(t), o, opts...) })
}

func standaloneClient(srv *redistest.Server) func(t testing.TB) redis.UniversalClient {
	return func(t testing.TB) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{ContextTimeoutEnabled: true, Addr: srv.Addr, PoolSize: 64})
		t.Cleanup(func() { c.Close() })
		return c
	}
}

func clusterClient(cl *redistest.ClusterServer) func(t testing.TB) redis.UniversalClient {
	return func(t testing.TB) redis.UniversalClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{ContextTimeoutEnabled: true, Addrs: cl.Addrs(), PoolSize: 64})
		t.Cleanup(func() { c.Close() })
		return c
	}
}

func TestConformanceStandalone(t *testing.T) {
	srv := redistest.Standalone(t)
	conformance.RunStoreSuite(t, harness(standaloneClient(srv)))
}

func TestConformanceCluster(t *testing.T) {
	cl := redistest.Cluster(t)
	conformance.RunStoreSuite(t, harness(clusterClient(cl)))
}

func TestPropertiesStandalone(t *testing.T) {
	srv := redistest.Standalone(t)
	conformance.RunPropertySuite(t, harness(standaloneClient(srv)))
}

// TestPropertiesCluster runs the random sequences with one rule name per
// bucket, so multi-bucket takes span slots and exercise refunds, time
// stepping back included.
func TestPropertiesCluster(t *testing.T) {
	cl := redistest.Cluster(t)
	conformance.RunPropertySuite(t, harness(clusterClient(cl)))
}

func TestConformanceSentinel(t *testing.T) {
	s := redistest.Sentinel(t)
	conformance.RunStoreSuite(t, harness(func(t testing.TB) redis.UniversalClient {
		c := redis.NewFailoverClient(&redis.FailoverOptions{ContextTimeoutEnabled: true, MasterName: s.MasterName, SentinelAddrs: []string{s.SentinelAddr}, PoolSize: 64})
		t.Cleanup(func() { c.Close() })
		return c
	}))
}

func TestConformanceUnbatched(t *testing.T) {
	srv := redistest.Standalone(t)
	conformance.RunStoreSuite(t, harness(standaloneClient(srv), goredis.WithoutBatching()))
}

func TestConformanceLocalDenials(t *testing.T) {
	srv := redistest.Standalone(t)
	conformance.RunStoreSuite(t, harness(standaloneClient(srv), goredis.WithLocalDenials()))
}
