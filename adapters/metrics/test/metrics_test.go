package metricstest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// t0 is the instant the decisions of these tests are made at.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// failingStore fails every Take with err, or with the context's error
// once it has ended: a store whose server is gone.
type failingStore struct{ err error }

func (s failingStore) Take(ctx context.Context, _ *core.Take) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.err
}

var errDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

// counters are the decision counters, which checkExact compares in full.
var counters = []string{"rate_limiter_requests_total", "rate_limiter_allowed_total", "rate_limiter_rejected_total", "rate_limiter_decisions_total", "rate_limiter_errors_total"}

// errorKinds are the kinds core.ErrorKind names, each exported from the
// start.
var errorKinds = []string{"breaker_open", "timeout", "canceled", "partial", "invalid_input", "not_constructed", "unavailable"}

// checkExact fails unless every series of want has its value in got, and
// every decision counter of got that is not zero is in want.
func checkExact(t *testing.T, got, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("series %s missing, want %v", k, v)
		case g != v:
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; ok || v == 0 {
			continue
		}
		for _, c := range counters {
			if strings.HasPrefix(k, c+"{") || k == c {
				t.Errorf("unexpected %s = %v", k, v)
			}
		}
	}
}

// checkBuckets fails unless the latency histogram with the labels of
// labels (`name="value"` pairs, sorted) has a bucket for each bound of
// want and for +Inf, and no other, with as many decisions in +Inf as it
// counts.
func checkBuckets(t *testing.T, got map[string]float64, labels []string, want []float64) {
	t.Helper()
	const name = "rate_limiter_latency_seconds"
	var bounds []string
	for k := range got {
		rest, ok := strings.CutPrefix(k, name+"_bucket{")
		if !ok {
			continue
		}
		var other []string
		for p := range strings.SplitSeq(strings.TrimSuffix(rest, "}"), ",") {
			if b, ok := strings.CutPrefix(p, "le="); ok {
				bounds = append(bounds, b)
			} else {
				other = append(other, p)
			}
		}
		if !slices.Equal(other, labels) {
			t.Errorf("%s has labels %v, want %v", k, other, labels)
		}
	}
	var wantBounds []string
	for _, b := range append(want, math.Inf(1)) {
		wantBounds = append(wantBounds, fmt.Sprintf("%q", fmt.Sprint(b)))
	}
	slices.Sort(bounds)
	slices.Sort(wantBounds)
	if !slices.Equal(bounds, wantBounds) {
		t.Errorf("%s buckets le=%v, want %v", name, bounds, wantBounds)
	}
	inf, count := got[key(name+"_bucket", append(slices.Clone(labels), le(math.Inf(1))))], got[key(name+"_count", slices.Clone(labels))]
	if inf != count {
		t.Errorf("%s: %v decisions in the +Inf bucket, %v counted", name, inf, count)
	}
}

func newLimiter(t testing.TB, install core.Option, rules []core.Rule, opts ...core.Option) *core.Limiter {
	t.Helper()
	p, err := core.NewPolicy(rules...)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	l, err := core.NewLimiter(p, append([]core.Option{install, core.WithLatencySampling(1)}, opts...)...)
	if err != nil {
		t.Fatalf("NewLimiter: %v", err)
	}
	return l
}

// allow makes n decisions of cost 1 for req at t0.
func allow(l *core.Limiter, req core.Request, n int) {
	for range n {
		l.AllowAt(context.Background(), t0, req, 1)
	}
}

var (
	perUser = core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 2)}
	alice   = core.Request{User: "alice", IP: "192.0.2.1"}
)

