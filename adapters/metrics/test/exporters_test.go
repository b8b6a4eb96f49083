package metricstest

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	otellimit "github.com/bucketry/ratelimit/adapters/otel"
	promlimit "github.com/bucketry/ratelimit/adapters/prometheus"
	"github.com/bucketry/ratelimit/core"
)

// settings are the options every exporter takes, each in its own terms.
type settings struct {
	sources []core.MetricSource
	label   [2]string // a constant label (attribute): name, value; none if the name is ""
	buckets []float64 // the latency buckets; nil for the default
}

// exporter is one metrics adapter, as the shared tests see it.
type exporter struct {
	name string
	// start makes the adapter's Metrics with s, failing the test if New
	// fails, and returns the limiter option that installs it (its Option,
	// or its Observe through core.WithObserver) and a reader of what it
	// exports now, as series (see key).
	start func(tb testing.TB, s settings) (core.Option, func(testing.TB) map[string]float64)
}

var exporters = []exporter{
	{name: "prometheus", start: byOption(startPrometheus)},
	{name: "prometheus-observer", start: byObserver(startPrometheus)},
	{name: "otel", start: byOption(startOTel)},
	{name: "otel-observer", start: byObserver(startOTel)},
}

// started is what an adapter's start gives: its Option, its Observe, and
// its reader.
type started func(tb testing.TB, s settings) (core.Option, core.Observer, func(testing.TB) map[string]float64)

func byOption(start started) func(testing.TB, settings) (core.Option, func(testing.TB) map[string]float64) {
	return func(tb testing.TB, s settings) (core.Option, func(testing.TB) map[string]float64) {
		opt, _, read := start(tb, s)
		return opt, read
	}
}

func byObserver(start started) func(testing.TB, settings) (core.Option, func(testing.TB) map[string]float64) {
	return func(tb testing.TB, s settings) (core.Option, func(testing.TB) map[string]float64) {
		_, observe, read := start(tb, s)
		return core.WithObserver(observe), read
	}
}

// options returns the options of s, made by an adapter's WithSources,
// WithBuckets and the option of one constant label.
func options[O any](s settings, sources func(...core.MetricSource) O, buckets func([]float64) O, label func(name, value string) O) []O {
	var opts []O
	if len(s.sources) > 0 {
		opts = append(opts, sources(s.sources...))
	}
	if s.label[0] != "" {
		opts = append(opts, label(s.label[0], s.label[1]))
	}
	if s.buckets != nil {
		opts = append(opts, buckets(s.buckets))
	}
	return opts
}

