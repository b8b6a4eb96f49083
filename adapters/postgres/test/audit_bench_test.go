package pglimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	pglimit "github.com/bucketry/ratelimit/adapters/postgres"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/nethttp"
)

// overheadVariant is one way to run the request path in
// BenchmarkAuditOverhead.
type overheadVariant struct {
	name string
	l    *core.Limiter
}

// BenchmarkAuditOverhead measures what the audit adds to a deny flood:
// requests all denied (1000 users, each past its one request an hour), on
// the memory store, along two paths: "allow", a bare call of Allow, and
// "http", the request path of a service, the net/http middleware (keyed by
// a header) answering 429. Each runs on limiters with
//
//   - base: no audit;
//   - audit: the Audit's Option (core.WithDenials), writing to a real
//     PostgreSQL with the default options (the queue fills at once, so
//     most calls take the drop path, as in a deny flood);
//   - observer: the same Audit's Observe, through core.WithObserver;
//   - control: base again, a second limiter without audit, whose difference
//     to base (control-diff-%) is the benchmark's own noise.
//
// Every variant decides on one shared memory store, so that they touch
// the same buckets in the same memory.
//
// The variants run in interleaved rounds of 2000 requests, in rotating
// order, so that drift in the machine's speed affects each alike; the
// reported figures are medians over the rounds: base-ns/op, audit-ns/op
// (also reported as ns/op), observer-ns/op, slowdown-% (audit against
// base) and observer-slowdown-% (observer against base), and each
// variant's allocations per request, measured apart with
// testing.AllocsPerRun; accepted-% is the share of the rows offered that
// the queue took (the rest were dropped and counted). "serial" runs one
// goroutine, "parallel" GOMAXPROCS goroutines per round (ns/op is then
// wall time per request across them).
func BenchmarkAuditOverhead(b *testing.B) {
	_, pool := migrated(b)
	a, err := pglimit.NewAudit(pool)
	if err != nil {
		b.Fatal(err)
	}
	defer closeAudit(b, a)
	rule := core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: oneThenDeny}
	// One memory store under every variant: they decide on the same
	// buckets, in the same memory.
	mem, err := core.NewMemoryStore()
	if err != nil {
		b.Fatal(err)
	}
	variants := []overheadVariant{
		{"base", newLimiter(b, []core.Rule{rule}, core.WithStore(mem))},
		{"audit", newLimiter(b, []core.Rule{rule}, core.WithStore(mem), a.Option())},
		{"observer", newLimiter(b, []core.Rule{rule}, core.WithStore(mem), core.WithObserver(a.Observe))},
		{"control", newLimiter(b, []core.Rule{rule}, core.WithStore(mem))},
	}
	const users = 1000
	reqs := make([]core.Request, users)
	hreqs := make([]*http.Request, users)
	ctx := context.Background()
	for i := range reqs {
		reqs[i] = core.Request{User: fmt.Sprintf("user-%d", i), IP: "198.51.100.1", Endpoint: "/bench"}
		hreqs[i] = httptest.NewRequest("GET", "/bench", nil)
		hreqs[i].Header.Set("X-User", reqs[i].User)
		for k, v := range variants {
			if d, err := v.l.Allow(ctx, reqs[i]); err != nil || d.Allowed != (k == 0) {
				b.Fatalf("%s: first Allow = %v, %v, want allowed for the first variant only", v.name, d.Allowed, err)
			}
		}
	}
	// The request path of a service: the net/http middleware, keyed by a
	// header, in front of a handler it never reaches.
	handlers := make([]http.Handler, len(variants))
	for i, v := range variants {
		mw, err := nethttp.New(v.l, nethttp.WithKeyFunc(core.ScopeUser, func(r *http.Request) (string, error) {
			return r.Header.Get("X-User"), nil
		}))
		if err != nil {
			b.Fatal(err)
		}
		handlers[i] = mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	}
	paths := []struct {
		name string
		do   func(v int, w *discardWriter, i int)
	}{
		{"allow", func(v int, _ *discardWriter, i int) {
			variants[v].l.Allow(ctx, reqs[i%users]) //nolint:errcheck // denied
		}},
		{"http", func(v int, w *discardWriter, i int) {
			clear(w.h)
			handlers[v].ServeHTTP(w, hreqs[i%users])
			if w.code != http.StatusTooManyRequests {
				b.Fatalf("%s: status %d, want 429", variants[v].name, w.code)
			}
		}},
	}
	for _, path := range paths {
		for _, par := range []int{1, runtime.GOMAXPROCS(0)} {
			name := path.name + "/serial"
			if par > 1 {
				name = path.name + "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				const chunk = 2000
				allocs := make([]float64, len(variants))
				for i := range variants {
					n, w := 0, newDiscardWriter()
					allocs[i] = testing.AllocsPerRun(chunk, func() {
						path.do(i, w, n)
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
						samples[i] = append(samples[i], denyChunk(par, chunk, func(w *discardWriter, n int) { path.do(i, w, n) }))
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
				b.ReportMetric(100*(med[3]-med[0])/med[0], "control-diff-%")
				b.ReportMetric(allocs[0], "base-allocs/op")
				b.ReportMetric(allocs[1], "audit-allocs/op")
				b.ReportMetric(allocs[2], "observer-allocs/op")
				if seen := after.Enqueued + after.Dropped - before.Enqueued - before.Dropped; seen > 0 {
					b.ReportMetric(100*float64(after.Enqueued-before.Enqueued)/float64(seen), "accepted-%")
				}
			})
		}
	}
}

// discardWriter is a ResponseWriter that keeps the status and headers
// and discards the body.
type discardWriter struct {
	h    http.Header
	code int
}

func newDiscardWriter() *discardWriter { return &discardWriter{h: http.Header{}} }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(code int)        { d.code = code }

// denyChunk runs do n times on each of par goroutines, each with a
// writer of its own, and returns the wall time per request in ns.
func denyChunk(par, n int, do func(w *discardWriter, i int)) float64 {
	ws := make([]*discardWriter, par)
	for g := range ws {
		ws[g] = newDiscardWriter()
	}
	start := time.Now()
	if par == 1 {
		for i := range n {
			do(ws[0], i)
		}
		return float64(time.Since(start).Nanoseconds()) / float64(n)
	}
	var wg sync.WaitGroup
	for g := range par {
		wg.Go(func() {
			for i := range n {
				do(ws[g], i*7+g*131)
			}
		})
	}
	wg.Wait()
	return float64(time.Since(start).Nanoseconds()) / float64(n*par)
}
