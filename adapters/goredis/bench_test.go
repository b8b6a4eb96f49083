package goredis_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// benchAllow measures allowed decisions through a core.Limiter at 64
// goroutines (b.SetParallelism(32) on 2 CPUs) and reports decisions/s.
func benchAllow(b *testing.B, tiers int, deny bool, keys int, opts ...goredis.Option) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Standalone(b).Addr, PoolSize: 128})
	defer client.Close()
	st, err := goredis.New(client, append([]goredis.Option{goredis.WithPrefix("b" + strconv.FormatInt(time.Now().UnixNano(), 36))}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	limit := core.TokenBucket(core.PerSecond(1e9), 1<<40)
	if deny {
		limit = core.TokenBucket(core.PerMinute(1), 1)
	}
	var rules []core.Rule
	scopes := []core.Scope{core.ScopeUser, core.ScopeEndpoint, core.ScopeGlobal}
	for i := range tiers {
		rules = append(rules, core.Rule{Name: "t" + strconv.Itoa(i), Scope: scopes[i], Limit: limit})
	}
	p, err := core.NewPolicy(rules...)
	if err != nil {
		b.Fatal(err)
	}
	l, _ := core.NewLimiter(p, core.WithStore(st), core.WithFailureMode(core.FailClosed))
	ctx := context.Background()
	ids := make([]string, keys)
	for i := range ids {
		ids[i] = "user" + strconv.Itoa(i)
	}
	l.Allow(ctx, core.Request{User: ids[0], Endpoint: "/x"})
	var next atomic.Uint64
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(1)
		for pb.Next() {
			i++
			d, err := l.Allow(ctx, core.Request{User: ids[i%uint64(keys)], Endpoint: "/x"})
			if err != nil || d.Allowed == deny {
				b.Errorf("Allow = %+v, %v", d, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
	s := st.Stats()
	if s.Remote+s.Local > 0 {
		b.ReportMetric(float64(s.Local)/float64(s.Remote+s.Local), "local")
	}
}

func BenchmarkAllowHotKey(b *testing.B) { benchAllow(b, 1, false, 1) }
func BenchmarkAllowHotKeyUnbatched(b *testing.B) {
	benchAllow(b, 1, false, 1, goredis.WithoutBatching())
}
func BenchmarkAllow10kKeys(b *testing.B)    { benchAllow(b, 1, false, 10000) }
func BenchmarkAllowThreeTiers(b *testing.B) { benchAllow(b, 3, false, 1) }
func BenchmarkDenyFloodLocal(b *testing.B)  { benchAllow(b, 1, true, 1, goredis.WithLocalDenials()) }
