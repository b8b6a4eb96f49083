package promlimit_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	promlimit "github.com/bucketry/ratelimit/adapters/prometheus"
	"github.com/bucketry/ratelimit/core"
)

// A limiter observed by Metrics, with its memory store as a source; the
// counters after three requests against a burst of two.
func ExampleNew() {
	store, err := core.NewMemoryStore()
	if err != nil {
		panic(err)
	}
	m, err := promlimit.New(promlimit.WithSources(store))
	if err != nil {
		panic(err)
	}
	policy, err := core.NewPolicy(core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(10), 2)})
	if err != nil {
		panic(err)
	}
	limiter, err := core.NewLimiter(policy, core.WithStore(store), m.Option())
	if err != nil {
		panic(err)
	}
	for range 3 {
		limiter.Allow(context.Background(), core.Request{User: "alice"})
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP rate_limiter_decisions_total Decisions by outcome (allowed, denied, degraded, shadow_denied, error); rule and scope name the denying tier of a denial, a shadow denial or a fallback denial, and are empty otherwise.
# TYPE rate_limiter_decisions_total counter
rate_limiter_decisions_total{outcome="allowed",rule="",scope=""} 2
rate_limiter_decisions_total{outcome="degraded",rule="",scope=""} 0
rate_limiter_decisions_total{outcome="denied",rule="per-user",scope="user"} 1
rate_limiter_decisions_total{outcome="error",rule="",scope=""} 0
# HELP rate_limiter_memory_keys Buckets the in-memory store holds.
# TYPE rate_limiter_memory_keys gauge
rate_limiter_memory_keys 1
`), "rate_limiter_decisions_total", "rate_limiter_memory_keys")
	fmt.Println("scrape as expected:", err == nil)
	// Output:
	// scrape as expected: true
}
