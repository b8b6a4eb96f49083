package promlimit

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bucketry/ratelimit/core"
)

// config holds what the options set, for New.
type config struct {
	labels  prometheus.Labels
	sources []core.MetricSource
	buckets []float64
	errs    []error
}

// fail records an error wrapping core.ErrInvalidOption; New returns them.
func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: promlimit: "+format, append([]any{core.ErrInvalidOption}, args...)...))
}

// Option configures Metrics; pass options to New, which applies them in
// order.
type Option interface{ apply(*config) }

type option func(*config)

func (f option) apply(c *config) { f(c) }

// WithSources adds components whose metrics are exported at every scrape,
// each named "rate_limiter_" + core.Metric.Name with its labels (and the
// constant labels): a core.MemoryStore, the Redis stores, the rules
// sources, the audit sink. It may be given several times. A nil source is
// an error (see core.CheckMetricSources). Two sources must not report the
// same metric with the same labels: the scrape would then fail (give each
// limiter's store to that limiter's Metrics, told apart by
// WithConstLabels).
func WithSources(sources ...core.MetricSource) Option {
	return option(func(c *config) {
		c.errs = append(c.errs, core.CheckMetricSources("promlimit: WithSources", sources))
		c.sources = append(c.sources, sources...)
	})
}

// WithConstLabels adds labels with fixed values to every series, to tell
// apart the Metrics of several limiters in one process: for example
// prometheus.Labels{"limiter": "api"} on one and {"limiter": "admin"} on
// the other, each registered. The label names must be valid and must not
// be those the series use themselves: le, and those core.IsMetricLabel
// names (outcome, rule, scope, kind, and the labels of the sources'
// metrics: node, via, source). The default is none. Later calls add to
// earlier ones.
func WithConstLabels(labels prometheus.Labels) Option {
	return option(func(c *config) {
		if c.labels == nil {
			c.labels = make(prometheus.Labels, len(labels))
		}
		for k, v := range labels {
			c.labels[k] = v
		}
	})
}

// WithBuckets sets the upper bounds, in seconds, of the latency
// histogram's buckets; they must be finite (a final +Inf is implied) and
// strictly increasing, at least one (see core.CheckLatencyBuckets). The
// default is core.DefaultLatencyBuckets(). WithBuckets copies bounds.
func WithBuckets(bounds []float64) Option {
	return option(func(c *config) {
		c.errs = append(c.errs, core.CheckLatencyBuckets("promlimit: WithBuckets", bounds))
		c.buckets = slices.Clone(bounds)
	})
}
