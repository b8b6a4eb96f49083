package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// benchAllow measures decisions through a core.Limiter on a standalone
// server of its own (see redistests.Bench).
func benchAllow(b *testing.B, bc redistests.Bench, opts ...goredis.Option) {
	client := redis.NewClient(&redis.Options{ContextTimeoutEnabled: true, Addr: redistest.Standalone(b).Addr, PoolSize: 128})
	defer client.Close()
	st := mustStore(b, client, opts...)
	bc.Run(b, st, func() (int64, int64) { s := st.Stats(); return s.Local, s.Remote + s.Local })
}

func BenchmarkAllowHotKey(b *testing.B) {
	benchAllow(b, redistests.Bench{Parallel: true, Tiers: 1, Keys: 1})
}

func BenchmarkAllowHotKeyUnbatched(b *testing.B) {
	benchAllow(b, redistests.Bench{Parallel: true, Tiers: 1, Keys: 1}, goredis.WithoutBatching())
}

func BenchmarkAllow10kKeys(b *testing.B) {
	benchAllow(b, redistests.Bench{Parallel: true, Tiers: 1, Keys: 10000})
}

func BenchmarkAllowThreeTiers(b *testing.B) {
	benchAllow(b, redistests.Bench{Parallel: true, Tiers: 3, Keys: 1})
}

func BenchmarkDenyFloodLocal(b *testing.B) {
	benchAllow(b, redistests.Bench{Parallel: true, Tiers: 1, Deny: true, Keys: 1}, goredis.WithLocalDenials())
}

// BenchmarkClusterThreeTiers: three tiers per request on a Cluster, their
// keys in one hash slot (a hash-tagged prefix) or in three, whose slot
// groups join the batches of their slots.
func BenchmarkClusterThreeTiers(b *testing.B) {
	cl := redistest.Cluster(b)
	for _, bc := range []struct {
		name   string
		prefix string
	}{{"one_slot", "{rl}"}, {"slots", "rl"}} {
		b.Run(bc.name, func(b *testing.B) {
			client := redis.NewClusterClient(&redis.ClusterOptions{ContextTimeoutEnabled: true, Addrs: cl.Addrs(), PoolSize: 128})
			defer client.Close()
			st := mustStore(b, client, goredis.WithPrefix(bc.prefix))
			redistests.Bench{Parallel: true, Tiers: 3, Keys: 1000}.Run(b, st, nil)
		})
	}
}
