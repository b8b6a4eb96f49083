package benchmarks

import (
	"os"
	"sync"
	"testing"

	"github.com/bucketry/ratelimit/internal/redistest"
)

// The Redis server and Cluster every Redis benchmark and test of this
// binary shares, each started on first use and stopped by TestMain.
var shared struct {
	sync.Mutex
	srv  *redistest.Server
	stop func()
	err  error

	cluster     *redistest.ClusterServer
	stopCluster func()
	clusterErr  error
}

// redisServer returns the shared server, starting it on first use. It
// fails tb if redis-server cannot start.
func redisServer(tb testing.TB) *redistest.Server {
	tb.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.srv == nil && shared.err == nil {
		shared.srv, shared.stop, shared.err = redistest.StartStandalone()
	}
	if shared.err != nil {
		tb.Fatalf("start redis-server: %v", shared.err)
	}
	return shared.srv
}

// redisCluster returns the shared Cluster of 3 masters, starting it on
// first use. It fails tb if the Cluster cannot start.
func redisCluster(tb testing.TB) *redistest.ClusterServer {
	tb.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.cluster == nil && shared.clusterErr == nil {
		shared.cluster, shared.stopCluster, shared.clusterErr = redistest.StartCluster()
	}
	if shared.clusterErr != nil {
		tb.Fatalf("start a Redis Cluster: %v", shared.clusterErr)
	}
	return shared.cluster
}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Lock()
	if shared.stop != nil {
		shared.stop()
	}
	if shared.stopCluster != nil {
		shared.stopCluster()
	}
	shared.Unlock()
	os.Exit(code)
}

// flushAll empties the server, so that every run starts from full buckets.
func flushAll(tb testing.TB, srv *redistest.Server) {
	tb.Helper()
	if _, err := srv.Do("FLUSHALL"); err != nil {
		tb.Fatalf("FLUSHALL: %v", err)
	}
}
