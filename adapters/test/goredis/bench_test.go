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
	client := redis.NewClient(&redis.Options{Addr: redistest.Standalone(b).Addr, PoolSize: 128})
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
