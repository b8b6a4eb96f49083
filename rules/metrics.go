package rules

import "github.com/bucketry/ratelimit/core"

// CollectMetrics implements core.MetricSource with the label source="file":
// the counters rules_reloads_total (reloads that put a new policy in force)
// and rules_reload_failures_total (reloads that failed, the policy in force
// kept), and the gauges rules_loaded (rules in force) and
// rules_last_success_seconds (Unix time the policy in force was loaded).
// The same names as the PostgreSQL source's, so one alert covers both.
func (w *Watcher) CollectMetrics(emit func(core.Metric)) {
	st := w.Stats()
	labels := []string{"source", "file"}
	last := 0.0
	if !st.LastGood.IsZero() {
		last = float64(st.LastGood.UnixNano()) / 1e9
	}
	for _, m := range []core.Metric{
		{Name: "rules_reloads_total", Help: "Rule loads that put a changed policy in force.", Kind: core.Counter, Value: float64(st.Reloads)},
		{Name: "rules_reload_failures_total", Help: "Rule loads that failed; the policy in force was kept.", Kind: core.Counter, Value: float64(st.Failures)},
		{Name: "rules_loaded", Help: "Rules of the policy in force.", Kind: core.Gauge, Value: float64(st.Rules)},
		{Name: "rules_last_success_seconds", Help: "Unix time of the last successful rule load; 0 if none.", Kind: core.Gauge, Value: last},
	} {
		m.Labels = labels
		emit(m)
	}
}
