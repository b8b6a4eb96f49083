package goredis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// prefixes gives every store of a test binary its own key space, so cases
// sharing one server never see each other's buckets.
var prefixes atomic.Int64

func newPrefix() string { return fmt.Sprintf("t%d", prefixes.Add(1)) }

func harness(client func(t testing.TB) redis.UniversalClient, opts ...goredis.Option) conformance.StoreHarness {
	return conformance.StoreHarness{
		New: func(t testing.TB, clock core.Clock) core.Store {
			// The suite's clock is not Redis's: keep keys for the whole run.
			o := append([]goredis.Option{goredis.WithPrefix(newPrefix()), goredis.WithClientClock(clock), goredis.WithMinTTL(time.Hour)}, opts...)
			s, err := goredis.New(client(t), o...)
			if err != nil {
				t.Fatalf("goredis.New: %v", err)
			}
			return s
		},
	}
}

func standaloneClient(srv *redistest.Server) func(t testing.TB) redis.UniversalClient {
	return func(t testing.TB) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
		t.Cleanup(func() { c.Close() })
		return c
	}
}

func clusterClient(cl *redistest.ClusterServer) func(t testing.TB) redis.UniversalClient {
	return func(t testing.TB) redis.UniversalClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 64})
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
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: []string{s.SentinelAddr}, PoolSize: 64})
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

var _ = context.Background
