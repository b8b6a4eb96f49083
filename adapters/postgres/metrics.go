package pglimit

import "github.com/bucketry/ratelimit/core"

// CollectMetrics implements core.MetricSource with the label
// source="postgres": the counters rules_reloads_total (loads that changed
// the policy), rules_reload_failures_total (loads that failed, the policy
// in force kept) and rules_listener_reconnects_total, and the gauges
// rules_loaded (rules in force), rules_listening (1 while the LISTEN
// connection is up) and rules_last_success_seconds (Unix time of the last
// successful load, 0 if none).
func (s *Source) CollectMetrics(emit func(core.Metric)) {
	st := s.Stats()
	labels := []string{"source", "postgres"}
	last := 0.0
	if !st.LastSuccess.IsZero() {
		last = float64(st.LastSuccess.UnixNano()) / 1e9
	}
	for _, m := range []core.Metric{
		{Name: "rules_reloads_total", Help: "Rule loads that put a changed policy in force.", Kind: core.Counter, Value: float64(st.Reloads)},
		{Name: "rules_reload_failures_total", Help: "Rule loads that failed; the policy in force was kept.", Kind: core.Counter, Value: float64(st.Failures)},
		{Name: "rules_listener_reconnects_total", Help: "Times the rules listener connected again.", Kind: core.Counter, Value: float64(st.Reconnects)},
		{Name: "rules_loaded", Help: "Rules of the policy in force.", Kind: core.Gauge, Value: float64(st.Rules)},
		{Name: "rules_listening", Help: "1 while the connection listening for rule changes is up.", Kind: core.Gauge, Value: b2f(st.Listening)},
		{Name: "rules_last_success_seconds", Help: "Unix time of the last successful rule load; 0 if none.", Kind: core.Gauge, Value: last},
	} {
		m.Labels = labels
		emit(m)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
