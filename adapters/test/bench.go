package redistests

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// Bench is one benchmark of a store's decisions through a core.Limiter.
type Bench struct {
	Parallel bool // 64 goroutines (SetParallelism(32) on 2 CPUs); else one
	Tiers    int  // rules per request, 1 to 3, each on its own key
	Deny     bool // every request denied (a burst of 1), else allowed
	Keys     int  // identities the requests cycle through
}

// Run measures decisions on st and reports decisions/s and, when stats is
// set, the share decided locally: stats returns the store's local and all
// decisions so far.
func (bc Bench) Run(b *testing.B, st core.Store, stats func() (local, all int64)) {
	limit := core.TokenBucket(core.PerSecond(1e9), 1<<40)
	if bc.Deny {
		limit = core.TokenBucket(core.PerMinute(1), 1)
	}
	var rules []core.Rule
	scopes := []core.Scope{core.ScopeUser, core.ScopeEndpoint, core.ScopeGlobal}
	for i := range bc.Tiers {
		rules = append(rules, core.Rule{Name: "t" + strconv.Itoa(i), Scope: scopes[i], Limit: limit})
	}
	l := Limiter(b, Policy(b, rules...), core.WithStore(st), core.WithFailureMode(core.FailClosed))
	ctx := context.Background()
	ids := make([]string, bc.Keys)
	for i := range ids {
		ids[i] = "user" + strconv.Itoa(i)
	}
	for _, id := range ids[:min(bc.Keys, 100)] {
		l.Allow(ctx, core.Request{User: id, Endpoint: "/x"}) // loads the script; takes the token
	}
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	run := func(i uint64, more func() bool) {
		for more() {
			i++
			d, err := l.Allow(ctx, core.Request{User: ids[i%uint64(bc.Keys)], Endpoint: "/x"})
			if err != nil || d.Allowed == bc.Deny {
				b.Errorf("Allow = %+v, %v", d, err)
				return
			}
		}
	}
	if bc.Parallel {
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) { run(next.Add(1<<32), pb.Next) })
	} else {
		n := 0
		run(0, func() bool { n++; return n <= b.N })
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
	if stats != nil {
		if local, all := stats(); all > 0 {
			b.ReportMetric(float64(local)/float64(all), "local")
		}
	}
}
