package benchmarks

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/adapters/goredis"
	rlrueidis "github.com/bucketry/ratelimit/adapters/rueidis"
	"github.com/bucketry/ratelimit/core"
)

// leaseInstances is the number of service instances BenchmarkLease
// simulates: each has its own client, store and limiter.
const leaseInstances = 8

// leaseTimeout bounds each store call of BenchmarkLease: far above any
// round trip, so that a busy machine slows the unleased runs down instead
// of failing their decisions.
const leaseTimeout = 10 * time.Second

// leaseScenario is one global bucket BenchmarkLease decides on.
type leaseScenario struct {
	name        string
	rate, burst int64
	lease       core.Lease
}

// BenchmarkLease decides requests on one global token bucket in Redis
// (the shared standalone server) from 8 instances' limiters at once, 8
// goroutines per GOMAXPROCS spread over them, with and without leasing,
// on go-redis and rueidis. Each decision is one op, so decisions per
// second are 1e9 / ns/op. Custom metrics: redis-calls/op, the script
// calls Redis ran (INFO commandstats, evalsha and eval, over the timed
// loop), and admitted/op. Scenarios: "open", a bucket no fleet here
// exhausts (100M/s, every decision admitted), and "seed", seed 000's
// global rule (50,000/s, burst 100,000), which the fleet exhausts.
//
// Run (from benchmarks/, make-free):
//
//	go test -run '^$' -bench 'Lease' -benchtime 2s -count 1
func BenchmarkLease(b *testing.B) {
	srv := redisServer(b)
	tgt := standaloneTarget(srv)
	for _, sc := range []leaseScenario{
		{"open", 100_000_000, 10_000_000, core.Lease{Max: 10_000, TTL: 100 * time.Millisecond}},
		{"seed", 50_000, 100_000, core.Lease{Max: 1_000, TTL: 100 * time.Millisecond}},
	} {
		for _, client := range []string{"goredis", "rueidis"} {
			for _, leased := range []bool{false, true} {
				mode := "unleased"
				if leased {
					mode = "leased"
				}
				b.Run(sc.name+"/"+client+"/"+mode, func(b *testing.B) {
					flushAll(b, srv)
					rule := core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerSecond(sc.rate), sc.burst)}
					if leased {
						rule.Lease = sc.lease
					}
					p, err := core.NewPolicy(rule)
					if err != nil {
						b.Fatal(err)
					}
					var limiters [leaseInstances]*core.Limiter
					for i := range limiters {
						var st core.Store
						var n sent
						if client == "goredis" {
							st, err = goredis.New(newGoRedis(b, tgt, &n), goredis.WithTimeout(leaseTimeout))
						} else {
							st, err = rlrueidis.New(newRueidis(b, tgt, &n), rlrueidis.WithTimeout(leaseTimeout))
						}
						if err != nil {
							b.Fatal(err)
						}
						if limiters[i], err = core.NewLimiter(p, core.WithStore(st), core.WithFailureMode(core.FailClosed)); err != nil {
							b.Fatal(err)
						}
						if _, err := limiters[i].Allow(context.Background(), core.Request{}); err != nil {
							b.Fatal(err) // connects, loads the script
						}
					}
					before := srv.CommandCalls(b)
					var next, admitted, failed atomic.Int64
					b.SetParallelism(8)
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						l := limiters[next.Add(1)%leaseInstances]
						ctx := context.Background()
						var ok, bad int64
						for pb.Next() {
							d, err := l.Allow(ctx, core.Request{})
							switch {
							case err != nil:
								bad++
							case d.Allowed:
								ok++
							}
						}
						admitted.Add(ok)
						failed.Add(bad)
					})
					b.StopTimer()
					after := srv.CommandCalls(b)
					if failed.Load() > 0 {
						b.Fatalf("%d decisions failed", failed.Load())
					}
					calls := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
					b.ReportMetric(float64(calls)/float64(b.N), "redis-calls/op")
					b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
				})
			}
		}
	}
}
