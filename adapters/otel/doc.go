// Package otellimit records a limiter's decisions and its components'
// metrics with OpenTelemetry metric instruments: those of
// adapters/prometheus, with the same names, attributes and meaning.
//
// Make a Metrics with New on a meter and pass its Option to the limiter
// (or its Observe, with core.WithObserver):
//
//	m, err := otellimit.New(otel.Meter("github.com/bucketry/ratelimit"), otellimit.WithSources(store))
//	limiter, err := core.NewLimiter(policy, core.WithStore(store), m.Option())
//
// # Instruments
//
//	rate_limiter_requests_total   Int64ObservableCounter  every decision; allowed_total + rejected_total
//	rate_limiter_allowed_total    Int64ObservableCounter  decisions that let the request go ahead
//	rate_limiter_rejected_total   Int64ObservableCounter  decisions that did not
//	rate_limiter_decisions_total  Int64ObservableCounter  {outcome, rule, scope}
//	rate_limiter_errors_total     Int64ObservableCounter  {kind}, by core.ErrorKind
//	rate_limiter_latency_seconds  Float64Histogram, unit "s"  the limiter's own decision time, timed decisions only
//	rate_limiter_<source metric>  Float64ObservableCounter or Float64ObservableGauge, from each core.MetricSource
//
// The counters are in unit "{decision}". The outcomes (allowed, denied,
// shadow_denied, degraded, error), when rule and scope are set, the error
// kinds and the sources' metrics are those adapters/prometheus documents.
// The latency histogram records the decisions the limiter timed: one in
// core.WithLatencySampling's n (16 by default).
//
// The decision counters are observable counters: the limiter counts the
// decision in a core.Tally (striped counters, allocation-free and without
// a lookup; the same as adapters/prometheus), and a callback reports the
// tally's snapshot at each collection, as the Prometheus exporter would
// read it. They are cumulative and monotonic, as
// Int64Counter's are; an exporter with delta temporality gets the
// differences from the SDK. The histogram is synchronous, recorded with
// an attribute set made once.
//
// A source's metric gets an instrument when New first sees its name; a
// name a source reports only later gets one from the collection after it
// is first seen. WithAttributes adds constant attributes (a "limiter"
// attribute to tell several limiters apart). Unregister stops the
// callbacks.
package otellimit
