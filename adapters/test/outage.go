package redistests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// What a Redis outage costs a request, with both stores' defaults: the
// shared pieces of the outage tests (a leak check with a retry window, a
// load of many goroutines recording every decision, latency quantiles),
// RunOutageLatency and RunOpenWhileDown. RunClusterFault is in
// clusterfault.go.

// DefaultBound is both stores' default bound on the whole wait of a Take
// (WithTimeout).
const DefaultBound = 100 * time.Millisecond

// leakWindow is how long CheckLeaks gives goroutines to end: a store's
// background CLUSTER SLOTS refresh ends within its own 1s bound, and the
// clients end their connections' goroutines after Close returns.
const leakWindow = 5 * time.Second

// CheckLeaks fails t if a goroutine started during t still runs once every
// other cleanup of t has run (load stopped, clients closed, servers
// stopped): call it first, so that its cleanup runs last. Goroutines get
// leakWindow to end. redistest forks every redis-server from one goroutine
// locked to its thread for the life of the binary, which is not a leak.
func CheckLeaks(t *testing.T) {
	t.Helper()
	opts := []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/bucketry/ratelimit/internal/proctest.spawnLoop"),
	}
	t.Cleanup(func() {
		// goleak retries for about half a second by itself; the window is
		// longer.
		deadline := time.Now().Add(leakWindow)
		for goleak.Find(opts...) != nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		goleak.VerifyNone(t, opts...)
	})
}

// kind is how one decision of a load went.
type kind uint8

const (
	kindRedis    kind = iota // the store answered: no error, not degraded
	kindDegraded             // the store failed and the failure mode decided
	kindRefused              // degraded because an open breaker refused the call
	kindWrong                // a decision the test did not allow; already reported
)

// sample is one decision of a load, kept small: the workers of a load on an
// open breaker make hundreds of thousands.
type sample struct {
	begin, end time.Duration // since the load began
	key        int32         // the test's index of the request's key
	kind       kind
}

func (s *sample) took() time.Duration { return s.end - s.begin }

// load runs goroutines that each make decisions in a loop until halted, and
// keeps a sample of each.
type load struct {
	origin time.Time
	stop   atomic.Bool
	gate   atomic.Pointer[chan struct{}] // while paused: workers wait for it to close
	busy   atomic.Int64                  // workers in a decision, or about to check the gate
	wg     sync.WaitGroup
	once   sync.Once

	mu      sync.Mutex
	samples []sample
}

// startLoad starts workers goroutines: worker w makes its i-th decision
// with decide(w, i), which returns the key's index and how the decision
// went, then waits pace (none if 0). seen, if not nil, is called on the
// worker with every sample. The load is halted when t ends, if not before.
func startLoad(t testing.TB, workers int, pace time.Duration, decide func(w, i int) (int32, kind), seen func(*sample)) *load {
	l := &load{origin: time.Now()}
	for w := range workers {
		l.wg.Go(func() {
			var mine []sample
			for i := 0; !l.stop.Load(); {
				// busy before the gate: pause sees every decision that did
				// not see the gate.
				l.busy.Add(1)
				if g := l.gate.Load(); g != nil {
					l.busy.Add(-1)
					<-*g
					continue
				}
				s := sample{begin: time.Since(l.origin)}
				s.key, s.kind = decide(w, i)
				s.end = time.Since(l.origin)
				l.busy.Add(-1)
				if seen != nil {
					seen(&s)
				}
				mine = append(mine, s)
				i++
				if pace > 0 {
					time.Sleep(pace)
				}
			}
			l.mu.Lock()
			l.samples = append(l.samples, mine...)
			l.mu.Unlock()
		})
	}
	t.Cleanup(func() { l.halt() })
	return l
}

// now is the time since the load began.
func (l *load) now() time.Duration { return time.Since(l.origin) }

// pause stops new decisions and returns once none is in flight.
func (l *load) pause() {
	g := make(chan struct{})
	l.gate.Store(&g)
	for l.busy.Load() != 0 {
		time.Sleep(time.Millisecond)
	}
}

// resume undoes pause.
func (l *load) resume() {
	if g := l.gate.Swap(nil); g != nil {
		close(*g)
	}
}

// halt stops the workers, waits for them and returns every sample, in no
// particular order. It is idempotent.
func (l *load) halt() []sample {
	l.once.Do(func() {
		l.stop.Store(true)
		l.resume()
		l.wg.Wait()
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.samples
}

// quantiles returns the median, the 99th percentile (nearest rank) and the
// largest of ds, which it sorts; zeros for none.
func quantiles(ds []time.Duration) (p50, p99, largest time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(ds))+0.999999) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return rank(0.5), rank(0.99), ds[len(ds)-1]
}

