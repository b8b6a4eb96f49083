package core

// MetricKind says how a Metric's value behaves.
type MetricKind uint8

const (
	// Counter: a total since the source was made, which only rises.
	Counter MetricKind = iota
	// Gauge: a value now, which may rise and fall.
	Gauge
)

// Metric is one number a component (a store, a rules source, an audit
// sink) reports about itself, for metrics adapters to export without
// knowing the component: adapters/prometheus and adapters/otel read every
// MetricSource they are given. Name is lower snake case without a prefix
// (the adapter adds "rate_limiter_"); Labels are pairs of label name and
// value, few and of bounded cardinality (a Redis node, never an identity);
// the project's own sources use only the names IsMetricLabel reports.
type Metric struct {
	Name   string
	Help   string
	Kind   MetricKind
	Labels []string // name, value, name, value...
	Value  float64
}

// MetricSource is a component that reports Metrics. CollectMetrics calls
// emit once per metric (per label set), with the values of now; it must be
// safe for concurrent use and quick, as adapters call it on every scrape.
// The MemoryStore, the Redis stores, the rules sources and the audit sink
// are MetricSources.
type MetricSource interface {
	CollectMetrics(emit func(Metric))
}

// CollectMetrics implements MetricSource: memory_keys (gauge), and the
// counters memory_reclaimed_total and memory_evictions_total (see
// MemoryStats). A store not made by NewMemoryStore reports zeros.
func (s *MemoryStore) CollectMetrics(emit func(Metric)) {
	st := s.Stats()
	emit(Metric{Name: "memory_keys", Help: "Buckets the in-memory store holds.", Kind: Gauge, Value: float64(st.Keys)})
	emit(Metric{Name: "memory_reclaimed_total", Help: "Expired buckets the in-memory store dropped.", Kind: Counter, Value: float64(st.Reclaimed)})
	emit(Metric{Name: "memory_evictions_total", Help: "Unexpired buckets the in-memory store evicted at its bound, forgiving what they owed.", Kind: Counter, Value: float64(st.Evictions)})
}
