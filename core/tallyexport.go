package core

import (
	"errors"
	"fmt"
	"math"
)

// What the metrics adapters that export a Tally (adapters/prometheus,
// adapters/otel) share, so that both describe their metrics alike and
// accept and refuse the same options with the same messages.

// The descriptions, as help text, of the metrics an adapter exports from a
// Tally: one for each count of a TallySnapshot, and one for a histogram of
// Event.Latency.
const (
	// TallyHelpRequests describes TallySnapshot.Requests.
	TallyHelpRequests = "Decisions the limiter made, one per request checked (those that failed included): allowed_total + rejected_total."
	// TallyHelpAllowed describes TallySnapshot.Allowed.
	TallyHelpAllowed = "Decisions that let the request go ahead: allowed, shadow-denied, or allowed by the failure mode while the store failed."
	// TallyHelpRejected describes TallySnapshot.Rejected.
	TallyHelpRejected = "Decisions that did not let the request go ahead: denials (the fallback store's included), fail-closed refusals and errors."
	// TallyHelpDecisions describes TallySnapshot.Decisions, labelled
	// outcome, rule and scope.
	TallyHelpDecisions = "Decisions by outcome (allowed, denied, degraded, shadow_denied, error); rule and scope name the denying tier of a denial, a shadow denial or a fallback denial, and are empty otherwise."
	// TallyHelpErrors describes TallySnapshot.Errors, labelled kind.
	TallyHelpErrors = "Decisions with a store failure or an error, by kind (breaker_open, timeout, canceled, partial, invalid_input, not_constructed, unavailable)."
	// TallyHelpLatency describes a histogram of Event.Latency, in
	// seconds.
	TallyHelpLatency = "The limiter's own time for a decision (policy, keys, store call), in seconds, of the timed decisions only: one in core.WithLatencySampling's n (16 by default)."
)

// DefaultLatencyBuckets returns the default upper bounds, in seconds, of
// the buckets of a histogram of Event.Latency, which the metrics adapters
// use unless told otherwise: 18 bounds from 1µs, where an in-memory
// decision lies, to 1s, past any store timeout worth having; a Redis round
// trip falls around 100µs to 2.5ms. A final +Inf bucket is implied. It
// returns a new slice on each call, which the caller may change.
func DefaultLatencyBuckets() []float64 {
	return []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 1}
}

// CheckLatencyBuckets returns nil if bounds can be the upper bounds, in
// seconds, of a latency histogram's buckets: at least one, each finite (a
// final +Inf is implied), strictly increasing. Otherwise it returns an
// error wrapping ErrInvalidOption that names option, the option as the
// caller's users write it with its package ("promlimit: WithBuckets"),
// and the first fault:
//
//	ratelimit: invalid option: promlimit: WithBuckets: bounds must increase, got 0.5 after 1
//
// It does not keep bounds. It is safe for concurrent use.
func CheckLatencyBuckets(option string, bounds []float64) error {
	if len(bounds) == 0 {
		return fmt.Errorf("%w: %s: no bucket bounds", ErrInvalidOption, option)
	}
	for i, b := range bounds {
		switch {
		case math.IsNaN(b) || math.IsInf(b, 0):
			return fmt.Errorf("%w: %s: bound %d is %v, want a finite number", ErrInvalidOption, option, i, b)
		case i > 0 && b <= bounds[i-1]:
			return fmt.Errorf("%w: %s: bounds must increase, got %v after %v", ErrInvalidOption, option, b, bounds[i-1])
		}
	}
	return nil
}

// CheckMetricSources returns nil if no element of sources is nil or an
// interface holding a nil pointer, map, slice, channel or function, which
// would fail when first collected. Otherwise it returns, joined with
// errors.Join, an error for each such element, wrapping ErrInvalidOption
// and naming option (as for CheckLatencyBuckets) and the element's index
// from 0:
//
//	ratelimit: invalid option: otellimit: WithSources: source 1 is nil
//
// No sources is not an error. It is safe for concurrent use.
func CheckMetricSources(option string, sources []MetricSource) error {
	var errs []error
	for i, s := range sources {
		if isNil(s) {
			errs = append(errs, fmt.Errorf("%w: %s: source %d is nil", ErrInvalidOption, option, i))
		}
	}
	return errors.Join(errs...)
}

// IsMetricLabel reports whether name is a label of the metrics the
// adapters export: outcome, rule and scope of a Tally's decisions, kind of
// its errors, and the labels the project's MetricSources report (via and
// node of the Redis stores, source of rules.Watcher and adapters/postgres).
// An adapter refuses a constant label by such a name, which would clash
// with the series' own; each source's tests check that it reports no
// other label. It is safe for concurrent use.
func IsMetricLabel(name string) bool {
	switch name {
	case "outcome", "rule", "scope", "kind", "via", "node", "source":
		return true
	}
	return false
}
