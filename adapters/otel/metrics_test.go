package otellimit_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	otellimit "github.com/bucketry/ratelimit/adapters/otel"
	"github.com/bucketry/ratelimit/core"
)

// The instruments of the decisions and the sources, which
// adapters/prometheus exports alike, are tested for both in
// adapters/metrics/test; here are the tests of what only this package
// does.

// newReader returns a manual reader and a meter that reports to it.
func newReader() (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	r := sdkmetric.NewManualReader()
	return r, sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
}

// read collects r, failing the test if it cannot.
func read(t *testing.T, r *sdkmetric.ManualReader) *metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return &rm
}

// value returns the value of the counter or gauge point of the instrument
// name whose attributes are exactly attrs, and whether rm has it.
func value(rm *metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) (float64, bool) {
	want := attribute.NewSet(attrs...)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return float64(p.Value), true
					}
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return p.Value, true
					}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return p.Value, true
					}
				}
			}
		}
	}
	return 0, false
}

// TestUnits: the decision counters count decisions, the histogram
// seconds.
func TestUnits(t *testing.T) {
	r, mp := newReader()
	m, err := otellimit.New(mp.Meter("test"))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	p, err := core.NewPolicy(core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 1)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := core.NewLimiter(p, core.WithObserver(m.Observe), core.WithLatencySampling(1))
	if err != nil {
		t.Fatal(err)
	}
	l.Allow(context.Background(), core.Request{User: "alice"})
	units := map[string]string{}
	for _, sm := range read(t, r).ScopeMetrics {
		for _, x := range sm.Metrics {
			units[x.Name] = x.Unit
		}
	}
	for name, want := range map[string]string{
		"rate_limiter_requests_total":  "{decision}",
		"rate_limiter_allowed_total":   "{decision}",
		"rate_limiter_rejected_total":  "{decision}",
		"rate_limiter_decisions_total": "{decision}",
		"rate_limiter_errors_total":    "{decision}",
		"rate_limiter_latency_seconds": "s",
	} {
		if got, ok := units[name]; !ok || got != want {
			t.Errorf("%s unit %q (reported %v), want %q", name, got, ok, want)
		}
	}
}

// lateSource reports a gauge, and a counter only once on is set.
type lateSource struct{ on atomic.Bool }

func (s *lateSource) CollectMetrics(emit func(core.Metric)) {
	emit(core.Metric{Name: "early", Help: "Early.", Kind: core.Gauge, Labels: []string{"node", "a"}, Value: 2})
	if s.on.Load() {
		emit(core.Metric{Name: "late_total", Help: "Late.", Kind: core.Counter, Value: 5})
	}
}

// TestSources: a metric first reported after New appears from the
// collection after the one that saw it, and Unregister stops the
// callbacks.
func TestSources(t *testing.T) {
	late := &lateSource{}
	r, mp := newReader()
	api := attribute.String("limiter", "api")
	m, err := otellimit.New(mp.Meter("test"), otellimit.WithSources(late), otellimit.WithAttributes(api))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	node := attribute.String("node", "a")
	if v, ok := value(read(t, r), "rate_limiter_early", api, node); !ok || v != 2 {
		t.Errorf("rate_limiter_early = %v (present %v), want 2", v, ok)
	}
	late.on.Store(true)
	read(t, r) // sees late_total, which has no instrument yet
	otellimit.WaitSources(m)
	rm := read(t, r)
	if v, ok := value(rm, "rate_limiter_late_total", api); !ok || v != 5 {
		t.Errorf("rate_limiter_late_total = %v (present %v), want 5", v, ok)
	}
	if v, ok := value(rm, "rate_limiter_early", api, node); v != 2 {
		t.Errorf("rate_limiter_early = %v (present %v) after late_total appeared, want 2 (reported once)", v, ok)
	}
	if err := m.Unregister(); err != nil {
		t.Errorf("Unregister: %v", err)
	}
	rm = read(t, r)
	if _, ok := value(rm, "rate_limiter_requests_total", api); ok {
		t.Errorf("rate_limiter_requests_total still reported after Unregister")
	}
	if _, ok := value(rm, "rate_limiter_late_total", api); ok {
		t.Errorf("rate_limiter_late_total still reported after Unregister")
	}
}

// TestNewErrors: every mistake is reported, naming the option or the
// meter, in an error wrapping core.ErrInvalidOption.
func TestNewErrors(t *testing.T) {
	_, mp := newReader()
	meter := mp.Meter("test")
	var nilStore *core.MemoryStore
	const prefix = "ratelimit: invalid option: otellimit: "
	cases := map[string]struct {
		meter metric.Meter
		opts  []otellimit.Option
		want  string // the message after prefix
	}{
		"nil meter":          {nil, nil, "New: meter is nil"},
		"nil option":         {meter, []otellimit.Option{nil}, "New: option 0 is nil"},
		"nil source":         {meter, []otellimit.Option{otellimit.WithSources(nil)}, "WithSources: source 0 is nil"},
		"nil pointer source": {meter, []otellimit.Option{otellimit.WithSources(nilStore)}, "WithSources: source 0 is nil"},
		"no buckets":         {meter, []otellimit.Option{otellimit.WithBuckets(nil)}, "WithBuckets: no bucket bounds"},
		"decreasing buckets": {meter, []otellimit.Option{otellimit.WithBuckets([]float64{1, 0.5})}, "WithBuckets: bounds must increase, got 0.5 after 1"},
		"infinite bucket":    {meter, []otellimit.Option{otellimit.WithBuckets([]float64{math.Inf(1)})}, "WithBuckets: bound 0 is +Inf, want a finite number"},
		"reserved attribute": {meter, []otellimit.Option{otellimit.WithAttributes(attribute.String("outcome", "x"))}, `WithAttributes: key "outcome" is one the instruments use`},
		"source attribute":   {meter, []otellimit.Option{otellimit.WithAttributes(attribute.String("source", "x"))}, `WithAttributes: key "source" is one the instruments use`},
	}
	for name, tc := range cases {
		m, err := otellimit.New(tc.meter, tc.opts...)
		if err == nil || !errors.Is(err, core.ErrInvalidOption) || err.Error() != prefix+tc.want {
			t.Errorf("%s: New = %v, %v; want an error %q wrapping core.ErrInvalidOption", name, m, err, prefix+tc.want)
		}
	}
	_, err := otellimit.New(nil, nil, otellimit.WithBuckets(nil))
	for _, want := range []string{"New: meter is nil", "New: option 0 is nil", "WithBuckets: no bucket bounds"} {
		if err == nil || !strings.Contains(err.Error(), prefix+want) {
			t.Errorf("New with three mistakes = %v, want it to report %q", err, prefix+want)
		}
	}
}
