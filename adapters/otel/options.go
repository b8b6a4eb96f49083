package otellimit

import (
	"fmt"
	"reflect"
	"slices"

	"go.opentelemetry.io/otel/attribute"

	"github.com/bucketry/ratelimit/core"
)

// Option configures Metrics; pass options to New, which applies them in
// order.
type Option interface{ apply(*config) }

type option func(*config)

func (f option) apply(c *config) { f(c) }

// config holds what the options set, for New.
type config struct {
	sources []core.MetricSource
	buckets []float64
	attrs   []attribute.KeyValue
	errs    []error
}

// fail records an error wrapping core.ErrInvalidOption; New returns them.
func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: otellimit: "+format, append([]any{core.ErrInvalidOption}, args...)...))
}

// WithSources adds components whose metrics are observed at every
// collection, each as an instrument named "rate_limiter_" +
// core.Metric.Name (an observable counter for a core.Counter, an
// observable gauge for a core.Gauge) with its labels as attributes (and
// the constant attributes): a core.MemoryStore, the Redis stores, the rules
// sources, the audit sink. It may be given several times. A nil source is
// an error (see core.CheckMetricSources).
func WithSources(sources ...core.MetricSource) Option {
	return option(func(c *config) {
		c.errs = append(c.errs, core.CheckMetricSources("otellimit: WithSources", sources))
		c.sources = append(c.sources, sources...)
	})
}

// WithBuckets sets the explicit bucket boundaries, in seconds, of the
// latency histogram; they must be finite and strictly increasing, at least
// one (see core.CheckLatencyBuckets). The default is
// core.DefaultLatencyBuckets(), as in adapters/prometheus. WithBuckets
// copies bounds.
func WithBuckets(bounds []float64) Option {
	return option(func(c *config) {
		c.errs = append(c.errs, core.CheckLatencyBuckets("otellimit: WithBuckets", bounds))
		c.buckets = slices.Clone(bounds)
	})
}

// WithAttributes adds attributes with fixed values to every measurement,
// to tell apart the Metrics of several limiters on one meter: for example
// attribute.String("limiter", "api") on one and ("limiter", "admin") on
// the other. Their keys must not be those the instruments use themselves,
// which core.IsMetricLabel names (outcome, rule, scope, kind, and the
// labels of the sources' metrics: node, via, source). The default is none.
// Later calls add to earlier ones.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return option(func(c *config) { c.attrs = append(c.attrs, attrs...) })
}

// isNil reports whether v is nil or holds a nil pointer, map, slice,
// channel, function or interface: a meter that would fail on first use.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
