package rules_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/rules"
)

// limitsFile is a one-rule file whose burst tells which version is in
// force.
func limitsFile(burst int) string {
	return fmt.Sprintf("rules:\n  - name: per-user\n    scope: user\n    rate_per_second: 1000000\n    burst_capacity: %d\n", burst)
}

// writeAtomic writes data to a temporary file in path's directory and
// renames it into place, as deployments and many editors do.
func writeAtomic(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// records is a slog.Handler that hands every record to a channel.
type records chan slog.Record

func (r records) Enabled(context.Context, slog.Level) bool { return true }
func (r records) Handle(_ context.Context, rec slog.Record) error {
	r <- rec
	return nil
}
func (r records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r records) WithGroup(string) slog.Handler      { return r }

// next waits for the next log record, at most 5s.
func (r records) next(t *testing.T) slog.Record {
	t.Helper()
	select {
	case rec := <-r:
		return rec
	case <-time.After(5 * time.Second):
		t.Fatal("no log record within 5s")
		return slog.Record{}
	}
}

func attr(rec slog.Record, key string) string {
	var v string
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
		}
		return true
	})
	return v
}

func newLimiter(t *testing.T) *core.Limiter {
	t.Helper()
	p, err := core.NewPolicy()
	if err != nil {
		t.Fatal(err)
	}
	l, err := core.NewLimiter(p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Under load from 64 goroutines deciding continuously, a file renamed
// into place is in force within 1s and no decision fails.
func TestWatchReloadUnderLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.yaml")
	writeAtomic(t, path, limitsFile(1000))
	l := newLimiter(t)
	w, err := rules.Watch(path, l)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Close()

	const workers = 64
	var (
		stop      atomic.Bool
		decisions atomic.Int64
		failures  atomic.Int64
		oldSeen   atomic.Int64
		firstNew  atomic.Int64 // Unix ns of the first decision under the new policy
		started   sync.WaitGroup
		allNew    sync.WaitGroup // every goroutine has decided under the new policy
		newSeen   atomic.Int64
		done      sync.WaitGroup
		sawNew    = make(chan struct{})
		sawOnce   sync.Once
	)
	started.Add(workers)
	allNew.Add(workers)
	done.Add(workers)
	for i := range workers {
		go func() {
			defer done.Done()
			req := core.Request{User: fmt.Sprintf("user-%d", i)}
			first, sawNewHere := true, false
			for !stop.Load() {
				d, err := l.Allow(context.Background(), req)
				decisions.Add(1)
				switch {
				case err != nil:
					failures.Add(1)
				case d.Limit == 2000:
					newSeen.Add(1)
					if !sawNewHere {
						sawNewHere = true
						allNew.Done()
					}
					if firstNew.CompareAndSwap(0, time.Now().UnixNano()) {
						sawOnce.Do(func() { close(sawNew) })
					}
				case d.Limit == 1000:
					oldSeen.Add(1)
				}
				if first {
					first = false
					started.Done()
				}
				// A server's request goroutine gives up its processor
				// between requests (it waits for the network); one that
				// never does would starve every other goroutine of this
				// process, the watcher's and fsnotify's among them, for
				// whole 10ms time slices.
				runtime.Gosched()
			}
		}()
	}
	defer func() { stop.Store(true); done.Wait() }() // also when the test fails
	started.Wait()

	written := time.Now()
	writeAtomic(t, path, limitsFile(2000))
	select {
	case <-sawNew:
	case <-time.After(5 * time.Second):
		t.Fatal("the new policy was not in force within 5s")
	}
	allNew.Wait()
	stop.Store(true)
	done.Wait()

	latency := time.Duration(firstNew.Load() - written.UnixNano())
	t.Logf("reload at %v after the rename", w.Stats().LastGood.Sub(written))
	t.Logf("new policy in force %v after the rename; %d decisions by %d goroutines, %d under the old policy, %d under the new, %d failed",
		latency, decisions.Load(), workers, oldSeen.Load(), newSeen.Load(), failures.Load())
	if latency > time.Second {
		t.Errorf("new policy in force after %v, want within 1s", latency)
	}
	if n := failures.Load(); n != 0 {
		t.Errorf("%d decisions failed, want 0", n)
	}
	if oldSeen.Load() == 0 {
		t.Error("no decision under the old policy: the load did not overlap the reload")
	}
	if s := w.Stats(); s.Reloads != 1 || s.Failures != 0 || s.Rules != 1 {
		t.Errorf("Stats() = %+v, want 1 reload, 0 failures, 1 rule", s)
	}
}

// A bad file keeps the policy in force; the failure is logged and counted;
// Reload applies the file on demand.
func TestWatchBadFileAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.yaml")
	writeAtomic(t, path, limitsFile(1000))
	l := newLimiter(t)
	logs := make(records, 16)
	w, err := rules.Watch(path, l, rules.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Close()
	if rec := logs.next(t); rec.Level != slog.LevelInfo || rec.Message != "rules: policy loaded" {
		t.Errorf("first log %v %q, want INFO policy loaded", rec.Level, rec.Message)
	}
	good := l.Policy()
	start := w.Stats()
	if start.LastGood.IsZero() || start.Rules != 1 || start.Reloads != 0 || start.Failures != 0 {
		t.Errorf("Stats() after Watch = %+v", start)
	}

	// Written in place, not renamed: a write event on the file itself.
	if err := os.WriteFile(path, []byte(limitsFile(0)), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := logs.next(t)
	if rec.Level != slog.LevelError || !strings.Contains(attr(rec, "error"), `rule "per-user": burst_capacity: must be >= 1, got 0`) {
		t.Errorf("log after a bad file: %v %q error=%q, want an ERROR naming the field", rec.Level, rec.Message, attr(rec, "error"))
	}
	s := w.Stats()
	if s.Failures != 1 || s.Reloads != 0 || !errors.Is(s.LastError, core.ErrInvalidBurst) || s.LastFailure.IsZero() || s.LastGood != start.LastGood {
		t.Errorf("Stats() after a bad file = %+v, want 1 failure wrapping ErrInvalidBurst, LastGood unchanged", s)
	}
	if l.Policy() != good {
		t.Error("a bad file replaced the policy in force")
	}
	metrics := map[string]float64{}
	w.CollectMetrics(func(m core.Metric) {
		if len(m.Labels) != 2 || m.Labels[0] != "source" || m.Labels[1] != "file" {
			t.Errorf("metric %s has labels %q, want source=file", m.Name, m.Labels)
		} else if !core.IsMetricLabel(m.Labels[0]) {
			t.Errorf("metric %s has the label %q, which core.IsMetricLabel does not name: the metrics adapters would take it as a constant label", m.Name, m.Labels[0])
		}
		metrics[m.Name] = m.Value
	})
	if metrics["rules_reload_failures_total"] != 1 || metrics["rules_reloads_total"] != 0 || metrics["rules_loaded"] != float64(s.Rules) ||
		metrics["rules_last_success_seconds"] != float64(s.LastGood.UnixNano())/1e9 {
		t.Errorf("CollectMetrics after a bad file = %v, want 1 failure, no reload, the rules and time of the good policy", metrics)
	}

	// Reload on demand reports the same failure.
	if err := w.Reload(); !errors.Is(err, core.ErrInvalidBurst) || !strings.HasPrefix(err.Error(), "rules: "+path+":5: ") {
		t.Errorf("Reload() = %v, want the file:line error", err)
	}
	logs.next(t)
	if s := w.Stats(); s.Failures != 2 {
		t.Errorf("Stats().Failures = %d after Reload, want 2", s.Failures)
	}

	// A policy the limiter refuses is a failure too.
	remove, err := l.AddPolicyCheck(func(p *core.Policy) error {
		for _, r := range p.Rules() {
			if r.Scope == core.ScopeIP {
				return errors.New("no ip scope here")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ipFile := strings.Replace(limitsFile(3000), "scope: user", "scope: ip", 1)
	writeAtomic(t, path, ipFile)
	if rec := logs.next(t); rec.Level != slog.LevelError || !strings.Contains(attr(rec, "error"), "no ip scope here") {
		t.Errorf("log after a refused policy: %v error=%q", rec.Level, attr(rec, "error"))
	}
	if l.Policy() != good {
		t.Error("a refused policy replaced the policy in force")
	}
	remove()

	// Now it is acceptable: Reload applies it at once.
	if err := w.Reload(); err != nil {
		t.Fatalf("Reload() = %v", err)
	}
	if rec := logs.next(t); rec.Level != slog.LevelInfo || rec.Message != "rules: policy reloaded" {
		t.Errorf("log after Reload: %v %q", rec.Level, rec.Message)
	}
	if r := l.Policy().Rules(); len(r) != 1 || r[0].Scope != core.ScopeIP || r[0].Limit.Burst() != 3000 {
		t.Errorf("policy after Reload: %+v", r)
	}
	if s := w.Stats(); s.Reloads != 1 || s.Failures != 3 || s.LastGood == start.LastGood {
		t.Errorf("Stats() after Reload = %+v, want 1 reload, 3 failures", s)
	}
}

// Close stops the goroutine; Reload then fails; Close again is harmless.
func TestWatchClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.yaml")
	writeAtomic(t, path, limitsFile(1000))
	l := newLimiter(t)
	before := runtime.NumGoroutine()
	w, err := rules.Watch(path, l)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
	if err := w.Reload(); !errors.Is(err, rules.ErrClosed) {
		t.Errorf("Reload() after Close = %v, want ErrClosed", err)
	}
	// fsnotify's reader ends once its descriptors are closed: wait for
	// the count to come back, at most 5s.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before Watch:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
	// The policy stays, and later changes are not applied.
	writeAtomic(t, path, limitsFile(2000))
	if b := l.Policy().Rules()[0].Limit.Burst(); b != 1000 {
		t.Errorf("burst %d after Close and a change, want 1000", b)
	}
}

func TestWatchErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	writeAtomic(t, good, limitsFile(10))
	bad := filepath.Join(dir, "bad.yaml")
	writeAtomic(t, bad, limitsFile(0))
	l := newLimiter(t)
	for _, tc := range []struct {
		name string
		path string
		l    *core.Limiter
		opts []rules.WatchOption
		is   error
	}{
		{"bad file", bad, l, nil, core.ErrInvalidBurst},
		{"missing file", filepath.Join(dir, "none.yaml"), l, nil, os.ErrNotExist},
		{"missing directory", filepath.Join(dir, "none", "x.yaml"), l, nil, os.ErrNotExist},
		{"nil limiter", good, nil, nil, core.ErrInvalidOption},
		{"zero limiter", good, &core.Limiter{}, nil, core.ErrNotConstructed},
		{"nil option", good, l, []rules.WatchOption{nil}, core.ErrInvalidOption},
		{"nil logger", good, l, []rules.WatchOption{rules.WithLogger(nil)}, core.ErrInvalidOption},
		{"negative debounce", good, l, []rules.WatchOption{rules.WithDebounce(-time.Second)}, core.ErrInvalidOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := rules.Watch(tc.path, tc.l, tc.opts...)
			if err == nil {
				w.Close()
				t.Fatal("Watch succeeded")
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("Watch() = %v, want %v", err, tc.is)
			}
		})
	}
	if p := l.Policy(); len(p.Rules()) != 0 {
		t.Errorf("a failed Watch changed the policy: %d rules", len(p.Rules()))
	}
}

// With no debounce every event reloads, and an event that leaves the
// content as it was does nothing.
func TestWatchNoDebounce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.yaml")
	writeAtomic(t, path, limitsFile(1000))
	l := newLimiter(t)
	logs := make(records, 16)
	w, err := rules.Watch(path, l, rules.WithDebounce(0), rules.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Close()
	logs.next(t)
	writeAtomic(t, path, limitsFile(1000)) // same content
	writeAtomic(t, path, limitsFile(1500))
	if rec := logs.next(t); rec.Message != "rules: policy reloaded" {
		t.Errorf("log %q", rec.Message)
	}
	if s := w.Stats(); s.Reloads != 1 {
		t.Errorf("Stats().Reloads = %d, want 1: the unchanged rewrite must not count", s.Reloads)
	}
	if b := l.Policy().Rules()[0].Limit.Burst(); b != 1500 {
		t.Errorf("burst %d, want 1500", b)
	}
}
