package otellimit

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/bucketry/ratelimit/core"
)

// Prefix begins the name of every instrument.
const Prefix = "rate_limiter_"

// Metrics counts a limiter's decisions, through Observe, and reports them
// with the metrics of its sources through the instruments of a meter (see
// the package documentation). Make one with New; it is safe for concurrent
// use. One Metrics may observe several limiters, whose decisions it adds
// up.
type Metrics struct {
	t       *core.Tally
	attrs   []attribute.KeyValue
	latency metric.Float64Histogram
	record  []metric.RecordOption // the constant attributes, made once

	requests, allowed, rejected, decisions, errors metric.Int64ObservableCounter

	src *sources

	mu   sync.Mutex
	regs []metric.Registration
}

// New returns Metrics whose instruments are made on meter, configured by
// opts applied in order over the defaults (no source,
// core.DefaultLatencyBuckets, no constant attribute). It fails with an error wrapping
// core.ErrInvalidOption, naming the option, for a nil meter, option or
// source, bad bucket bounds, or a reserved attribute key; every mistake
// found is reported, joined with errors.Join. It fails with the meter's
// error if an instrument cannot be made.
func New(meter metric.Meter, opts ...Option) (*Metrics, error) {
	cfg := config{buckets: core.DefaultLatencyBuckets()}
	if isNil(meter) {
		cfg.fail("New: meter is nil")
	}
	for i, o := range opts {
		if o == nil {
			cfg.fail("New: option %d is nil", i)
			continue
		}
		o.apply(&cfg)
	}
	for _, kv := range cfg.attrs {
		if core.IsMetricLabel(string(kv.Key)) {
			cfg.fail("WithAttributes: key %q is one the instruments use", kv.Key)
		}
	}
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, err
	}
	m := &Metrics{t: core.NewTally(), attrs: cfg.attrs}
	m.record = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(cfg.attrs...))}
	var errs []error
	counter := func(name, help string) metric.Int64ObservableCounter {
		c, err := meter.Int64ObservableCounter(Prefix+name, metric.WithDescription(help), metric.WithUnit("{decision}"))
		errs = append(errs, err)
		return c
	}
	m.requests = counter("requests_total", core.TallyHelpRequests)
	m.allowed = counter("allowed_total", core.TallyHelpAllowed)
	m.rejected = counter("rejected_total", core.TallyHelpRejected)
	m.decisions = counter("decisions_total", core.TallyHelpDecisions)
	m.errors = counter("errors_total", core.TallyHelpErrors)
	var err error
	m.latency, err = meter.Float64Histogram(Prefix+"latency_seconds", metric.WithDescription(core.TallyHelpLatency), metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(cfg.buckets...))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(m.observeDecisions, m.requests, m.allowed, m.rejected, m.decisions, m.errors)
	if err != nil {
		return nil, err
	}
	m.regs = append(m.regs, reg)
	if len(cfg.sources) > 0 {
		m.src = &sources{m: m, meter: meter, list: cfg.sources, known: map[string]*instrument{}}
		if err := m.src.discover(); err != nil {
			m.Unregister()
			return nil, err
		}
	}
	return m, nil
}

// Option is the limiter option that counts its decisions into m:
//
//	limiter, err := core.NewLimiter(policy, m.Option())
//
// The limiter counts each decision in m's core.Tally directly (one striped
// counter, two for a failure; see core.WithTally), which the observable
// counters report at collection, and m records the latency of the timed
// ones in the histogram. It is the cheapest way to count. A limiter takes
// one Metrics this way; Observe counts into m from an Observer.
func (m *Metrics) Option() core.Option {
	return core.WithTally(m.t, func(ctx context.Context, d time.Duration) { m.latency.Record(ctx, d.Seconds(), m.record...) })
}

// Observe counts one decision, as Option does, from an Observer (for
// example one that calls several in turn):
//
//	limiter, err := core.NewLimiter(policy, core.WithObserver(m.Observe))
//
// An observer's event is a copy the limiter makes, which costs a decision
// more than Option. Observe allocates nothing itself and is safe for
// concurrent use.
func (m *Metrics) Observe(ctx context.Context, e *core.Event) {
	m.t.Record(e) // which ignores a nil e
	if e != nil && e.Timed {
		m.latency.Record(ctx, e.Latency.Seconds(), m.record...)
	}
}

// Unregister stops the callbacks that report the counters and the
// sources' metrics; Observe goes on counting, unreported. It is safe for
// concurrent use and returns the meter's errors, joined.
func (m *Metrics) Unregister() error {
	m.mu.Lock()
	regs := m.regs
	m.regs = nil
	if m.src != nil {
		m.src.closed = true
	}
	m.mu.Unlock()
	var errs []error
	for _, r := range regs {
		errs = append(errs, r.Unregister())
	}
	return errors.Join(errs...)
}

// set returns the attribute set of kvs and the constant attributes.
func (m *Metrics) set(kvs ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(append(kvs, m.attrs...)...))
}

