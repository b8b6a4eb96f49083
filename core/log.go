package core

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// LogInterval is how often a LogThrottle made by the limiter lets a record
// of one kind through.
const LogInterval = 10 * time.Second

// LogThrottle logs through a *slog.Logger at most one record per key every
// interval, so that an outage cannot flood the log: the first record of a
// key goes out at once, those that follow within the interval are counted,
// and the next one to go out carries the count as the attribute
// "suppressed". Make one with NewLogThrottle; it is safe for concurrent use.
// A nil *LogThrottle logs nothing.
type LogThrottle struct {
	logger   *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	keys map[string]*logKey
}

type logKey struct {
	next       time.Time // the first instant the next record may go out
	suppressed int64
}

// NewLogThrottle returns a LogThrottle on logger letting one record per key
// through every interval; it returns nil, which logs nothing, for a nil
// logger. An interval <= 0 lets every record through.
func NewLogThrottle(logger *slog.Logger, interval time.Duration) *LogThrottle {
	if logger == nil {
		return nil
	}
	return &LogThrottle{logger: logger, interval: interval, now: time.Now, keys: make(map[string]*logKey)}
}

// Slog returns the logger t writes to, nil for a nil t.
func (t *LogThrottle) Slog() *slog.Logger {
	if t == nil {
		return nil
	}
	return t.logger
}

// Log writes a record of msg at level with attrs, unless a record of the
// same key went out less than the interval ago (then it is counted). It
// reports whether the record went out.
func (t *LogThrottle) Log(ctx context.Context, level slog.Level, key, msg string, attrs ...slog.Attr) bool {
	if t == nil || !t.logger.Enabled(ctx, level) {
		return false
	}
	now := t.now()
	t.mu.Lock()
	k := t.keys[key]
	if k == nil {
		if len(t.keys) >= maxLogKeys {
			t.sweep(now)
		}
		k = &logKey{}
		t.keys[key] = k
	}
	if now.Before(k.next) {
		k.suppressed++
		t.mu.Unlock()
		return false
	}
	suppressed := k.suppressed
	k.next, k.suppressed = now.Add(t.interval), 0
	t.mu.Unlock()
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	t.logger.LogAttrs(ctx, level, msg, attrs...)
	return true
}

// maxLogKeys bounds the keys a LogThrottle remembers: keys are kinds of
// events, a handful, but a caller that puts unbounded text in them must not
// grow memory without bound.
const maxLogKeys = 1024

// sweep drops keys whose interval has passed and that counted nothing; if
// that frees nothing, it forgets every key. t.mu is held.
func (t *LogThrottle) sweep(now time.Time) {
	for key, k := range t.keys {
		if !now.Before(k.next) && k.suppressed == 0 {
			delete(t.keys, key)
		}
	}
	if len(t.keys) >= maxLogKeys {
		clear(t.keys)
	}
}

// ErrorKind names the kind of a store or decision error for logs and
// metric labels, from a small fixed set: "breaker_open" (a circuit breaker
// refused the call), "timeout" (the call ran out of its bound), "canceled"
// (the caller's context ended), "partial" (some tiers' buckets failed),
// "invalid_input" (a cost, key, time or plan no configuration makes valid),
// "not_constructed", "unavailable" (any other store failure), and "" for a
// nil err.
func ErrorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrBreakerOpen):
		return "breaker_open"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidCost), errors.Is(err, ErrInvalidTime):
		return "invalid_input"
	case errors.Is(err, ErrNotConstructed):
		return "not_constructed"
	}
	if walkErr(err, func(e error) bool { _, ok := e.(*PartialError); return ok }) {
		return "partial" // walkErr, not errors.As: no allocation
	}
	return "unavailable"
}
