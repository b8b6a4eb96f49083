package redisstore

import (
	"slices"

	"github.com/bucketry/ratelimit/core"
)

// CollectMetrics implements core.MetricSource: the counters of Stats and
// the state of each failure domain's breaker, named as the adapters'
// package documentation lists them (the metrics adapters add the
// "rate_limiter_" prefix):
//
//   - redis_takes_total{via}: takes decided by the script in Redis
//     (via="script"), denied locally without a round trip (via="local"),
//     and, on a client with client-side caching, denied from bucket state
//     read with one GET (via="fetch"); every take that passes validation
//     counts once;
//   - redis_cache_hits_total and redis_cache_misses_total, on a client
//     with client-side caching: bucket states read by the local denial path
//     from the cache and from Redis;
//   - redis_script_reloads_total, redis_refunds_total and
//     redis_breaker_refusals_total: Stats' Reloads, Refunds and Refused;
//   - breaker_state{node}, a gauge per failure domain with a breaker (a
//     Cluster master's address, or "redis"): 0 closed, 1 half-open, 2 open.
//
// It is safe for concurrent use and makes no call to Redis.
func (s *Store) CollectMetrics(emit func(core.Metric)) {
	_, cache := s.client.(Cache)
	collect(s.Stats(), s.BreakerStates(), cache, emit)
}

// BreakerGauge is the value of the breaker_state gauge for state: 0
// closed, 1 half-open, 2 open, so that a larger value is a worse state
// whatever the order of core.BreakerState's constants. An unknown state
// gives 2: whatever it is, calls are not going through freely.
func BreakerGauge(state core.BreakerState) float64 {
	switch state {
	case core.BreakerClosed:
		return 0
	case core.BreakerHalfOpen:
		return 1
	}
	return 2
}

func collect(st Stats, breakers map[string]core.BreakerState, cache bool, emit func(core.Metric)) {
	const takes = "Takes by how they were decided: by the script in Redis (script), denied locally without a round trip (local), denied from bucket state read with one GET (fetch)."
	counter := func(name, help string, v int64, labels ...string) {
		emit(core.Metric{Name: name, Help: help, Kind: core.Counter, Labels: labels, Value: float64(v)})
	}
	counter("redis_takes_total", takes, st.Remote, "via", "script")
	counter("redis_takes_total", takes, st.Local, "via", "local")
	if cache {
		counter("redis_takes_total", takes, st.Fetched, "via", "fetch")
		counter("redis_cache_hits_total", "Bucket states the local denial path read from the client-side cache.", st.CacheHits)
		counter("redis_cache_misses_total", "Bucket states the local denial path read from Redis, not being cached.", st.CacheMisses)
	}
	counter("redis_script_reloads_total", "Scripts sent in full after Redis answered NOSCRIPT.", st.Reloads)
	counter("redis_refunds_total", "Cluster slot groups given back after another group of the same take denied.", st.Refunds)
	counter("redis_breaker_refusals_total", "Takes refused at once, wholly or in part, by an open circuit breaker.", st.Refused)
	nodes := make([]string, 0, len(breakers))
	for node := range breakers {
		nodes = append(nodes, node)
	}
	slices.Sort(nodes)
	for _, node := range nodes {
		emit(core.Metric{
			Name:   "breaker_state",
			Help:   "State of the circuit breaker of a Redis failure domain (a Cluster master, or the server): 0 closed, 1 half-open, 2 open.",
			Kind:   core.Gauge,
			Labels: []string{"node", node},
			Value:  BreakerGauge(breakers[node]),
		})
	}
}
