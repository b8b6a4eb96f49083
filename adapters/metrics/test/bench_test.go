package metricstest

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/bucketry/ratelimit/core"
)

// BenchmarkObserverOverhead measures what each exporter adds to a decision
// on the memory store: the same limiter without an observer ("none"), with
// an observer that does nothing ("noop", the limiter's own cost of having
// one: the event, the sampling), with each exporter's Option
// ("prometheus"; "otel", on the SDK with a manual reader) and with its
// Observe as an observer ("prometheus-observer", "otel-observer");
// 1 and 3 tiers; allowed and denied; serial and parallel. The variants of
// one case run one after the other within each -count round, so that
// -count 6 runs them interleaved; compare medians (benchstat).
func BenchmarkObserverOverhead(b *testing.B) {
	observers := []struct {
		name string
		opts []core.Option
	}{
		{"none", nil},
		{"noop", []core.Option{core.WithObserver(func(context.Context, *core.Event) {})}},
	}
	for _, ex := range exporters {
		install, _ := ex.start(b, settings{})
		observers = append(observers, struct {
			name string
			opts []core.Option
		}{ex.name, []core.Option{install}})
	}
	open := core.TokenBucket(core.PerSecond(1_000_000_000), 1_000_000_000)
	shut := core.TokenBucket(core.PerHour(1), 1)
	for _, tiers := range []int{1, 3} {
		for _, outcome := range []string{"allowed", "denied"} {
			lim := open
			if outcome == "denied" {
				lim = shut
			}
			rules := []core.Rule{
				{Name: "per-user", Scope: core.ScopeUser, Limit: lim},
				{Name: "per-ip", Scope: core.ScopeIP, Limit: open},
				{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: open},
			}[:tiers]
			policy, err := core.NewPolicy(rules...)
			if err != nil {
				b.Fatal(err)
			}
			for _, mode := range []string{"serial", "parallel"} {
				for _, o := range observers {
					l, err := core.NewLimiter(policy, o.opts...)
					if err != nil {
						b.Fatal(err)
					}
					name := "tiers=" + strconv.Itoa(tiers) + "/" + outcome + "/" + mode + "/" + o.name
					b.Run(name, func(b *testing.B) {
						ctx := context.Background()
						if mode == "serial" {
							req := core.Request{User: "u0", IP: "192.0.2.0", Endpoint: "GET /items"}
							b.ReportAllocs()
							for b.Loop() {
								l.Allow(ctx, req)
							}
							return
						}
						var g atomic.Int64
						b.ReportAllocs()
						b.RunParallel(func(pb *testing.PB) {
							i := strconv.FormatInt(g.Add(1), 10)
							req := core.Request{User: "u" + i, IP: "192.0.2." + i, Endpoint: "GET /items"}
							for pb.Next() {
								l.Allow(ctx, req)
							}
						})
					})
				}
			}
		}
	}
}

// events returns an event of each outcome the benchmarks measure, copied
// from real decisions: an allowed one, a denied one (whose rule is looked
// up) and a timed allowed one (which the histogram records).
func events(b *testing.B) map[string]*core.Event {
	p, err := core.NewPolicy(core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 1)})
	if err != nil {
		b.Fatal(err)
	}
	var seen []core.Event
	keep := func(_ context.Context, e *core.Event) {
		c := *e
		r, d := *e.Request, *e.Decision
		c.Request, c.Decision = &r, &d
		seen = append(seen, c)
	}
	l, err := core.NewLimiter(p, core.WithObserver(keep))
	if err != nil {
		b.Fatal(err)
	}
	for range 2 {
		l.AllowAt(context.Background(), t0, core.Request{User: "alice"}, 1)
	}
	timed := seen[0]
	timed.Timed, timed.Latency = true, 150
	return map[string]*core.Event{"allowed": &seen[0], "denied": &seen[1], "timed": &timed}
}

// BenchmarkObserve measures each exporter's Observe alone, on events of
// each outcome, serial and parallel: the cost it adds to a decision,
// without the limiter's cost of calling an observer.
func BenchmarkObserve(b *testing.B) {
	ctx := context.Background()
	evs := events(b)
	for _, ex := range []struct {
		name  string
		start started
	}{{"prometheus", startPrometheus}, {"otel", startOTel}} {
		_, observe, _ := ex.start(b, settings{})
		for _, name := range []string{"allowed", "denied", "timed"} {
			e := evs[name]
			b.Run(ex.name+"/"+name+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					observe(ctx, e)
				}
			})
			b.Run(ex.name+"/"+name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						observe(ctx, e)
					}
				})
			})
		}
	}
}
