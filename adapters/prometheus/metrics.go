package promlimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bucketry/ratelimit/core"
)

// Prefix begins the name of every series.
const Prefix = "rate_limiter_"

// Metrics counts a limiter's decisions, through Observe, and exports them
// with the metrics of its sources as a prometheus.Collector (see the
// package documentation for the series). Make one with New; it is safe for
// concurrent use. One Metrics may observe several limiters, whose
// decisions it adds up.
//
// Metrics is an unchecked collector: its Describe sends nothing, as the
// sources' metrics are only known when they are collected. The registry
// then checks at each scrape, not at registration, that no two collectors
// export the same series.
type Metrics struct {
	t       *core.Tally
	latency prometheus.Histogram
	sources []core.MetricSource
	labels  prometheus.Labels

	requests, allowed, rejected, decisions, errors *prometheus.Desc
}

// New returns Metrics configured by opts, applied in order over the
// defaults (no source, core.DefaultLatencyBuckets, no constant label). It
// fails with an error wrapping core.ErrInvalidOption, naming the option,
// for a nil option or source, bad bucket bounds, or an invalid or reserved
// constant label name; every mistake found is reported, joined with
// errors.Join.
func New(opts ...Option) (*Metrics, error) {
	cfg := config{buckets: core.DefaultLatencyBuckets()}
	for i, o := range opts {
		if o == nil {
			cfg.fail("New: option %d is nil", i)
			continue
		}
		o.apply(&cfg)
	}
	for name := range cfg.labels {
		if name == "le" || core.IsMetricLabel(name) { // le: the histogram's buckets
			cfg.fail("WithConstLabels: label %q is one the series use", name)
		}
	}
	m := &Metrics{t: core.NewTally(), sources: cfg.sources, labels: cfg.labels}
	m.requests = prometheus.NewDesc(Prefix+"requests_total", core.TallyHelpRequests, nil, cfg.labels)
	m.allowed = prometheus.NewDesc(Prefix+"allowed_total", core.TallyHelpAllowed, nil, cfg.labels)
	m.rejected = prometheus.NewDesc(Prefix+"rejected_total", core.TallyHelpRejected, nil, cfg.labels)
	m.decisions = prometheus.NewDesc(Prefix+"decisions_total", core.TallyHelpDecisions, []string{"outcome", "rule", "scope"}, cfg.labels)
	m.errors = prometheus.NewDesc(Prefix+"errors_total", core.TallyHelpErrors, []string{"kind"}, cfg.labels)
	if _, err := prometheus.NewConstMetric(m.requests, prometheus.CounterValue, 0); err != nil {
		cfg.fail("WithConstLabels: %v", err)
	}
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, err
	}
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:        Prefix + "latency_seconds",
		Help:        core.TallyHelpLatency,
		Buckets:     cfg.buckets,
		ConstLabels: cfg.labels,
	})
	return m, nil
}

// Option is the limiter option that counts its decisions into m:
//
//	limiter, err := core.NewLimiter(policy, m.Option())
//
// The limiter counts each decision in m's core.Tally directly (one striped
// counter, two for a failure; see core.WithTally) and m observes the
// latency of the timed ones. It is the cheapest way to count, and
// allocates nothing. A limiter takes one Metrics this way; Observe
// counts into m from an Observer.
func (m *Metrics) Option() core.Option {
	return core.WithTally(m.t, func(_ context.Context, d time.Duration) { m.latency.Observe(d.Seconds()) })
}

// Observe counts one decision, as Option does, from an Observer (for
// example one that calls several in turn):
//
//	limiter, err := core.NewLimiter(policy, core.WithObserver(m.Observe))
//
// An observer's event is a copy the limiter makes, which costs a decision
// more than Option. Observe allocates nothing itself and is safe for
// concurrent use.
func (m *Metrics) Observe(_ context.Context, e *core.Event) {
	m.t.Record(e) // which ignores a nil e
	if e != nil && e.Timed {
		m.latency.Observe(e.Latency.Seconds())
	}
}

// Describe implements prometheus.Collector. It sends nothing: Metrics is
// an unchecked collector (see Metrics).
func (m *Metrics) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector: the decision counters of the
// core.Tally's snapshot, the latency histogram, and every source's metrics
// as they are now.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	s := m.t.Snapshot()
	ch <- prometheus.MustNewConstMetric(m.requests, prometheus.CounterValue, float64(s.Requests))
	ch <- prometheus.MustNewConstMetric(m.allowed, prometheus.CounterValue, float64(s.Allowed))
	ch <- prometheus.MustNewConstMetric(m.rejected, prometheus.CounterValue, float64(s.Rejected))
	for _, c := range s.Decisions {
		ch <- prometheus.MustNewConstMetric(m.decisions, prometheus.CounterValue, float64(c.Count), c.Outcome.String(), c.Rule, string(c.Scope))
	}
	for _, c := range s.Errors {
		ch <- prometheus.MustNewConstMetric(m.errors, prometheus.CounterValue, float64(c.Count), c.Kind)
	}
	m.latency.Collect(ch)
	for _, src := range m.sources {
		src.CollectMetrics(func(x core.Metric) { ch <- m.source(x) })
	}
}

// source converts a source's metric; a malformed one becomes an invalid
// metric, which fails the scrape naming it rather than vanishing.
func (m *Metrics) source(x core.Metric) prometheus.Metric {
	names, values := make([]string, 0, len(x.Labels)/2), make([]string, 0, len(x.Labels)/2)
	for i := 0; i+1 < len(x.Labels); i += 2 {
		names, values = append(names, x.Labels[i]), append(values, x.Labels[i+1])
	}
	desc := prometheus.NewDesc(Prefix+x.Name, x.Help, names, m.labels)
	if len(x.Labels)%2 != 0 {
		return prometheus.NewInvalidMetric(desc, fmt.Errorf("promlimit: source metric %q: odd number of label strings (%d)", x.Name, len(x.Labels)))
	}
	vt := prometheus.CounterValue
	if x.Kind == core.Gauge {
		vt = prometheus.GaugeValue
	}
	pm, err := prometheus.NewConstMetric(desc, vt, x.Value, values...)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, fmt.Errorf("promlimit: source metric %q: %w", x.Name, err))
	}
	return pm
}
