package goredis_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/adapters/goredis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// TestCollectMetrics: the store's counters after decisions on a real
// server of its own, with remembered denials and a breaker: two takes
// allowed and one denied by the script (sent in full once, the new server
// not having it), the fourth denied locally.
func TestCollectMetrics(t *testing.T) {
	srv := redistest.Standalone(t)
	s := mustStore(t, standaloneClient(srv)(t), goredis.WithLocalDenials(), goredis.WithBreaker(3, time.Minute))
	values, order := redistests.MetricsAfterDecisions(t, s)
	var got []string
	for _, k := range order {
		got = append(got, fmt.Sprintf("%s %v", k, values[k]))
	}
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