// ms formats d in milliseconds with one decimal, for the figures' lines.
func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// reporter reports the first max problems (10 if 0) of many, found by a
// load's workers, and counts them all.
type reporter struct {
	t   testing.TB
	max int64
	n   atomic.Int64
}

func (r *reporter) errorf(format string, args ...any) {
	r.t.Helper()
	if n := r.n.Add(1); n <= r.max || (r.max == 0 && n <= 10) {
		r.t.Errorf(format, args...)
	}
}

// The shape of RunOutageLatency's load and its bounds.
const (
	outageWorkers = 16
	// outageRun is how long each outage lasts under load.
	outageRun = 3 * time.Second
	// outageWarm is how many decisions from Redis the load makes before
	// the fault, for the healthy figures.
	outageWarm = 300
	// A store bounds the whole wait of a Take, and a limiter on a
	// standalone server makes one Take per decision (no tier can fail
	// alone, so no second call for the others): a decision waits the
	// bound at most, plus the time to be scheduled again. The slack is for
	// a machine shared with other -race test binaries, where timers fire
	// late: 150ms at the 99th percentile; the slowest decision may take
	// twice the bound and half a second.
	outageP99 = DefaultBound + 150*time.Millisecond
	outageMax = 2*DefaultBound + 500*time.Millisecond
)

// outageRule is RunOutageLatency's rule, generous enough that Redis never
// denies: every decision is from Redis or made by the failure mode.
var outageRule = core.Rule{Name: "outage", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1_000_000), 1_000_000)}

// RunOutageLatency measures what a Redis outage adds to each decision of a
// FailOpen limiter on a store with default options (so the default bound
// and no breaker: the bound alone must keep requests fast), made by
// newStore on a standalone server's address with a client of default
// options (ContextTimeoutEnabled set, for go-redis). Two outages, each on
// a server of its own: "refused", the server killed, its port closed, so
// that every dial is refused; "hangs", the server paused with SIGSTOP, so
// that connections open and nothing answers. outageWorkers goroutines
// decide in a loop, on a few keys, for outageRun into the outage.
//
// It asserts that every decision begun during the outage was made by the
// failure mode (allowed, degraded, with the store's error) and took at
// most outageP99 at the 99th percentile and outageMax at most, that a
// Reset begun then fails within outageMax too, and logs
// one line per outage, "outage latency[name/refused]: p50=... p99=...
// max=...", with the healthy figures before it.
func RunOutageLatency(t *testing.T, name string, newStore func(t testing.TB, addr string) core.Store) {
	for _, how := range []string{"refused", "hangs"} {
		t.Run(how, func(t *testing.T) { testOutage(t, name, how, newStore) })
	}
}

func testOutage(t *testing.T, name, how string, newStore func(t testing.TB, addr string) core.Store) {
	CheckLeaks(t)
	srv := redistest.Standalone(t)
	lim := Limiter(t, Policy(t, outageRule), core.WithStore(newStore(t, srv.Addr)), core.WithFailureMode(core.FailOpen))
	ctx := context.Background()
	const users = 8
	reqs := make([]core.Request, users)
	for i := range reqs {
		reqs[i] = core.Request{User: fmt.Sprintf("user%d", i)}
	}
	if d, err := lim.Allow(ctx, reqs[0]); err != nil || d.Degraded {
		t.Fatalf("Allow before the outage = %s, %v; want a decision from Redis", brief(d), err)
	}

	rep := &reporter{t: t}
	var fromRedisN atomic.Int64
	l := startLoad(t, outageWorkers, 0, func(w, i int) (int32, kind) {
		k := (w + i) % users
		d, err := lim.Allow(ctx, reqs[k])
		switch {
		case err == nil && !d.Degraded && d.Allowed && d.Rule == outageRule.Name:
			return int32(k), kindRedis
		case err == nil && d.Degraded && d.Allowed && d.Err != nil:
			return int32(k), kindDegraded
		}
		rep.errorf("%s: Allow = %s, %v; want allowed, from Redis or degraded by FailOpen", reqs[k].User, brief(d), err)
		return int32(k), kindWrong
	}, func(s *sample) {
		if s.kind == kindRedis {
			fromRedisN.Add(1)
		}
	})

	deadline := time.Now().Add(15 * time.Second)
	for fromRedisN.Load() < outageWarm {
		if time.Now().After(deadline) {
			l.halt()
			t.Fatalf("%d decisions from Redis in 15s before the outage, want %d", fromRedisN.Load(), outageWarm)
		}
		time.Sleep(5 * time.Millisecond)
	}
	faultAt := l.now()
	switch how {
	case "refused":
		srv.Kill()
	case "hangs":
		srv.Pause()
		// Resumed before the server is stopped, even on failure; a second
		// Resume does nothing.
		t.Cleanup(srv.Resume)
	}
	fault := l.now() // the fault is in place
	time.Sleep(outageRun)
	samples := l.halt()
	// An operator's Reset is bounded as a decision is.
	resetStart := time.Now()
	resetErr := lim.Reset(ctx, reqs[0])
	resetTook := time.Since(resetStart)
	if how == "hangs" {
		srv.Resume()
	}
	if resetErr == nil {
		t.Errorf("Reset during the outage = nil, want the store's error")
	}
	if resetTook > outageMax {
		t.Errorf("Reset during the outage took %v, want at most %v", resetTook, outageMax)
	}

	var healthy, outage []time.Duration
	var inOutage, fromRedisInOutage int
	for i := range samples {
		s := &samples[i]
		switch {
		case s.end <= faultAt && s.kind == kindRedis:
			healthy = append(healthy, s.took())
		case s.begin >= fault:
			inOutage++
			outage = append(outage, s.took())
			if s.kind == kindRedis {
				fromRedisInOutage++
			}
		}
	}
	hp50, hp99, hmax := quantiles(healthy)
	p50, p99, largest := quantiles(outage)
	t.Logf("outage latency[%s/%s]: p50=%s p99=%s max=%s over %d decisions by %d goroutines in %v (bound %v, no breaker); healthy p50=%s p99=%s max=%s over %d; a Reset failed in %s",
		name, how, ms(p50), ms(p99), ms(largest), inOutage, outageWorkers, outageRun, DefaultBound, ms(hp50), ms(hp99), ms(hmax), len(healthy), ms(resetTook))
	if inOutage < 2*outageWorkers {
		t.Errorf("%d decisions during the outage, want at least %d", inOutage, 2*outageWorkers)
	}
	if fromRedisInOutage > 0 {
		t.Errorf("%d decisions from Redis during the outage, want none", fromRedisInOutage)
	}
	if p99 > outageP99 {
		t.Errorf("p99 latency during the outage %v, want at most %v (the bound %v and slack)", p99, outageP99, DefaultBound)
	}
	if largest > outageMax {
		t.Errorf("slowest decision during the outage %v, want at most %v", largest, outageMax)
	}
}

