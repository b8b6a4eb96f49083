package core_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/bucketry/ratelimit/core"
)

func TestCheckLatencyBuckets(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bounds []float64
		want   string // the message, "" for no error
	}{
		{"default", core.DefaultLatencyBuckets(), ""},
		{"one bound", []float64{0.5}, ""},
		{"negative and zero", []float64{-1, 0, 1e-9}, ""},
		{"nil", nil, "ratelimit: invalid option: x: WithBuckets: no bucket bounds"},
		{"empty", []float64{}, "ratelimit: invalid option: x: WithBuckets: no bucket bounds"},
		{"NaN", []float64{math.NaN()}, "ratelimit: invalid option: x: WithBuckets: bound 0 is NaN, want a finite number"},
		{"+Inf last", []float64{1, math.Inf(1)}, "ratelimit: invalid option: x: WithBuckets: bound 1 is +Inf, want a finite number"},
		{"-Inf", []float64{math.Inf(-1), 1}, "ratelimit: invalid option: x: WithBuckets: bound 0 is -Inf, want a finite number"},
		{"decreasing", []float64{1, 0.5}, "ratelimit: invalid option: x: WithBuckets: bounds must increase, got 0.5 after 1"},
		{"repeated", []float64{0.1, 0.2, 0.2}, "ratelimit: invalid option: x: WithBuckets: bounds must increase, got 0.2 after 0.2"},
		{"first fault only", []float64{2, 1, math.NaN()}, "ratelimit: invalid option: x: WithBuckets: bounds must increase, got 1 after 2"},
	} {
		err := core.CheckLatencyBuckets("x: WithBuckets", tc.bounds)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: CheckLatencyBuckets(%v) = %v, want nil", tc.name, tc.bounds, err)
		case tc.want == "":
		case err == nil:
			t.Errorf("%s: CheckLatencyBuckets(%v) = nil, want %q", tc.name, tc.bounds, tc.want)
		case !errors.Is(err, core.ErrInvalidOption) || err.Error() != tc.want:
			t.Errorf("%s: CheckLatencyBuckets(%v) = %q (wraps ErrInvalidOption: %v), want %q, wrapping it", tc.name, tc.bounds, err, errors.Is(err, core.ErrInvalidOption), tc.want)
		}
	}
}

func TestDefaultLatencyBuckets(t *testing.T) {
	a := core.DefaultLatencyBuckets()
	if len(a) != 18 || a[0] != 1e-6 || a[len(a)-1] != 1 {
		t.Errorf("DefaultLatencyBuckets() = %v, want 18 bounds from 1e-6 to 1", a)
	}
	a[0] = 42
	if b := core.DefaultLatencyBuckets(); b[0] != 1e-6 {
		t.Errorf("DefaultLatencyBuckets()[0] = %v after a caller changed an earlier result, want 1e-6 (a new slice each call)", b[0])
	}
}

// nilSource is a MetricSource whose methods work on a nil pointer: still
// refused, as the other nil pointers are.
type nilSource struct{}

func (*nilSource) CollectMetrics(func(core.Metric)) {}

// funcSource is a MetricSource that is a function.
type funcSource func(emit func(core.Metric))

func (f funcSource) CollectMetrics(emit func(core.Metric)) { f(emit) }

func TestCheckMetricSources(t *testing.T) {
	store, err := core.NewMemoryStore()
	if err != nil {
		t.Fatal(err)
	}
	var nilStore *core.MemoryStore
	for _, tc := range []struct {
		name    string
		sources []core.MetricSource
		want    []string // the messages joined, in order; none for no error
	}{
		{"none", nil, nil},
		{"a store", []core.MetricSource{store}, nil},
		{"a function", []core.MetricSource{funcSource(func(func(core.Metric)) {})}, nil},
		{"nil", []core.MetricSource{nil}, []string{"ratelimit: invalid option: x: WithSources: source 0 is nil"}},
		{"nil pointer", []core.MetricSource{store, nilStore}, []string{"ratelimit: invalid option: x: WithSources: source 1 is nil"}},
		{"nil pointer with methods", []core.MetricSource{(*nilSource)(nil)}, []string{"ratelimit: invalid option: x: WithSources: source 0 is nil"}},
		{"nil function", []core.MetricSource{funcSource(nil)}, []string{"ratelimit: invalid option: x: WithSources: source 0 is nil"}},
		{"every nil one", []core.MetricSource{nil, store, nilStore}, []string{
			"ratelimit: invalid option: x: WithSources: source 0 is nil",
			"ratelimit: invalid option: x: WithSources: source 2 is nil",
		}},
	} {
		err := core.CheckMetricSources("x: WithSources", tc.sources)
		switch {
		case len(tc.want) == 0 && err != nil:
			t.Errorf("%s: CheckMetricSources = %v, want nil", tc.name, err)
		case len(tc.want) == 0:
		case err == nil:
			t.Errorf("%s: CheckMetricSources = nil, want %q", tc.name, tc.want)
		case !errors.Is(err, core.ErrInvalidOption) || err.Error() != strings.Join(tc.want, "\n"):
			t.Errorf("%s: CheckMetricSources = %q (wraps ErrInvalidOption: %v), want %q, wrapping it", tc.name, err, errors.Is(err, core.ErrInvalidOption), strings.Join(tc.want, "\n"))
		}
	}
}

func TestIsMetricLabel(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"outcome", true},
		{"rule", true},
		{"scope", true},
		{"kind", true},
		{"via", true},
		{"node", true},
		{"source", true},
		{"limiter", false},
		{"", false},
		{"Source", false},
	} {
		if got := core.IsMetricLabel(tc.name); got != tc.want {
			t.Errorf("IsMetricLabel(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A metrics adapter's WithBuckets refuses the bounds CheckLatencyBuckets
// refuses, naming itself.
func ExampleCheckLatencyBuckets() {
	fmt.Println(core.CheckLatencyBuckets("promlimit: WithBuckets", core.DefaultLatencyBuckets()))
	fmt.Println(core.CheckLatencyBuckets("promlimit: WithBuckets", []float64{0.01, 0.1, 0.1}))
	// Output:
	// <nil>
	// ratelimit: invalid option: promlimit: WithBuckets: bounds must increase, got 0.1 after 0.1
}

// TestTallyHelp: the descriptions name every outcome and every error kind
// a TallySnapshot counts.
func TestTallyHelp(t *testing.T) {
	for o := core.OutcomeAllowed; o <= core.OutcomeError; o++ {
		if !strings.Contains(core.TallyHelpDecisions, o.String()) {
			t.Errorf("TallyHelpDecisions does not name the outcome %q", o)
		}
	}
	for _, c := range core.NewTally().Snapshot().Errors {
		if !strings.Contains(core.TallyHelpErrors, c.Kind) {
			t.Errorf("TallyHelpErrors does not name the error kind %q", c.Kind)
		}
	}
}
