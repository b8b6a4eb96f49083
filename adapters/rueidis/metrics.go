package rueidis

import "github.com/bucketry/ratelimit/core"

// CollectMetrics implements core.MetricSource, for adapters/prometheus and
// adapters/otel (WithSources): the counters of Stats and the state of each
// failure domain's breaker, read from memory without a call to Redis:
//
//   - redis_takes_total{via}: takes decided by the script in Redis
//     (via="script"), denied from client-side cached state without a round
//     trip (via="local"), and denied from bucket state read with one GET
//     (via="fetch"); every take counts once;
//   - redis_cache_hits_total and redis_cache_misses_total: bucket states
//     the local denial path read from the client-side cache, and from Redis;
//   - redis_script_reloads_total: scripts sent in full after NOSCRIPT;
//   - redis_refunds_total: Cluster slot groups given back after another
//     group denied;
//   - redis_breaker_refusals_total: takes refused at once by an open
//     circuit breaker;
//   - breaker_state{node}: a gauge per failure domain with a breaker
//     (WithBreaker), by Cluster master address or "redis": 0 closed, 1
//     half-open, 2 open.
//
// The metrics adapters prefix each name with "rate_limiter_". The counters
// start again from 0 when a store made by Open connects, as Stats does
// (Prometheus and OpenTelemetry take that as a counter reset), and the
// cache counters appear then. It is safe for concurrent use.
func (s *Store) CollectMetrics(emit func(core.Metric)) { s.s.Load().CollectMetrics(emit) }