// Opened is a store made by Open, as RunOpenWhileDown uses it.
type Opened interface {
	core.Store
	Key(rule, id string) string
	Close() error
}

// openRecovery bounds the time from a restart of the server to the first
// decision from Redis of a store opened while it was down: a store on
// rueidis redials at most every 250ms, go-redis dials on demand; the rest is
// slack for a loaded machine.
const openRecovery = 5 * time.Second

// openPrompt bounds Open while nothing listens at the address: a refused
// dial fails at once, and Open must not wait for Redis.
const openPrompt = 2 * time.Second

// RunOpenWhileDown opens stores with open on the address of a server that
// is down, then restarts it. open makes a store with default options (but
// the prefix, which the test sets). It asserts that Open returns a store
// promptly; that its decisions are made by the failure mode (FailClosed,
// FailOpen) while the server is down; that once the server is back, the
// decisions come from Redis within openRecovery, writing the bucket's key;
// that a second store, closed while the server was down, still fails after
// the restart (Close stopped it from connecting); and that Close returns
// nil and leaves the store failing, every goroutine of its client ended.
func RunOpenWhileDown(t *testing.T, name string, open func(addr, prefix string) (Opened, error)) {
	CheckLeaks(t)
	srv := redistest.Standalone(t)
	addr := srv.Addr
	srv.Kill()

	prefix := NewPrefix()
	start := time.Now()
	st, err := open(addr, prefix)
	took := time.Since(start)
	if err != nil || st == nil {
		t.Fatalf("Open(%s) while the server is down = %v, %v; want a store", addr, st, err)
	}
	t.Cleanup(func() { st.Close() })
	if took > openPrompt {
		t.Errorf("Open while the server is down took %v, want under %v", took, openPrompt)
	}
	closedEarly, err := open(addr, NewPrefix())
	if err != nil {
		t.Fatalf("second Open(%s) while the server is down = %v", addr, err)
	}
	if err := closedEarly.Close(); err != nil {
		t.Errorf("Close of a store whose server is down = %v, want nil", err)
	}

	const burst = 3
	policy := Policy(t, core.Rule{Name: "open", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), burst)})
	closed := Limiter(t, policy, core.WithStore(st), core.WithFailureMode(core.FailClosed))
	lenient := Limiter(t, policy, core.WithStore(st), core.WithFailureMode(core.FailOpen))
	early := Limiter(t, policy, core.WithStore(closedEarly), core.WithFailureMode(core.FailClosed))
	ctx := context.Background()
	req := core.Request{User: "u"}
	checkClosed := func(what string, d core.Decision, err error) {
		t.Helper()
		if !errors.Is(err, core.ErrUnavailable) || d.Allowed || d.Reason != core.ReasonUnavailable || !d.Degraded || d.Err == nil || d.RetryAfter <= 0 {
			t.Errorf("%s: FailClosed Allow = %s, %v; want a degraded denial wrapping ErrUnavailable", what, brief(d), err)
		}
	}
	for i := range 3 {
		d, err := closed.Allow(ctx, req)
		checkClosed(fmt.Sprintf("down #%d", i), d, err)
		if d, err := lenient.Allow(ctx, req); err != nil || !d.Allowed || !d.Degraded || d.Err == nil {
			t.Errorf("down #%d: FailOpen Allow = %s, %v; want allowed and degraded", i, brief(d), err)
		}
		if i == 0 {
			t.Logf("while down: %v", d.Err)
		}
	}

	srv.Restart(t)
	restarted := time.Now()
	var (
		d        core.Decision
		failures int
	)
	for {
		d, err = closed.Allow(ctx, req)
		if err == nil && !d.Degraded {
			break
		}
		checkClosed("after the restart", d, err)
		failures++
		if time.Since(restarted) > openRecovery {
			t.Fatalf("no decision from Redis %v after the restart (%d failed): last %s, %v", openRecovery, failures, brief(d), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	recovery := time.Since(restarted)
	if !d.Allowed || d.Rule != "open" || d.Limit != burst || d.Remaining != burst-1 || d.At.IsZero() {
		t.Errorf("first decision from Redis = %s; want the first of the burst, %d remaining, at the server's time", brief(d), burst-1)
	}
	key := st.Key("open", req.User)
	if n, err := srv.Do("EXISTS", key); err != nil || n != int64(1) {
		t.Errorf("EXISTS %s = %v, %v; want 1: the decision was not written to Redis", key, n, err)
	}

	d, err = early.Allow(ctx, req)
	checkClosed("store closed while the server was down, after the restart", d, err)

	if err := st.Close(); err != nil {
		t.Errorf("Close = %v, want nil", err)
	}
	d, err = closed.Allow(ctx, req)
	checkClosed("after Close", d, err)
	t.Logf("open while down[%s]: Open took %s; from Redis %s after the restart (%d degraded decisions in between); after Close: %v",
		name, ms(took), ms(recovery), failures, d.Err)
}

// raiseTo sets *a to v if v is larger.
func raiseTo(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if old >= v || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// RunOpenRequireRedis checks WithRequireRedis: open (a store's Open on
// addr with WithRequireRedis and a prefix of its own) fails with an error
// wrapping core.ErrUnavailable, within about a second, while nothing
// listens at addr, and returns a working store once the server is up.
func RunOpenRequireRedis[S interface {
	core.Store
	Close() error
}](t *testing.T, open func(addr string) (S, error)) {
	CheckLeaks(t)
	srv := redistest.Standalone(t)
	srv.Kill()
	start := time.Now()
	s, err := open(srv.Addr)
	took := time.Since(start)
	if err == nil || !errors.Is(err, core.ErrUnavailable) || errors.Is(err, core.ErrInvalidOption) {
		t.Fatalf("Open(%s, WithRequireRedis()) while the server is down = %v, %v; want an error wrapping core.ErrUnavailable", srv.Addr, s, err)
	}
	// Redis gets max(bound, 1s) to answer; the rest is slack.
	if took > 3*time.Second {
		t.Errorf("Open(WithRequireRedis()) took %v to fail, want about a second at most", took)
	}
	t.Logf("Open(WithRequireRedis()) failed after %v: %v", took.Round(time.Millisecond), err)

	srv.Restart(t)
	s, err = open(srv.Addr)
	if err != nil {
		t.Fatalf("Open(WithRequireRedis()) with the server up = %v", err)
	}
	defer s.Close()
	lim := Limiter(t, Policy(t, core.Rule{Name: "req", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 2)}),
		core.WithStore(s), core.WithFailureMode(core.FailClosed))
	if d, err := lim.Allow(context.Background(), core.Request{User: "u"}); err != nil || d.Degraded || !d.Allowed || d.Remaining != 1 {
		t.Errorf("Allow = %+v, %v; want the first of 2 tokens, from Redis", d, err)
	}
}

// WantInvalid fails t unless a constructor returned no store (built is
// false) and an error wrapping core.ErrInvalidOption that says every string
// of want and none of not.
func WantInvalid(t *testing.T, built bool, err error, want, not []string) {
	t.Helper()
	if built || !errors.Is(err, core.ErrInvalidOption) {
		t.Fatalf("Open = store %v, %v; want no store and an error wrapping core.ErrInvalidOption", built, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Open = %v, want it to say %q", err, w)
		}
	}
	for _, n := range not {
		if strings.Contains(err.Error(), n) {
			t.Errorf("Open = %v, want it not to say %q", err, n)
		}
	}
}
