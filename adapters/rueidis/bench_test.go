package rueidis_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	rstore "github.com/bucketry/ratelimit/adapters/rueidis"
	"github.com/bucketry/ratelimit/core"
)

// benchAllow measures decisions through a core.Limiter on the shared
// standalone server and reports decisions/s and, with local denials, the
// share answered locally. parallel runs 64 goroutines (SetParallelism(32)
// on 2 CPUs); otherwise one.
func benchAllow(b *testing.B, parallel bool, tiers int, deny bool, keys int, opts ...rstore.Option) {
	client := newClient(b, standaloneOpt(sharedStandalone(b)))
	st := mustStore(b, client, opts...)
	limit := core.TokenBucket(core.PerSecond(1e9), 1<<40)
	if deny {
		limit = core.TokenBucket(core.PerMinute(1), 1)
	}
	var rules []core.Rule
	scopes := []core.Scope{core.ScopeUser, core.ScopeEndpoint, core.ScopeGlobal}
	for i := range tiers {
		rules = append(rules, core.Rule{Name: "t" + strconv.Itoa(i), Scope: scopes[i], Limit: limit})
	}
	l, err := core.NewLimiter(mustPolicy(b, rules...), core.WithStore(st), core.WithFailureMode(core.FailClosed))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ids := make([]string, keys)
	for i := range ids {
		ids[i] = "user" + strconv.Itoa(i)
	}
	for _, id := range ids[:min(keys, 100)] {
		l.Allow(ctx, core.Request{User: id, Endpoint: "/x"}) // loads the script; takes the token
	}
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	run := func(i uint64, more func() bool) {
		for more() {
			i++
			d, err := l.Allow(ctx, core.Request{User: ids[i%uint64(keys)], Endpoint: "/x"})
			if err != nil || d.Allowed == deny {
				b.Errorf("Allow = %+v, %v", d, err)
				return
			}
		}
	}
	if parallel {
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) { run(next.Add(1<<32), pb.Next) })
	} else {
		n := 0
		run(0, func() bool { n++; return n <= b.N })
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
	if s := st.Stats(); s.Remote+s.Local+s.Fetched > 0 {
		b.ReportMetric(float64(s.Local)/float64(s.Remote+s.Local+s.Fetched), "local")
	}
}

func BenchmarkAllowHotKey(b *testing.B)       { benchAllow(b, true, 1, false, 1) }
func BenchmarkAllowHotKeySerial(b *testing.B) { benchAllow(b, false, 1, false, 1) }
func BenchmarkAllowHotKeyUnbatched(b *testing.B) {
	benchAllow(b, true, 1, false, 1, rstore.WithoutBatching())
}
func BenchmarkAllow10kKeys(b *testing.B)    { benchAllow(b, true, 1, false, 10000) }
func BenchmarkAllowThreeTiers(b *testing.B) { benchAllow(b, true, 3, false, 1) }
func BenchmarkDenyFloodLocal(b *testing.B) {
	benchAllow(b, true, 1, true, 1, rstore.WithLocalDenials())
}
func BenchmarkDenyFloodLocalSerial(b *testing.B) {
	benchAllow(b, false, 1, true, 1, rstore.WithLocalDenials())
}
func BenchmarkDenyFloodRemote(b *testing.B) { benchAllow(b, true, 1, true, 1) }
