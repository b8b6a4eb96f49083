package promlimit_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	promlimit "github.com/bucketry/ratelimit/adapters/prometheus"
	"github.com/bucketry/ratelimit/core"
)

// The series of the decisions and the sources, which adapters/otel reports
// alike, are tested for both in adapters/metrics/test; here are the tests
// of what only this package does.

// oddSource reports a metric with a label name and no value.
type oddSource struct{}

func (oddSource) CollectMetrics(emit func(core.Metric)) {
	emit(core.Metric{Name: "odd", Help: "Odd.", Labels: []string{"node"}, Value: 1})
}

func TestMalformedSourceFailsTheScrape(t *testing.T) {
	m, err := promlimit.New(promlimit.WithSources(oddSource{}))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), `"odd"`) {
		t.Errorf("Gather = %v, want an error naming the metric \"odd\"", err)
	}
}

// TestNewErrors: every mistake is reported, naming the option, in an
// error wrapping core.ErrInvalidOption.
func TestNewErrors(t *testing.T) {
	var nilStore *core.MemoryStore
	const prefix = "ratelimit: invalid option: promlimit: "
	for _, tc := range []struct {
		name string
		opts []promlimit.Option
		want string // the message after prefix
	}{
		{"nil option", []promlimit.Option{nil}, "New: option 0 is nil"},
		{"nil source", []promlimit.Option{promlimit.WithSources(nil)}, "WithSources: source 0 is nil"},
		{"nil pointer source", []promlimit.Option{promlimit.WithSources(nilStore)}, "WithSources: source 0 is nil"},
		{"no buckets", []promlimit.Option{promlimit.WithBuckets(nil)}, "WithBuckets: no bucket bounds"},
		{"decreasing buckets", []promlimit.Option{promlimit.WithBuckets([]float64{1, 0.5})}, "WithBuckets: bounds must increase, got 0.5 after 1"},
		{"NaN bucket", []promlimit.Option{promlimit.WithBuckets([]float64{math.NaN()})}, "WithBuckets: bound 0 is NaN, want a finite number"},
		{"reserved label", []promlimit.Option{promlimit.WithConstLabels(prometheus.Labels{"rule": "x"})}, `WithConstLabels: label "rule" is one the series use`},
		{"source label", []promlimit.Option{promlimit.WithConstLabels(prometheus.Labels{"source": "x"})}, `WithConstLabels: label "source" is one the series use`},
		{"histogram label", []promlimit.Option{promlimit.WithConstLabels(prometheus.Labels{"le": "x"})}, `WithConstLabels: label "le" is one the series use`},
		{"invalid label", []promlimit.Option{promlimit.WithConstLabels(prometheus.Labels{"": "x"})}, `WithConstLabels: "" is not a valid label name for metric "rate_limiter_requests_total"`},
	} {
		if m, err := promlimit.New(tc.opts...); !errors.Is(err, core.ErrInvalidOption) || err.Error() != prefix+tc.want {
			t.Errorf("%s: New = %v, %v; want an error %q wrapping core.ErrInvalidOption", tc.name, m, err, prefix+tc.want)
		}
	}
	_, err := promlimit.New(nil, promlimit.WithSources(nil), promlimit.WithBuckets(nil))
	for _, want := range []string{"New: option 0 is nil", "WithSources: source 0 is nil", "WithBuckets: no bucket bounds"} {
		if !strings.Contains(fmt.Sprint(err), prefix+want) {
			t.Errorf("New with three mistakes = %v, want it to report %q", err, prefix+want)
		}
	}
}
