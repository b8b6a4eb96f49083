package rules

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/fsnotify/fsnotify"
)

// ErrClosed is returned by Watcher.Reload after Close.
var ErrClosed = errors.New("rules: watcher closed")

// DefaultDebounce is the quiet time a Watcher waits for after a change to
// the file before it reloads, so that a burst of events (an editor's
// write, rename and chmod) costs one reload.
const DefaultDebounce = 100 * time.Millisecond

// WatchOption configures Watch. Options are applied in order; a nil one is
// an error.
type WatchOption interface{ applyWatch(*watchConfig) }

type watchConfig struct {
	logger   *slog.Logger
	debounce time.Duration
	errs     []error
}

type watchOptionFunc func(*watchConfig)

func (f watchOptionFunc) applyWatch(c *watchConfig) { f(c) }

// WithLogger reports every reload, good or bad, to l: a good one at level
// Info with the file and the number of rules, a failed one at level Error
// with the error. The default is no logging; a nil l makes Watch fail with
// an error wrapping core.ErrInvalidOption.
func WithLogger(l *slog.Logger) WatchOption {
	return watchOptionFunc(func(c *watchConfig) {
		if l == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: rules: Watch: WithLogger: nil logger", core.ErrInvalidOption))
			return
		}
		c.logger = l
	})
}

// WithDebounce sets the quiet time after a change before the reload (see
// DefaultDebounce); 0 reloads on every event. A negative d makes Watch fail
// with an error wrapping core.ErrInvalidOption.
func WithDebounce(d time.Duration) WatchOption {
	return watchOptionFunc(func(c *watchConfig) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Errorf("%w: rules: Watch: WithDebounce: must be >= 0, got %v", core.ErrInvalidOption, d))
			return
		}
		c.debounce = d
	})
}

// WatchStats counts a Watcher's reloads, for logs and metrics. The zero
// value is a watcher that has reloaded nothing.
type WatchStats struct {
	Reloads     int64     // reloads that put a new policy in force, the first load not counted
	Failures    int64     // reloads that failed: the file unreadable or invalid, or the policy refused by SetPolicy
	LastError   error     // the error of the last failed reload; nil if none failed
	LastFailure time.Time // when the last reload failed; zero if none did
	LastGood    time.Time // when the policy in force was loaded (by Watch, or by the last good reload)
	Rules       int       // the number of rules of the policy in force
}

// Watcher keeps a limiter's policy in step with a rules file: see Watch.
// Its methods are safe for concurrent use.
type Watcher struct {
	path    string
	limiter *core.Limiter
	log     *slog.Logger
	wait    time.Duration
	fsw     *fsnotify.Watcher
	symlink bool // path was a symbolic link at start: any event in its directory may change it

	reqs     chan chan error
	done     chan struct{} // closed by Close
	exited   chan struct{} // closed when the goroutine returns
	once     sync.Once
	closeErr error

	lastSeen [sha256.Size]byte // the content last loaded, good or bad; goroutine only

	mu    sync.Mutex
	stats WatchStats
}