// TestObserve: the decisions of each outcome, counted by each exporter
// under the same series.
func TestObserve(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, install core.Option)
		want map[string]float64
	}{
		{
			name: "allowed and denied",
			run: func(t *testing.T, install core.Option) {
				allow(newLimiter(t, install, []core.Rule{perUser}), alice, 3)
			},
			want: map[string]float64{
				"rate_limiter_requests_total":                                                 3,
				"rate_limiter_allowed_total":                                                  2,
				"rate_limiter_rejected_total":                                                 1,
				`rate_limiter_decisions_total{outcome="allowed",rule="",scope=""}`:            2,
				`rate_limiter_decisions_total{outcome="denied",rule="per-user",scope="user"}`: 1,
				"rate_limiter_latency_seconds_count":                                          3,
			},
		},
		{
			name: "no rule applies",
			run: func(t *testing.T, install core.Option) {
				allow(newLimiter(t, install, []core.Rule{perUser}), core.Request{IP: "192.0.2.1"}, 2)
			},
			want: map[string]float64{
				"rate_limiter_requests_total":                                      2,
				"rate_limiter_allowed_total":                                       2,
				`rate_limiter_decisions_total{outcome="allowed",rule="",scope=""}`: 2,
			},
		},
		{
			name: "shadow rule",
			run: func(t *testing.T, install core.Option) {
				shadow := core.Rule{Name: "per-ip", Scope: core.ScopeIP, Shadow: true, Limit: core.TokenBucket(core.PerHour(1), 1)}
				allow(newLimiter(t, install, []core.Rule{perUser, shadow}), alice, 4)
			},
			// per-ip would deny the second request on; per-user denies the third.
			want: map[string]float64{
				"rate_limiter_requests_total":                                                    4,
				"rate_limiter_allowed_total":                                                     2,
				"rate_limiter_rejected_total":                                                    2,
				`rate_limiter_decisions_total{outcome="allowed",rule="",scope=""}`:               1,
				`rate_limiter_decisions_total{outcome="shadow_denied",rule="per-ip",scope="ip"}`: 1,
				`rate_limiter_decisions_total{outcome="denied",rule="per-user",scope="user"}`:    2,
			},
		},
		{
			name: "two shadow rules: the longer retry names the denial",
			run: func(t *testing.T, install core.Option) {
				fast := core.Rule{Name: "fast", Scope: core.ScopeIP, Shadow: true, Limit: core.TokenBucket(core.PerSecond(10), 1)}
				slow := core.Rule{Name: "slow", Scope: core.ScopeUser, Shadow: true, Limit: core.TokenBucket(core.PerMinute(1), 1)}
				allow(newLimiter(t, install, []core.Rule{fast, slow}), alice, 3)
			},
			want: map[string]float64{
				"rate_limiter_requests_total":                                                    3,
				"rate_limiter_allowed_total":                                                     3,
				`rate_limiter_decisions_total{outcome="allowed",rule="",scope=""}`:               1,
				`rate_limiter_decisions_total{outcome="shadow_denied",rule="slow",scope="user"}`: 2,
			},
		},
		{
			name: "fail open",
			run: func(t *testing.T, install core.Option) {
				allow(newLimiter(t, install, []core.Rule{perUser}, core.WithStore(failingStore{errDown})), alice, 2)
			},
			want: map[string]float64{
				"rate_limiter_requests_total":                                       2,
				"rate_limiter_allowed_total":                                        2,
				`rate_limiter_decisions_total{outcome="degraded",rule="",scope=""}`: 2,
				`rate_limiter_errors_total{kind="unavailable"}`:                     2,
			},
		},
		{
			name: "fail closed",
			run: func(t *testing.T, install core.Option) {
				l := newLimiter(t, install, []core.Rule{perUser}, core.WithStore(failingStore{errDown}), core.WithFailureMode(core.FailClosed))
				allow(l, alice, 1)
			},
			want: map[string]float64{
				"rate_limiter_requests_total":                                    1,
				"rate_limiter_rejected_total":                                    1,
				`rate_limiter_decisions_total{outcome="error",rule="",scope=""}`: 1,
				`rate_limiter_errors_total{kind="unavailable"}`:                  1,
			},
		},
		{
			name: "fallback denies",
			run: func(t *testing.T, install core.Option) {
				l := newLimiter(t, install, []core.Rule{perUser}, core.WithStore(failingStore{errDown}), core.WithFailureMode(core.FailFallback))
				allow(l, alice, 3)
			},
			want: map[string]float64{
				"rate_limiter_requests_total":                                                   3,
				"rate_limiter_allowed_total":                                                    2,
				"rate_limiter_rejected_total":                                                   1,
				`rate_limiter_decisions_total{outcome="degraded",rule="",scope=""}`:             2,
				`rate_limiter_decisions_total{outcome="degraded",rule="per-user",scope="user"}`: 1,
				`rate_limiter_errors_total{kind="unavailable"}`:                                 3,
			},
		},
		{
			name: "breaker open",
			run: func(t *testing.T, install core.Option) {
				open := failingStore{fmt.Errorf("redis: %w", core.ErrBreakerOpen)}
				allow(newLimiter(t, install, []core.Rule{perUser}, core.WithStore(open)), alice, 2)
			},
			want: map[string]float64{
				"rate_limiter_requests_total":                                       2,
				"rate_limiter_allowed_total":                                        2,
				`rate_limiter_decisions_total{outcome="degraded",rule="",scope=""}`: 2,
				`rate_limiter_errors_total{kind="breaker_open"}`:                    2,
			},
		},
		{
			name: "bad input and a canceled caller",
			run: func(t *testing.T, install core.Option) {
				l := newLimiter(t, install, []core.Rule{perUser}, core.WithStore(failingStore{errDown}))
				l.AllowAt(context.Background(), t0, alice, -1)
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				l.AllowAt(ctx, t0, alice, 1)
			},
			want: map[string]float64{
				"rate_limiter_requests_total":                                    2,
				"rate_limiter_rejected_total":                                    2,
				`rate_limiter_decisions_total{outcome="error",rule="",scope=""}`: 2,
				`rate_limiter_errors_total{kind="invalid_input"}`:                1,
				`rate_limiter_errors_total{kind="canceled"}`:                     1,
			},
		},
		{
			name: "breaker open and bad input",
			run: func(t *testing.T, install core.Option) {
				l := newLimiter(t, install, []core.Rule{perUser}, core.WithStore(failingStore{fmt.Errorf("redis: %w", core.ErrBreakerOpen)}))
				allow(l, alice, 1)
				l.AllowAt(context.Background(), t0, alice, -1)
			},
			want: map[string]float64{
				"rate_limiter_requests_total":                                       2,
				"rate_limiter_allowed_total":                                        1,
				"rate_limiter_rejected_total":                                       1,
				`rate_limiter_decisions_total{outcome="degraded",rule="",scope=""}`: 1,
				`rate_limiter_decisions_total{outcome="error",rule="",scope=""}`:    1,
				`rate_limiter_errors_total{kind="breaker_open"}`:                    1,
				`rate_limiter_errors_total{kind="invalid_input"}`:                   1,
			},
		},
		{
			name: "policy replaced: a rule keeps its series",
			run: func(t *testing.T, install core.Option) {
				l := newLimiter(t, install, []core.Rule{perUser})
				allow(l, alice, 3)
				p, err := core.NewPolicy(core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 1)})
				if err != nil {
					t.Fatal(err)
				}
				if err := l.SetPolicy(p); err != nil {
					t.Fatal(err)
				}
				allow(l, alice, 2)
			},
			want: map[string]float64{
				"rate_limiter_requests_total":                                                 5,
				"rate_limiter_allowed_total":                                                  2,
				"rate_limiter_rejected_total":                                                 3,
				`rate_limiter_decisions_total{outcome="allowed",rule="",scope=""}`:            2,
				`rate_limiter_decisions_total{outcome="denied",rule="per-user",scope="user"}`: 3,
			},
		},
	} {
		for _, ex := range exporters {
			t.Run(ex.name+"/"+tc.name, func(t *testing.T) {
				install, read := ex.start(t, settings{})
				tc.run(t, install)
				got := read(t)
				checkExact(t, got, tc.want)
				for _, kind := range errorKinds {
					if _, ok := got[`rate_limiter_errors_total{kind="`+kind+`"}`]; !ok {
						t.Errorf("rate_limiter_errors_total{kind=%q} missing; every kind is exported", kind)
					}
				}
				if _, ok := got["rate_limiter_latency_seconds_count"]; ok {
					checkBuckets(t, got, nil, core.DefaultLatencyBuckets())
				}
			})
		}
	}
}

