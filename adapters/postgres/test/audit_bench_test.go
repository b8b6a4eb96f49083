package pglimit_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	pglimit "github.com/bucketry/ratelimit/adapters/postgres"
	"github.com/bucketry/ratelimit/core"
)

// overheadVariant is one way to run the request path in
// BenchmarkAuditOverhead.
type overheadVariant struct {
	name string
	l    *core.Limiter
}

// BenchmarkAuditOverhead measures what the audit adds to the request path:
// Allow on a limiter whose every request is denied (1000 users, each past
// its one request an hour), on the memory store, with
//
//   - base: no audit;
//   - audit: the Audit's Option (core.WithDenials), writing to a real
//     PostgreSQL with the default options (the queue fills at once, so
//     most calls take the drop path, as in a deny flood);
//   - observer: the same Audit's Observe, through core.WithObserver.
//
// The variants run in interleaved rounds of 2000 requests, in rotating
// order, so that drift in the machine's speed affects each alike; the
// reported figures are medians over the rounds: base-ns/op, audit-ns/op
// (also reported as ns/op), observer-ns/op, slowdown-% (audit against
// base) and observer-slowdown-% (observer against base), and each
// variant's allocations per request, measured apart with testing.AllocsPerRun. "serial" runs one
// goroutine, "parallel" GOMAXPROCS goroutines per round (ns/op is then wall
// time per request across them).
func BenchmarkAuditOverhead(b *testing.B) {
	_, pool := migrated(b)
	a, err := pglimit.NewAudit(pool)
	if err != nil {
		b.Fatal(err)
	}
	defer closeAudit(b, a)
	rule := core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: oneThenDeny}
	variants := []overheadVariant{
		{"base", auditedLimiter(b, nil, rule)},
		{"audit", auditedLimiter(b, a, rule)},
		{"observer", newObserved(b, a.Observe, rule)},
	}
	const users = 1000
	reqs := make([]core.Request, users)
	ctx := context.Background()
	for i := range reqs {
		reqs[i] = core.Request{User: fmt.Sprintf("user-%d", i), IP: "198.51.100.1", Endpoint: "/bench"}
		for _, v := range variants {
			if d, err := v.l.Allow(ctx, reqs[i]); err != nil || !d.Allowed {
				b.Fatalf("%s: first Allow = %v, %v, want allowed", v.name, d.Allowed, err)
			}
		}
	}
	for _, par := range []int{1, runtime.GOMAXPROCS(0)} {
		name := "serial"
		if par > 1 {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) {
			const chunk = 2000
			allocs := make([]float64, len(variants))
			for i, v := range variants {
				n := 0
				allocs[i] = testing.AllocsPerRun(chunk, func() {
					v.l.Allow(ctx, reqs[n%users]) //nolint:errcheck // checked above
					n++
				})
			}
			samples := make([][]float64, len(variants))
			before := a.Stats()
			rounds := max(1, b.N/chunk)
			b.ResetTimer()
			for r := range rounds {
				for k := range variants {
					i := (r + k) % len(variants)
					samples[i] = append(samples[i], denyChunk(ctx, variants[i].l, reqs, par, chunk))
				}
			}
			b.StopTimer()
			med := make([]float64, len(variants))
			for i := range variants {
				slices.Sort(samples[i])
				med[i] = samples[i][len(samples[i])/2]
			}
			after := a.Stats()
			b.ReportMetric(med[1], "ns/op")
			b.ReportMetric(med[0], "base-ns/op")
			b.ReportMetric(med[1], "audit-ns/op")
			b.ReportMetric(med[2], "observer-ns/op")
			b.ReportMetric(100*(med[1]-med[0])/med[0], "slowdown-%")
			b.ReportMetric(100*(med[2]-med[0])/med[0], "observer-slowdown-%")
			b.ReportMetric(allocs[0], "base-allocs/op")
			b.ReportMetric(allocs[1], "audit-allocs/op")
			b.ReportMetric(allocs[2], "observer-allocs/op")
			if seen := after.Enqueued + after.Dropped - before.Enqueued - before.Dropped; seen > 0 {
				b.ReportMetric(100*float64(after.Enqueued-before.Enqueued)/float64(seen), "accepted-%")
			}
		})
	}
}

// newObserved makes a limiter on its own memory store with observer o,
// none if o is nil.
func newObserved(tb testing.TB, o core.Observer, rules ...core.Rule) *core.Limiter {
	tb.Helper()
	p, err := core.NewPolicy(rules...)
	if err != nil {
		tb.Fatal(err)
	}
	var opts []core.Option
	if o != nil {
		opts = append(opts, core.WithObserver(o))
	}
	l, err := core.NewLimiter(p, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// denyChunk runs n requests on each of par goroutines and returns the wall
// time per request in ns.
func denyChunk(ctx context.Context, l *core.Limiter, reqs []core.Request, par, n int) float64 {
	start := time.Now()
	if par == 1 {
		for i := range n {
			l.Allow(ctx, reqs[i%len(reqs)]) //nolint:errcheck // denied
		}
		return float64(time.Since(start).Nanoseconds()) / float64(n)
	}
	var wg sync.WaitGroup
	for g := range par {
		wg.Go(func() {
			for i := range n {
				l.Allow(ctx, reqs[(i*7+g*131)%len(reqs)]) //nolint:errcheck // denied
			}
		})
	}
	wg.Wait()
	return float64(time.Since(start).Nanoseconds()) / float64(n*par)
}
