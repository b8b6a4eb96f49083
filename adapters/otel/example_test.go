package otellimit_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	otellimit "github.com/bucketry/ratelimit/adapters/otel"
	"github.com/bucketry/ratelimit/core"
)

// A limiter observed by Metrics on an SDK meter provider; the decision
// counters after three requests against a burst of two.
func ExampleNew() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m, err := otellimit.New(provider.Meter("github.com/bucketry/ratelimit"))
	if err != nil {
		panic(err)
	}
	policy, err := core.NewPolicy(core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(10), 2)})
	if err != nil {
		panic(err)
	}
	limiter, err := core.NewLimiter(policy, m.Option())
	if err != nil {
		panic(err)
	}
	for range 3 {
		limiter.Allow(context.Background(), core.Request{User: "alice"})
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, x := range sm.Metrics {
			if sum, ok := x.Data.(metricdata.Sum[int64]); ok && x.Name != "rate_limiter_errors_total" {
				for _, p := range sum.DataPoints {
					if p.Value > 0 {
						o, _ := p.Attributes.Value("outcome")
						r, _ := p.Attributes.Value("rule")
						fmt.Printf("%s outcome=%q rule=%q %d\n", x.Name, o.AsString(), r.AsString(), p.Value)
					}
				}
			}
		}
	}
	// Unordered output:
	// rate_limiter_requests_total outcome="" rule="" 3
	// rate_limiter_allowed_total outcome="" rule="" 2
	// rate_limiter_rejected_total outcome="" rule="" 1
	// rate_limiter_decisions_total outcome="allowed" rule="" 2
	// rate_limiter_decisions_total outcome="denied" rule="per-user" 1
}