// key names a series "name{label="value",...}", labels sorted by name, or
// just name without labels; a histogram named h gives h_count, h_sum and
// one h_bucket series per upper bound, labelled le (cumulative counts,
// "+Inf" last), as in the Prometheus text format.
func key(name string, pairs []string) string {
	if len(pairs) == 0 {
		return name
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

func pair(name, value string) string { return fmt.Sprintf("%s=%q", name, value) }

// le is the value of a bucket's le label.
func le(bound float64) string { return pair("le", fmt.Sprint(bound)) }

// startPrometheus registers the Metrics on a pedantic registry; reading
// gathers it, writes the text exposition format and parses that back with
// the Prometheus text parser, as a scrape would.
func startPrometheus(tb testing.TB, s settings) (core.Option, core.Observer, func(testing.TB) map[string]float64) {
	tb.Helper()
	m, err := promlimit.New(options(s, promlimit.WithSources, promlimit.WithBuckets, func(name, value string) promlimit.Option {
		return promlimit.WithConstLabels(prometheus.Labels{name: value})
	})...)
	if err != nil {
		tb.Fatalf("promlimit.New: %v", err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		tb.Fatalf("Register: %v", err)
	}
	read := func(tb testing.TB) map[string]float64 {
		tb.Helper()
		fams, err := reg.Gather()
		if err != nil {
			tb.Fatalf("Gather: %v", err)
		}
		var text bytes.Buffer
		for _, f := range fams {
			if _, err := expfmt.MetricFamilyToText(&text, f); err != nil {
				tb.Fatalf("MetricFamilyToText(%s): %v", f.GetName(), err)
			}
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		parsed, err := parser.TextToMetricFamilies(&text)
		if err != nil {
			tb.Fatalf("parsing the exposition: %v", err)
		}
		return promSeries(tb, parsed)
	}
	return m.Option(), m.Observe, read
}

func promSeries(tb testing.TB, fams map[string]*dto.MetricFamily) map[string]float64 {
	tb.Helper()
	out := make(map[string]float64)
	for name, f := range fams {
		if strings.HasSuffix(name, "_total") && f.GetType() != dto.MetricType_COUNTER {
			tb.Errorf("%s is a %v, want a counter", name, f.GetType())
		}
		for _, m := range f.GetMetric() {
			var pairs []string
			for _, l := range m.GetLabel() {
				pairs = append(pairs, pair(l.GetName(), l.GetValue()))
			}
			with := func(extra string) []string { return append(append([]string(nil), pairs...), extra) }
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key(name, pairs)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key(name, pairs)] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[key(name+"_count", pairs)] = float64(h.GetSampleCount())
				out[key(name+"_sum", pairs)] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					out[key(name+"_bucket", with(le(b.GetUpperBound())))] = float64(b.GetCumulativeCount())
				}
			default:
				tb.Errorf("%s: unexpected type %v", name, f.GetType())
			}
		}
	}
	return out
}

// startOTel makes the Metrics on a meter of an SDK provider with a manual
// reader; reading collects it.
func startOTel(tb testing.TB, s settings) (core.Option, core.Observer, func(testing.TB) map[string]float64) {
	tb.Helper()
	r := sdkmetric.NewManualReader()
	opts := options(s, otellimit.WithSources, otellimit.WithBuckets, func(name, value string) otellimit.Option {
		return otellimit.WithAttributes(attribute.String(name, value))
	})
	m, err := otellimit.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)).Meter("test"), opts...)
	if err != nil {
		tb.Fatalf("otellimit.New: %v", err)
	}
	read := func(tb testing.TB) map[string]float64 {
		tb.Helper()
		var rm metricdata.ResourceMetrics
		if err := r.Collect(context.Background(), &rm); err != nil {
			tb.Fatalf("Collect: %v", err)
		}
		return otelSeries(tb, &rm)
	}
	return m.Option(), m.Observe, read
}

func otelSeries(tb testing.TB, rm *metricdata.ResourceMetrics) map[string]float64 {
	tb.Helper()
	out := make(map[string]float64)
	pairsOf := func(set attribute.Set, extra ...string) []string {
		pairs := extra
		for _, kv := range set.ToSlice() {
			pairs = append(pairs, pair(string(kv.Key), kv.Value.Emit()))
		}
		return pairs
	}
	monotonic := func(name string, ok bool) {
		if strings.HasSuffix(name, "_total") && !ok {
			tb.Errorf("%s is not a monotonic sum, want a counter", name)
		}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				monotonic(m.Name, d.IsMonotonic)
				for _, p := range d.DataPoints {
					out[key(m.Name, pairsOf(p.Attributes))] = float64(p.Value)
				}
			case metricdata.Sum[float64]:
				monotonic(m.Name, d.IsMonotonic)
				for _, p := range d.DataPoints {
					out[key(m.Name, pairsOf(p.Attributes))] = p.Value
				}
			case metricdata.Gauge[float64]:
				monotonic(m.Name, false)
				for _, p := range d.DataPoints {
					out[key(m.Name, pairsOf(p.Attributes))] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[key(m.Name+"_count", pairsOf(p.Attributes))] = float64(p.Count)
					out[key(m.Name+"_sum", pairsOf(p.Attributes))] = p.Sum
					// The SDK counts each bucket apart, the +Inf one
					// last; the text format accumulates them.
					var sum uint64
					for i, n := range p.BucketCounts {
						sum += n
						bound := math.Inf(1)
						if i < len(p.Bounds) {
							bound = p.Bounds[i]
						}
						out[key(m.Name+"_bucket", pairsOf(p.Attributes, le(bound)))] = float64(sum)
					}
				}
			default:
				tb.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}
