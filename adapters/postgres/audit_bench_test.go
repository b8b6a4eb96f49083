package pglimit

import (
	"context"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

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

// BenchmarkAuditObserve measures Observe alone on the Event of a denial
// by one tier, without core's cost of calling an observer: "full" with the
// queue full (the drop path of a deny flood, the writer stuck), "thinned"
// with WithSampling(100), "per-bucket" with WithPerBucketInterval(1h) on
// one bucket (the fold path). Each reports allocations, serial and
// parallel.
func BenchmarkAuditObserve(b *testing.B) {
	rule := core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: oneThenDeny}
	var ev core.Event
	var dec core.Decision
	var req core.Request
	capture := newObserved(b, func(_ context.Context, e *core.Event) {
		// Values copied, as an Observer may; the Rule pointers stay valid
		// for the policy's life.
		dec, req = *e.Decision, *e.Request
	}, rule)
	ctx := context.Background()
	for range 2 {
		capture.Allow(ctx, core.Request{User: "user-1", IP: "198.51.100.1", Endpoint: "/bench"}) //nolint:errcheck // the second is denied
	}
	if dec.Allowed || len(dec.Tiers()) != 1 {
		b.Fatalf("captured decision: allowed %v, %d tiers, want a denial by one tier", dec.Allowed, len(dec.Tiers()))
	}
	ev.Decision, ev.Request = &dec, &req
	cases := []struct {
		name string
		opts []AuditOption
	}{
		{"full", []AuditOption{WithQueueSize(1), WithBatchSize(1)}},
		{"thinned", []AuditOption{WithQueueSize(1), WithBatchSize(1), WithSampling(100)}},
		{"per-bucket", []AuditOption{WithQueueSize(1), WithBatchSize(1), WithPerBucketInterval(time.Hour)}},
	}
	for _, c := range cases {
		a, err := NewAudit(stuckPool(b), c.opts...)
		if err != nil {
			b.Fatal(err)
		}
		for range 3 { // one to the stuck writer, one queued: full
			a.Observe(ctx, &ev)
		}
		b.Run(c.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				a.Observe(ctx, &ev)
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				e := ev // a copy per goroutine, pointing to the same values
				for pb.Next() {
					a.Observe(ctx, &e)
				}
			})
		})
		closeStuck(b, a)
	}
}