// Watch loads the rules file at path (see Load), puts its policy in force on
// l with SetPolicy, and then keeps it in force: it reloads the file when it
// changes and on demand (Reload). It watches the file's directory, so that
// an editor's or a deployment's write to a temporary file renamed into
// place is seen, as is a symbolic link switched to another file (a
// Kubernetes ConfigMap). Changes are debounced (WithDebounce); an event that
// leaves the file's content as it was loaded last does nothing.
//
// A file that cannot be read or compiled, or a policy that SetPolicy
// refuses (a middleware's check, see core.Limiter.SetPolicy), keeps the
// policy in force, the last good one: the failure is counted in Stats and
// logged (WithLogger). Watch itself fails when the file is bad at start, as
// it fails for an invalid option, a nil limiter or a directory that cannot
// be watched; nothing is then left running.
//
// Close stops the watching goroutine. Writing the file in place (truncate,
// then write) can show a reload a half-written file, which fails and is
// retried on the next write: renaming a complete file into place never
// does.
func Watch(path string, l *core.Limiter, opts ...WatchOption) (*Watcher, error) {
	cfg := watchConfig{debounce: DefaultDebounce}
	for i, o := range opts {
		if o == nil {
			cfg.errs = append(cfg.errs, fmt.Errorf("%w: rules: Watch: option %d is nil", core.ErrInvalidOption, i))
			continue
		}
		o.applyWatch(&cfg)
	}
	if l == nil {
		cfg.errs = append(cfg.errs, fmt.Errorf("%w: rules: Watch: nil limiter", core.ErrInvalidOption))
	}
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, err
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{
		path: filepath.Clean(path), limiter: l, log: cfg.logger, wait: cfg.debounce,
		reqs: make(chan chan error), done: make(chan struct{}), exited: make(chan struct{}),
	}
	if fi, err := os.Lstat(w.path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		w.symlink = true
	}
	// Watch before the first load, so that no change between the two is
	// missed.
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("rules: Watch: %w", err)
	}
	if err := fsw.Add(filepath.Dir(w.path)); err != nil {
		fsw.Close()
		return nil, fmt.Errorf("rules: Watch: watching the directory of %s: %w", w.path, err)
	}
	w.fsw = fsw
	if err := w.load(true); err != nil {
		fsw.Close()
		return nil, err
	}
	go w.run()
	return w, nil
}

// Reload reads and applies the file now, whether or not it changed, and
// returns what the reload returned: nil when its policy is in force, the
// error otherwise (the last good policy then stays). It waits for a reload
// under way to finish first. After Close it returns ErrClosed.
func (w *Watcher) Reload() error {
	reply := make(chan error, 1)
	select {
	case w.reqs <- reply:
		return <-reply
	case <-w.exited:
		return ErrClosed
	}
}

// Stats returns the reload counters.
func (w *Watcher) Stats() WatchStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Close stops watching and waits for the watching goroutine to return; the
// policy in force stays. It is idempotent and returns the error of
// closing the file system watcher, the first time.
func (w *Watcher) Close() error {
	w.once.Do(func() {
		close(w.done)
		<-w.exited
		w.closeErr = w.fsw.Close()
	})
	return w.closeErr
}

// run is the watching goroutine: every reload happens on it, one at a
// time, so that an older file never replaces a newer one.
func (w *Watcher) run() {
	defer close(w.exited)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-w.done:
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if !w.symlink && filepath.Clean(ev.Name) != w.path {
				continue
			}
			if ev.Op == fsnotify.Chmod {
				continue // no content change
			}
			if w.wait == 0 {
				w.load(false)
			} else {
				timer.Reset(w.wait)
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.log.Warn("rules: watching the file failed; changes may be missed until the next event or Reload", "file", w.path, "error", err)
		case <-timer.C:
			w.load(false)
		case reply := <-w.reqs:
			reply <- w.load(true)
		}
	}
}

// load reads, compiles and applies the file, unless force is false and its
// content is what was loaded last, and records the outcome.
func (w *Watcher) load(force bool) error {
	data, err := os.ReadFile(w.path)
	var p *core.Policy
	if err != nil {
		err = &Error{File: w.path, Err: err, index: -1}
	} else {
		sum := sha256.Sum256(data)
		if !force && sum == w.lastSeen {
			return nil
		}
		w.lastSeen = sum
		if p, err = Parse(w.path, data); err == nil {
			err = w.limiter.SetPolicy(p)
		}
	}
	now := time.Now()
	w.mu.Lock()
	first := w.stats.LastGood.IsZero()
	if err != nil {
		if !first {
			w.stats.Failures++
			w.stats.LastError, w.stats.LastFailure = err, now
		}
	} else {
		if !first {
			w.stats.Reloads++
		}
		w.stats.LastGood, w.stats.Rules = now, len(p.Rules())
	}
	w.mu.Unlock()
	switch {
	case err != nil && !first:
		w.log.Error("rules: reload failed; the last good policy stays in force", "file", w.path, "error", err)
	case err == nil && first:
		w.log.Info("rules: policy loaded", "file", w.path, "rules", len(p.Rules()))
	case err == nil:
		w.log.Info("rules: policy reloaded", "file", w.path, "rules", len(p.Rules()))
	}
	return err
}
