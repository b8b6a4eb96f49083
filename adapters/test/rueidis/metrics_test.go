package rueidis_test

import (
	"strings"
	"testing"
	"time"

	rstore "github.com/bucketry/ratelimit/adapters/rueidis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
)

// TestCollectMetrics: the store's counters after decisions on a real
// server, with local denials from client-side cached state and a breaker.
func TestCollectMetrics(t *testing.T) {
	srv := sharedStandalone(t)
	s := mustStore(t, newClient(t, standaloneOpt(srv)), rstore.WithLocalDenials(), rstore.WithBreaker(3, time.Minute))
	got, order := redistests.MetricsAfterDecisions(t, s)
	t.Logf("CollectMetrics: %v", got)
	wantOrder := []string{
		"redis_takes_total{via=script}", "redis_takes_total{via=local}", "redis_takes_total{via=fetch}",
		"redis_cache_hits_total{}", "redis_cache_misses_total{}",
		"redis_script_reloads_total{}", "redis_refunds_total{}", "redis_breaker_refusals_total{}",
		"breaker_state{node=redis}",
	}
	if strings.Join(order, " ") != strings.Join(wantOrder, " ") {
		t.Errorf("CollectMetrics reports %v, want %v", order, wantOrder)
	}
	st := s.Stats()
	for k, v := range map[string]int64{
		"redis_takes_total{via=script}": st.Remote, "redis_takes_total{via=local}": st.Local, "redis_takes_total{via=fetch}": st.Fetched,
		"redis_cache_hits_total{}": st.CacheHits, "redis_cache_misses_total{}": st.CacheMisses,
		"redis_script_reloads_total{}": st.Reloads, "redis_refunds_total{}": st.Refunds, "redis_breaker_refusals_total{}": st.Refused,
	} {
		if got[k] != float64(v) {
			t.Errorf("%s = %v, want Stats' %d", k, got[k], v)
		}
	}
	if takes := got["redis_takes_total{via=script}"] + got["redis_takes_total{via=local}"] + got["redis_takes_total{via=fetch}"]; takes != 4 {
		t.Errorf("redis_takes_total sums to %v, want 4 (one per take)", takes)
	}
	if got["redis_takes_total{via=script}"] < 2 || got["redis_takes_total{via=local}"]+got["redis_takes_total{via=fetch}"] < 1 {
		t.Errorf("takes by script %v, without it %v: want the allowed two by script and a denial without", got["redis_takes_total{via=script}"], got["redis_takes_total{via=local}"]+got["redis_takes_total{via=fetch}"])
	}
	if got["breaker_state{node=redis}"] != 0 {
		t.Errorf("breaker_state{node=redis} = %v, want 0 (closed)", got["breaker_state{node=redis}"])
	}
}
