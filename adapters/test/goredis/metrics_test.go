package goredis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/adapters/goredis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// TestCollectMetrics: the store's counters after decisions on a real
// server of its own, with remembered denials and a breaker: two takes
// allowed and one denied by the script (sent in full once, the new server
// not having it), the fourth denied locally.
func TestCollectMetrics(t *testing.T) {
	srv := redistest.Standalone(t)
	s := mustStore(t, standaloneClient(srv)(t), goredis.WithLocalDenials(), goredis.WithBreaker(3, time.Minute))
	var _ core.MetricSource = s
	p := redistests.Policy(t, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 2)})
	l := redistests.Limiter(t, p, core.WithStore(s))
	for i, want := range []bool{true, true, false, false} {
		d, err := l.Allow(context.Background(), core.Request{User: "alice"})
		if err != nil || d.Allowed != want || d.Degraded {
			t.Fatalf("Allow %d = allowed %v, degraded %v, %v; want allowed %v", i, d.Allowed, d.Degraded, err, want)
		}
	}
	var got []string
	s.CollectMetrics(func(m core.Metric) {
		got = append(got, fmt.Sprintf("%s{%s} %v", m.Name, strings.Join(m.Labels, "="), m.Value))
	})
	want := []string{
		"redis_takes_total{via=script} 3",
		"redis_takes_total{via=local} 1",
		"redis_script_reloads_total{} 1",
		"redis_refunds_total{} 0",
		"redis_breaker_refusals_total{} 0",
		"breaker_state{node=redis} 0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("CollectMetrics =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
