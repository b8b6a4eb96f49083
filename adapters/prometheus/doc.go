// Package promlimit exports a limiter's decisions and its components'
// metrics as Prometheus metrics.
//
// Make a Metrics with New, pass its Option to the limiter, and register it:
//
//	m, err := promlimit.New(promlimit.WithSources(store))
//	limiter, err := core.NewLimiter(policy, core.WithStore(store), m.Option())
//	prometheus.MustRegister(m)
//	http.Handle("/metrics", promhttp.Handler())
//
// # Series
//
// Every series is named with the prefix rate_limiter_. Labels are of
// bounded cardinality: rule names, scopes, outcomes, error kinds, Redis
// nodes, never an identity (no user, address, key or path).
//
//	rate_limiter_requests_total         counter  every decision; allowed_total + rejected_total
//	rate_limiter_allowed_total          counter  decisions that let the request go ahead (shadow denials and failure-mode allowances included)
//	rate_limiter_rejected_total         counter  decisions that did not: denials, fail-closed refusals, errors
//	rate_limiter_decisions_total        counter  {outcome, rule, scope}: see below
//	rate_limiter_errors_total           counter  {kind}: decisions with a store failure or an error, by core.ErrorKind
//	rate_limiter_latency_seconds        histogram  the limiter's own decision time, timed decisions only
//	rate_limiter_<source metric>        counter or gauge, from each core.MetricSource (WithSources)
//
// Each decision has one outcome in rate_limiter_decisions_total:
//
//   - allowed: allowed, and no shadow tier would have denied it;
//   - denied: an enforced tier denied it; rule and scope name the
//     deciding tier (Decision.Rule);
//   - shadow_denied: allowed, but a tier in shadow mode would have denied
//     it; rule and scope name that tier (of several, the one with the
//     longest RetryAfter, as a denial is decided);
//   - degraded: the store failed and the failure mode decided (FailOpen,
//     FailFallback); when the fallback store denied, rule and scope name
//     its denying tier, else they are empty;
//   - error: the decision came with an error (bad input, the caller's
//     context ending, a store failure under FailClosed).
//
// rule and scope are empty for the other outcomes: the sum over a rule's
// series counts its denials, not its traffic. Every outcome without a rule
// and every error kind is exported from the start, at 0, so that rates
// and alerts need no absent() guard.
//
// rate_limiter_errors_total counts each decision whose error, or whose
// Decision.Err, is not nil, once, by core.ErrorKind: breaker_open, timeout,
// canceled, partial, invalid_input, not_constructed, unavailable.
//
// rate_limiter_latency_seconds observes Event.Latency of the timed
// decisions only: timing takes two clock reads, as costly as an in-memory
// decision, so the limiter times one decision in
// core.WithLatencySampling's n (16 by default). Its count is then about
// one sixteenth of rate_limiter_requests_total; its quantiles are
// unbiased. The buckets are core.DefaultLatencyBuckets() unless
// WithBuckets says.
//
// The sources' metrics are read at each scrape: the memory store's
// memory_keys, memory_reclaimed_total and memory_evictions_total; the
// Redis stores' redis_takes_total{via}, redis_cache_hits_total,
// redis_cache_misses_total, redis_script_reloads_total,
// redis_refunds_total, redis_breaker_refusals_total and
// breaker_state{node} (0 closed, 1 half-open, 2 open); and those of the
// other components that implement core.MetricSource.
//
// # Several limiters
//
// One Metrics may observe several limiters: their decisions add up. To
// tell limiters apart, give each its own Metrics with WithConstLabels
// (prometheus.Labels{"limiter": "api"}), and each store to the Metrics of
// its limiter: two sources reporting the same series in one registry fail
// the scrape.
//
// # Cost
//
// Counting runs on every decision, so it costs a few nanoseconds and
// allocates nothing: with Option the limiter itself counts the decision in
// a core.Tally (core.WithTally: no event is copied for an observer), which
// adds one to one of a set of striped counters (chosen by the calling
// goroutine's stack, so that goroutines on different cores seldom write
// the same cache line), and Collect turns the tally's snapshot into
// constant metrics at scrape time; no label lookup happens per decision.
// A denial's rule is found through a copy-on-write map keyed by
// *core.Rule, so a policy replaced with SetPolicy costs one copy on its
// first denial; a rule keeps its series across policies as long as its
// name and scope stay. The outcomes, the denying rule and the error kinds
// are those of core.Tally.Record, which adapters/otel shares. The
// histogram is observed for timed decisions only. BenchmarkObserve and
// BenchmarkObserverOverhead, in the test module adapters/metrics/test,
// measure it beside adapters/otel.
//
// Metrics is an unchecked collector (Describe sends nothing): the
// sources' metrics are known only when collected. The registry checks for
// duplicate series at scrape time.
package promlimit