// gaugeSource reports one gauge with a label.
type gaugeSource struct{}

func (gaugeSource) CollectMetrics(emit func(core.Metric)) {
	emit(core.Metric{Name: "early", Help: "Early.", Kind: core.Gauge, Labels: []string{"node", "a"}, Value: 2})
}

// TestSourcesAndLabels: the sources' metrics come with the prefix, their
// labels and the constant label, as the decision counters do, and the
// histogram has the buckets asked for.
func TestSourcesAndLabels(t *testing.T) {
	for _, ex := range exporters {
		t.Run(ex.name, func(t *testing.T) {
			store, err := core.NewMemoryStore()
			if err != nil {
				t.Fatal(err)
			}
			install, read := ex.start(t, settings{
				sources: []core.MetricSource{store, gaugeSource{}},
				label:   [2]string{"limiter", "api"},
				buckets: []float64{0.001, 1},
			})
			l := newLimiter(t, install, []core.Rule{perUser}, core.WithStore(store))
			allow(l, alice, 1)
			allow(l, core.Request{User: "bob"}, 1)
			got := read(t)
			checkExact(t, got, map[string]float64{
				`rate_limiter_requests_total{limiter="api"}`:                                     2,
				`rate_limiter_allowed_total{limiter="api"}`:                                      2,
				`rate_limiter_rejected_total{limiter="api"}`:                                     0,
				`rate_limiter_decisions_total{limiter="api",outcome="allowed",rule="",scope=""}`: 2,
				`rate_limiter_memory_keys{limiter="api"}`:                                        2,
				`rate_limiter_memory_evictions_total{limiter="api"}`:                             0,
				`rate_limiter_early{limiter="api",node="a"}`:                                     2,
				`rate_limiter_latency_seconds_count{limiter="api"}`:                              2,
				`rate_limiter_latency_seconds_bucket{le="+Inf",limiter="api"}`:                   2,
			})
			checkBuckets(t, got, []string{`limiter="api"`}, []float64{0.001, 1})
		})
	}
}

// TestConcurrent: decisions from many goroutines are all counted, race
// free, while the exporter is read: exactly the burst is allowed.
func TestConcurrent(t *testing.T) {
	for _, ex := range exporters {
		t.Run(ex.name, func(t *testing.T) {
			install, read := ex.start(t, settings{})
			const burst, goroutines, each = 100, 16, 50
			l := newLimiter(t, install, []core.Rule{{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerHour(1), burst)}})
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() { allow(l, core.Request{}, each) })
			}
			wg.Go(func() { read(t) })
			wg.Wait()
			checkExact(t, read(t), map[string]float64{
				"rate_limiter_requests_total":                                                 goroutines * each,
				"rate_limiter_allowed_total":                                                  burst,
				"rate_limiter_rejected_total":                                                 goroutines*each - burst,
				`rate_limiter_decisions_total{outcome="allowed",rule="",scope=""}`:            burst,
				`rate_limiter_decisions_total{outcome="denied",rule="global",scope="global"}`: goroutines*each - burst,
			})
		})
	}
}
