package goredis

import "github.com/bucketry/ratelimit/core"

// CollectMetrics implements core.MetricSource, for adapters/prometheus and
// adapters/otel (WithSources): the counters of Stats and the state of each
// failure domain's breaker, read from memory without a call to Redis:
//
//   - redis_takes_total{via="script"}: takes decided by the script in Redis;
//   - redis_takes_total{via="local"}: takes denied from remembered denials
//     without a round trip (WithLocalDenials);
//   - redis_script_reloads_total: scripts sent in full after NOSCRIPT;
//   - redis_refunds_total: Cluster slot groups given back after another
//     group denied;
//   - redis_breaker_refusals_total: takes refused at once by an open
//     circuit breaker;
//   - breaker_state{node}: a gauge per failure domain with a breaker
//     (WithBreaker), by Cluster master address or "redis": 0 closed, 1
//     half-open, 2 open.
//
// The metrics adapters prefix each name with "rate_limiter_". It is safe for
// concurrent use.
func (s *Store) CollectMetrics(emit func(core.Metric)) { s.s.CollectMetrics(emit) }
