package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// metricLines renders what CollectMetrics emits, one "name{labels} kind
// value" line each, in order.
func metricLines(src core.MetricSource) []string {
	var out []string
	src.CollectMetrics(func(m core.Metric) {
		kind := "counter"
		if m.Kind == core.Gauge {
			kind = "gauge"
		}
		if m.Help == "" {
			kind += " (no help)"
		}
		out = append(out, fmt.Sprintf("%s{%s} %s %v", m.Name, strings.Join(m.Labels, "="), kind, m.Value))
	})
	return out
}

type collectFunc func(emit func(core.Metric))

func (f collectFunc) CollectMetrics(emit func(core.Metric)) { f(emit) }

func TestCollectMapping(t *testing.T) {
	st := Stats{Remote: 1, Local: 2, Fetched: 3, CacheHits: 4, CacheMisses: 5, Reloads: 6, Refunds: 7, Refused: 8}
	breakers := map[string]core.BreakerState{
		"10.0.0.3:6379": core.BreakerOpen,
		"10.0.0.1:6379": core.BreakerClosed,
		"10.0.0.2:6379": core.BreakerHalfOpen,
	}
	for _, tc := range []struct {
		name  string
		cache bool
		want  []string
	}{
		{"client-side caching", true, []string{
			"redis_takes_total{via=script} counter 1",
			"redis_takes_total{via=local} counter 2",
			"redis_takes_total{via=fetch} counter 3",
			"redis_cache_hits_total{} counter 4",
			"redis_cache_misses_total{} counter 5",
			"redis_script_reloads_total{} counter 6",
			"redis_refunds_total{} counter 7",
			"redis_breaker_refusals_total{} counter 8",
			"breaker_state{node=10.0.0.1:6379} gauge 0",
			"breaker_state{node=10.0.0.2:6379} gauge 1",
			"breaker_state{node=10.0.0.3:6379} gauge 2",
		}},
		{"no client-side caching", false, []string{
			"redis_takes_total{via=script} counter 1",
			"redis_takes_total{via=local} counter 2",
			"redis_script_reloads_total{} counter 6",
			"redis_refunds_total{} counter 7",
			"redis_breaker_refusals_total{} counter 8",
			"breaker_state{node=10.0.0.1:6379} gauge 0",
			"breaker_state{node=10.0.0.2:6379} gauge 1",
			"breaker_state{node=10.0.0.3:6379} gauge 2",
		}},
	} {
		got := metricLines(collectFunc(func(emit func(core.Metric)) { collect(st, breakers, tc.cache, emit) }))
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: collect =\n%s\nwant\n%s", tc.name, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

// Every label the store reports is one core.IsMetricLabel names, which the
// metrics adapters refuse as a constant label.
func TestCollectLabels(t *testing.T) {
	breakers := map[string]core.BreakerState{"redis": core.BreakerOpen}
	collect(Stats{}, breakers, true, func(m core.Metric) {
		for i := 0; i < len(m.Labels); i += 2 {
			if !core.IsMetricLabel(m.Labels[i]) {
				t.Errorf("metric %s has the label %q, which core.IsMetricLabel does not name", m.Name, m.Labels[i])
			}
		}
	})
}

func TestBreakerGauge(t *testing.T) {
	for _, tc := range []struct {
		state core.BreakerState
		want  float64
	}{
		{core.BreakerClosed, 0},
		{core.BreakerHalfOpen, 1},
		{core.BreakerOpen, 2},
		{core.BreakerState(9), 2},
	} {
		if got := BreakerGauge(tc.state); got != tc.want {
			t.Errorf("BreakerGauge(%v) = %v, want %v", tc.state, got, tc.want)
		}
	}
}

// downClient fails every call as a client whose server is gone does. It
// injects a failure without a server; the stores' tests against real
// servers are in adapters/test.
type downClient struct{ nopClient }

var errRefused = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (downClient) Eval(_ context.Context, evals []*Eval, _ bool) {
	for _, e := range evals {
		e.Reply, e.Undo, e.NoScript, e.Err = "", nil, false, errRefused
	}
}

// cachingClient is a downClient with client-side caching.
type cachingClient struct{ downClient }

func (cachingClient) Get(_ context.Context, keys []string, _ time.Duration, vals []Cached) {
	for i := range keys {
		vals[i] = Cached{Err: errRefused}
	}
}

// TestStoreCollectMetrics: a store whose Redis is down, with a breaker
// that opens at the first failure: the first take goes to Redis and fails,
// the second is refused by the open breaker.
func TestStoreCollectMetrics(t *testing.T) {
	lim, err := core.NewLimit(core.TokenBucket(core.PerSecond(10), 10))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		client Client
		want   []string
	}{
		{"go-redis-like", downClient{}, []string{
			"redis_takes_total{via=script} counter 1",
			"redis_takes_total{via=local} counter 0",
			"redis_script_reloads_total{} counter 0",
			"redis_refunds_total{} counter 0",
			"redis_breaker_refusals_total{} counter 1",
			"breaker_state{node=redis} gauge 2",
		}},
		{"rueidis-like", cachingClient{}, []string{
			"redis_takes_total{via=script} counter 1",
			"redis_takes_total{via=local} counter 0",
			"redis_takes_total{via=fetch} counter 0",
			"redis_cache_hits_total{} counter 0",
			"redis_cache_misses_total{} counter 0",
			"redis_script_reloads_total{} counter 0",
			"redis_refunds_total{} counter 0",
			"redis_breaker_refusals_total{} counter 1",
			"breaker_state{node=redis} gauge 2",
		}},
	} {
		s, err := newStore(tc.client, testConfig(optFunc(Breaker(1, time.Hour)), optFunc(NoBatching)))
		if err != nil {
			t.Fatalf("%s: newStore: %v", tc.name, err)
		}
		if got := metricLines(s); !strings.Contains(strings.Join(got, "\n"), "breaker_state{node=redis} gauge 0") {
			t.Errorf("%s: before any take, CollectMetrics =\n%s\nwant breaker_state{node=redis} gauge 0", tc.name, strings.Join(got, "\n"))
		}
		for i, want := range []error{errRefused, core.ErrBreakerOpen} {
			tk := core.Take{Cost: 1, Buckets: []core.Bucket{{Rule: "r", Key: "k", Limit: lim}}, States: make([]core.BucketState, 1)}
			if err := s.Take(context.Background(), &tk); !errors.Is(err, want) {
				t.Fatalf("%s: take %d = %v, want %v", tc.name, i, err, want)
			}
		}
		got := metricLines(s)
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: CollectMetrics =\n%s\nwant\n%s", tc.name, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}