// observeDecisions reports the decision counters of the core.Tally's
// snapshot.
func (m *Metrics) observeDecisions(_ context.Context, o metric.Observer) error {
	s := m.t.Snapshot()
	base := m.set()
	o.ObserveInt64(m.requests, int64(s.Requests), base)
	o.ObserveInt64(m.allowed, int64(s.Allowed), base)
	o.ObserveInt64(m.rejected, int64(s.Rejected), base)
	for _, c := range s.Decisions {
		o.ObserveInt64(m.decisions, int64(c.Count), m.set(attribute.String("outcome", c.Outcome.String()), attribute.String("rule", c.Rule), attribute.String("scope", string(c.Scope))))
	}
	for _, c := range s.Errors {
		o.ObserveInt64(m.errors, int64(c.Count), m.set(attribute.String("kind", c.Kind)))
	}
	return nil
}

// sources reports the metrics of the MetricSources. An instrument is made
// for each metric name a source reports, with one callback for the names
// known when New ran; a name first reported later gets its instrument and
// a callback of its own in the background, from the next collection on,
// since a callback cannot register instruments while the SDK runs it.
type sources struct {
	m     *Metrics
	meter metric.Meter
	list  []core.MetricSource

	mu      sync.Mutex
	known   map[string]*instrument // by name
	pending map[string]core.Metric // reported, not yet made
	closed  bool                   // (under m.mu) Unregister ran
	wg      sync.WaitGroup         // the background registrations
}

type instrument struct {
	kind    core.MetricKind
	counter metric.Float64ObservableCounter
	gauge   metric.Float64ObservableGauge
}

func (in *instrument) observable() metric.Observable {
	if in.kind == core.Gauge {
		return in.gauge
	}
	return in.counter
}

// discover makes the instruments of what the sources report now.
func (s *sources) discover() error {
	found := map[string]core.Metric{}
	for _, src := range s.list {
		src.CollectMetrics(func(x core.Metric) {
			if _, ok := found[x.Name]; !ok {
				found[x.Name] = x
			}
		})
	}
	return s.add(found)
}

// add makes an instrument for each metric of found, whose names no
// instrument has and no other add is making, and registers one callback
// observing them.
func (s *sources) add(found map[string]core.Metric) error {
	group := map[string]*instrument{}
	var list []metric.Observable
	var errs []error
	for name, x := range found {
		in := &instrument{kind: x.Kind}
		var err error
		if x.Kind == core.Gauge {
			in.gauge, err = s.meter.Float64ObservableGauge(Prefix+name, metric.WithDescription(x.Help))
		} else {
			in.counter, err = s.meter.Float64ObservableCounter(Prefix+name, metric.WithDescription(x.Help))
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		group[name] = in
		list = append(list, in.observable())
	}
	if len(list) == 0 {
		return errors.Join(errs...)
	}
	s.mu.Lock()
	for name, in := range group {
		s.known[name] = in
	}
	s.mu.Unlock()
	reg, err := s.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s.observe(o, group)
		return nil
	}, list...)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	s.m.mu.Lock()
	if s.closed {
		s.m.mu.Unlock()
		return errors.Join(append(errs, reg.Unregister())...)
	}
	s.m.regs = append(s.m.regs, reg)
	s.m.mu.Unlock()
	return errors.Join(errs...)
}

// observe reports the metrics of group; a name no instrument has yet is
// set aside for the background.
func (s *sources) observe(o metric.Observer, group map[string]*instrument) {
	var unknown []core.Metric
	for _, src := range s.list {
		src.CollectMetrics(func(x core.Metric) {
			in, ok := group[x.Name]
			if !ok {
				unknown = append(unknown, x)
				return
			}
			if in.kind != x.Kind {
				return // the name's first kind stands
			}
			attrs := make([]attribute.KeyValue, 0, len(x.Labels)/2+len(s.m.attrs))
			for i := 0; i+1 < len(x.Labels); i += 2 {
				attrs = append(attrs, attribute.String(x.Labels[i], x.Labels[i+1]))
			}
			opt := metric.WithAttributeSet(attribute.NewSet(append(attrs, s.m.attrs...)...))
			if in.kind == core.Gauge {
				o.ObserveFloat64(in.gauge, x.Value, opt)
			} else {
				o.ObserveFloat64(in.counter, x.Value, opt)
			}
		})
	}
	if len(unknown) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	start := false
	for _, x := range unknown {
		if _, ok := s.known[x.Name]; ok {
			continue
		}
		if s.pending == nil {
			s.pending = map[string]core.Metric{}
			start = true
		}
		if _, ok := s.pending[x.Name]; !ok {
			s.pending[x.Name] = x
		}
	}
	if start {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.mu.Lock()
			found := s.pending
			s.pending = nil
			for name := range found {
				s.known[name] = nil // being made: not to be set aside again
			}
			s.mu.Unlock()
			s.add(found) // an error leaves the name unreported, as at New
		}()
	}
}
