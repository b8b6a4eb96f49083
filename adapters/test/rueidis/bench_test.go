package rueidis_test

import (
	"testing"

	rstore "github.com/bucketry/ratelimit/adapters/rueidis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// benchAllow measures decisions through a core.Limiter on the shared
// standalone server (see redistests.Bench) and, with local denials,
// reports the share answered from the client-side cache.
func benchAllow(b *testing.B, bc redistests.Bench, opts ...rstore.Option) {
	st := mustStore(b, newClient(b, standaloneOpt(sharedStandalone(b))), opts...)
	bc.Run(b, st, func() (int64, int64) { s := st.Stats(); return s.Local, s.Remote + s.Local + s.Fetched })
}

// The benchmarks' shapes: one hot key allowed, or denied over and over.
var (
	hot   = redistests.Bench{Parallel: true, Tiers: 1, Keys: 1}
	flood = redistests.Bench{Parallel: true, Tiers: 1, Deny: true, Keys: 1}
)

// serial is bc on one goroutine.
func serial(bc redistests.Bench) redistests.Bench { bc.Parallel = false; return bc }

func BenchmarkAllowHotKey(b *testing.B)          { benchAllow(b, hot) }
func BenchmarkAllowHotKeySerial(b *testing.B)    { benchAllow(b, serial(hot)) }
func BenchmarkAllowHotKeyUnbatched(b *testing.B) { benchAllow(b, hot, rstore.WithoutBatching()) }
func BenchmarkAllow10kKeys(b *testing.B) {
	benchAllow(b, redistests.Bench{Parallel: true, Tiers: 1, Keys: 10000})
}
func BenchmarkAllowThreeTiers(b *testing.B) {
	benchAllow(b, redistests.Bench{Parallel: true, Tiers: 3, Keys: 1})
}
func BenchmarkDenyFloodLocal(b *testing.B) { benchAllow(b, flood, rstore.WithLocalDenials()) }
func BenchmarkDenyFloodLocalSerial(b *testing.B) {
	benchAllow(b, serial(flood), rstore.WithLocalDenials())
}
func BenchmarkDenyFloodRemote(b *testing.B) { benchAllow(b, flood) }

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
			st := mustStore(b, newClient(b, clusterOpt(cl)), rstore.WithPrefix(bc.prefix))
			redistests.Bench{Parallel: true, Tiers: 3, Keys: 1000}.Run(b, st, nil)
		})
	}
}
