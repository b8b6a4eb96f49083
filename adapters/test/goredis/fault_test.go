package goredis_test

// Fault injection: real redis-server processes killed, restarted, flushed
// and resharded under load, and a fake RESP server (redistests.FakeServer)
// for what a real server never does (garbage replies, no reply at all).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/bucketry/ratelimit/adapters/goredis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// frozenAt is the instant of every frozen client clock: with no time
// passing, no token is ever refilled, so admissions can be counted exactly.
var frozenAt = redistests.T0

// faultLeakOptions are the goleak options of these tests: redistest forks
// every redis-server from one goroutine locked to its thread for the life of
// the binary (see its proc_linux.go), which is not a leak.
func faultLeakOptions(extra ...goleak.Option) []goleak.Option {
	return append([]goleak.Option{
		goleak.IgnoreAnyFunction("github.com/bucketry/ratelimit/internal/proctest.spawnLoop"),
	}, extra...)
}

// checkFaultLeaks fails t if a goroutine started during t still runs once
// every other cleanup of t has run (clients closed, load stopped, servers
// stopped): registered first, it runs last. (The package's TestMain lives
// in bench_test.go, so goleak runs per test rather than in VerifyTestMain.)
func checkFaultLeaks(t *testing.T) {
	t.Helper()
	opts := faultLeakOptions(goleak.IgnoreCurrent())
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

func faultClient(t testing.TB, o *redis.Options) *redis.Client {
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

func faultClusterClient(t testing.TB, o *redis.ClusterOptions) *redis.ClusterClient {
	c := redis.NewClusterClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// redisDo sends one command to srv behind the client's back and fails t on an
// error reply.
func redisDo(t testing.TB, srv *redistest.Server, args ...string) any {
	t.Helper()
	v, err := srv.Do(args...)
	if err != nil {
		t.Fatalf("%s: %s: %v", srv.Addr, strings.Join(args, " "), err)
	}
	return v
}

// The timeouts of a faultOptions client: short, but not so short that a
// machine shared with other -race test binaries trips them all the time. A
// dial to a dead loopback port is refused at once; the dial timeout only
// matters under load.
const (
	faultIOTimeout   = 300 * time.Millisecond // read, write, waiting for a pooled connection
	faultDialTimeout = 500 * time.Millisecond
)

// faultOptions are client options for a server that is about to die: every
// wait is bounded and nothing is retried, so a decision cannot hang on a
// dead server.
func faultOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           faultDialTimeout,
		ReadTimeout:           faultIOTimeout,
		WriteTimeout:          faultIOTimeout,
		PoolTimeout:           faultIOTimeout,
		// -1, not 0: go-redis reads 0 as its default of 3 retries.
		MaxRetries:    -1,
		DialerRetries: 1,
	}
}

// faultMaxLatency bounds one decision on a faultOptions client. One script
// call waits at most for a pooled connection, a dial, and three writes and
// reads (HELLO, the connection setup, the script itself): 2.6s. A batched
// request may wait for the call in flight before its own: twice that. The
// rest is slack for a loaded machine, where timeouts fire late.
const faultMaxLatency = 2*(faultIOTimeout+faultDialTimeout+6*faultIOTimeout) + 1800*time.Millisecond

// faultOutcome is one decision made under load.
type faultOutcome struct {
	worker     int
	start, end int32 // the load's phase when the request started and when it returned
	begin      time.Time
	took       time.Duration
	d          core.Decision
	err        error
	panicked   string // the panic and its stack, if do panicked
}

func (o *faultOutcome) ok() bool { return o.err == nil && !o.d.Degraded }

// faultLoad runs workers that each call do in a loop until halted, and
// hands every outcome to the test goroutine through out. The test goroutine
// moves phase forwards as it injects faults, so each outcome says which fault
// it saw.
type faultLoad struct {
	phase    atomic.Int32
	stop     atomic.Bool
	out      chan faultOutcome
	finished chan struct{}
	once     sync.Once
	rest     []faultOutcome
}

func startFaultLoad(t *testing.T, workers int, do func(w int) (core.Decision, error)) *faultLoad {
	// Buffered, so that the test goroutine can block for a moment (in Kill,
	// Restart or a command to a server) without stalling the workers, but
	// not so deeply that fast failures pile up faster than they are read.
	l := &faultLoad{out: make(chan faultOutcome, 1024), finished: make(chan struct{})}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for !l.stop.Load() {
				o := faultOutcome{worker: w, start: l.phase.Load(), begin: time.Now()}
				func() {
					defer func() {
						if r := recover(); r != nil {
							o.panicked = fmt.Sprintf("%v\n%s", r, debug.Stack())
						}
					}()
					o.d, o.err = do(w)
				}()
				o.took = time.Since(o.begin)
				o.end = l.phase.Load()
				l.out <- o
			}
		})
	}
	go func() {
		wg.Wait()
		close(l.finished)
	}()
	t.Cleanup(func() { l.halt() })
	return l
}

// halt stops the workers, waits for them and returns the outcomes not yet
// received. It is idempotent.
func (l *faultLoad) halt() []faultOutcome {
	l.once.Do(func() {
		l.stop.Store(true)
		for {
			select {
			case o := <-l.out:
				l.rest = append(l.rest, o)
			case <-l.finished:
				for {
					select {
					case o := <-l.out:
						l.rest = append(l.rest, o)
					default:
						return
					}
				}
			}
		}
	})
	return l.rest
}

// await receives outcomes into *all until n of them satisfy cond, failing t
// at deadline.
func (l *faultLoad) await(t *testing.T, all *[]faultOutcome, deadline time.Time, what string, n int, cond func(*faultOutcome) bool) {
	t.Helper()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for got := 0; got < n; {
		select {
		case o := <-l.out:
			*all = append(*all, o)
			if o.panicked != "" {
				l.halt()
				t.Fatalf("a decision panicked: %s", o.panicked)
			}
			if cond(&(*all)[len(*all)-1]) {
				got++
			}
		case <-timer.C:
			*all = append(*all, l.halt()...)
			t.Fatalf("waiting for %s: %d of %d by the deadline, %d decisions in all", what, got, n, len(*all))
		}
	}
}

// The phases of TestFaultKillMidLoad.
const (
	killUp         int32 = iota // the server runs
	killDown                    // Kill has returned: the server is dead
	killRestarting              // Restart is about to be called
	killBack                    // Restart has returned: the server answers, empty
)

// TestFaultKillMidLoad kills the server with SIGKILL under load, restarts it,
// and checks that every decision made while it was dead followed the
// limiter's failure mode, that none hung past the client's timeouts, and that
// decisions come from Redis again soon after the restart.
func TestFaultKillMidLoad(t *testing.T) {
	for _, tc := range []struct {
		mode    core.FailureMode
		breaker bool
	}{
		{core.FailOpen, false},
		{core.FailClosed, false},
		{core.FailFallback, false},
		{core.FailOpen, true},
		{core.FailClosed, true},
		{core.FailFallback, true},
	} {
		name := tc.mode.String()
		if tc.breaker {
			name += "+breaker"
		}
		t.Run(name, func(t *testing.T) { testKillMidLoad(t, tc.mode, tc.breaker) })
	}
}

func testKillMidLoad(t *testing.T, mode core.FailureMode, withBreaker bool) {
	checkFaultLeaks(t)
	srv := redistest.Standalone(t)
	var storeOpts []goredis.Option
	var logs lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	if withBreaker {
		storeOpts = append(storeOpts, goredis.WithBreaker(3, 50*time.Millisecond), goredis.WithLogger(logger))
	}
	store := mustStore(t, faultClient(t, faultOptions(srv.Addr)), storeOpts...)
	// One token an hour: nothing refills during the test, so the fallback's
	// admissions can be counted against the burst.
	const burst, users, workers = 20, 4, 16
	policy := redistests.Policy(t, core.Rule{Name: "kill", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), burst)})
	lim := redistests.Limiter(t, policy, core.WithStore(store), core.WithFailureMode(mode), core.WithLogger(logger))
	reqs := make([]core.Request, users)
	for i := range reqs {
		reqs[i] = core.Request{User: "user" + strconv.Itoa(i)}
	}
	ctx := context.Background()
	l := startFaultLoad(t, workers, func(w int) (core.Decision, error) { return lim.Allow(ctx, reqs[w%users]) })

	deadline := time.Now().Add(40 * time.Second)
	var all []faultOutcome
	l.await(t, &all, deadline, "decisions from Redis before the kill", 200, (*faultOutcome).ok)
	srv.Kill()
	l.phase.Store(killDown)
	l.await(t, &all, deadline, "decisions wholly during the outage", 400, func(o *faultOutcome) bool {
		return o.start == killDown && o.end == killDown
	})
	l.phase.Store(killRestarting)
	srv.Restart(t)
	restarted := time.Now()
	l.phase.Store(killBack)
	var recovered time.Time
	l.await(t, &all, deadline, "decisions from Redis after the restart", 100, func(o *faultOutcome) bool {
		if o.start != killBack || !o.ok() {
			return false
		}
		if end := o.begin.Add(o.took); recovered.IsZero() || end.Before(recovered) {
			recovered = end
		}
		return true
	})
	all = append(all, l.halt()...)

	var (
		outage, degraded, breakerOpen, failedAfterRestart int
		maxTook                                           time.Duration
		fallbackAllowed, fallbackSeen                     [users]int
		bad                                               int
	)
	report := func(o *faultOutcome, format string, args ...any) {
		if bad++; bad <= 10 {
			t.Errorf("worker %d, phase %d to %d: %s (decision %+v, err %v)", o.worker, o.start, o.end,
				fmt.Sprintf(format, args...), o.d, o.err)
		}
	}
	for i := range all {
		o := &all[i]
		if o.panicked != "" {
			t.Fatalf("a decision panicked: %s", o.panicked)
		}
		maxTook = max(maxTook, o.took)
		if o.took > faultMaxLatency {
			report(o, "took %v, more than %v", o.took, faultMaxLatency)
		}
		inOutage := o.start == killDown && o.end == killDown
		if inOutage {
			outage++
		}
		if o.ok() {
			if inOutage {
				report(o, "decided by Redis while it was dead")
			}
			if o.d.Err != nil || o.d.Rule != "kill" || o.d.Limit != burst {
				report(o, "a decision from Redis is not the rule's")
			}
			continue
		}
		degraded++
		if o.start == killBack {
			failedAfterRestart++
		}
		if errors.Is(o.d.Err, core.ErrBreakerOpen) {
			breakerOpen++
		}
		switch mode {
		case core.FailOpen:
			if o.err != nil || !o.d.Allowed || !o.d.Degraded || o.d.Err == nil || o.d.Reason != core.ReasonNone {
				report(o, "want allowed, degraded, Err set and no error")
			}
		case core.FailClosed:
			if !errors.Is(o.err, core.ErrUnavailable) || o.d.Allowed || o.d.Reason != core.ReasonUnavailable ||
				!o.d.Degraded || o.d.Err == nil || o.d.RetryAfter <= 0 {
				report(o, "want an error wrapping ErrUnavailable and a degraded denial for ReasonUnavailable")
			}
			if errors.Is(o.d.Err, core.ErrBreakerOpen) && !errors.Is(o.err, core.ErrBreakerOpen) {
				report(o, "the breaker was open but the error does not say so")
			}
		case core.FailFallback:
			if o.err != nil || !o.d.Degraded || o.d.Err == nil || o.d.Rule != "kill" || o.d.Limit != burst ||
				o.d.Allowed != (o.d.Reason == core.ReasonNone) || (!o.d.Allowed && o.d.Reason != core.ReasonLimited) {
				report(o, "want a degraded decision of the fallback, with the rule's limit and Err set")
			}
			u := o.worker % users
			fallbackSeen[u]++
			if o.d.Allowed {
				fallbackAllowed[u]++
			}
		}
	}
	if withBreaker && breakerOpen == 0 {
		t.Errorf("the breaker never opened during the outage (%d degraded decisions)", degraded)
	}
	// The outage is in the log: the limiter's store failures, and the
	// breaker opening, probing and closing again once Redis is back; each
	// throttled, so a handful of records for thousands of failures.
	records := logs.records(t)
	want := []string{`"msg":"ratelimit: store failure"`}
	if withBreaker {
		want = append(want, `"msg":"ratelimit: redis: circuit breaker open"`, `"state":"half_open"`, `"msg":"ratelimit: redis: circuit breaker closed"`)
	}
	for _, w := range want {
		if !slices.ContainsFunc(records, func(r string) bool { return strings.Contains(r, w) }) {
			t.Errorf("no log record with %s in %d records:\n%s", w, len(records), strings.Join(records, "\n"))
		}
	}
	if len(records) > 50 {
		t.Errorf("%d log records for one outage: the throttle should keep them to a handful", len(records))
	}
	if !withBreaker && breakerOpen > 0 {
		t.Errorf("%d decisions report an open breaker, but the limiter has none", breakerOpen)
	}
	if mode == core.FailFallback {
		for u := range users {
			// The fallback's buckets start full and never refill.
			if fallbackAllowed[u] > burst || (fallbackSeen[u] > burst && fallbackAllowed[u] != burst) {
				t.Errorf("user%d: the fallback admitted %d of %d, want min(burst %d, decisions)", u, fallbackAllowed[u], fallbackSeen[u], burst)
			}
		}
	}
	recovery := recovered.Sub(restarted)
	// Once PoolSize dials in a row failed, go-redis fails fast and probes the
	// address once a second; the breaker's cooldown is 50ms. So recovery
	// takes about a second on an idle machine; on one shared with other
	// -race test binaries, timeouts fire and each failed probe costs another
	// second.
	if recovery > 15*time.Second {
		t.Errorf("first decision from Redis %v after the restart, want within 15s", recovery)
	}
	// The breaker's final state is not asserted: on a loaded machine a
	// read timeout after the recovery may open it again, rightly.
	t.Logf("%d decisions: %d wholly during the outage, %d degraded (%d with the breaker open, %d started after the restart); slowest %v; recovered %v after the restart; fallback admitted %v; breaker %v",
		len(all), outage, degraded, breakerOpen, failedAfterRestart, maxTook, recovery.Round(time.Millisecond), fallbackAllowed, store.BreakerStates())
}

// flushAllScripts sends SCRIPT FLUSH to every server and, with check, makes
// sure the script is gone (only without load: the load would reload it).
func flushAllScripts(t *testing.T, servers []*redistest.Server, check bool) {
	t.Helper()
	for _, s := range servers {
		redisDo(t, s, "SCRIPT", "FLUSH")
		if !check {
			continue
		}
		if v := redisDo(t, s, "SCRIPT", "EXISTS", redisscript.SHA()); !slices.Equal(v.([]any), []any{int64(0)}) {
			t.Fatalf("%s: SCRIPT EXISTS after SCRIPT FLUSH = %v, want [0]", s.Addr, v)
		}
	}
}

// TestFaultScriptFlush flushes the scripts mid-run: the store reloads the
// script (Stats().Reloads grows) and decides exactly as before, on the
// single-slot path (batched) and, in Cluster, on the pipelined multi-slot
// path.
func TestFaultScriptFlush(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		checkFaultLeaks(t)
		srv := redistest.Standalone(t)
		client := faultClient(t, &redis.Options{ContextTimeoutEnabled: true, Addr: srv.Addr})
		servers := []*redistest.Server{srv}
		t.Run("sequential", func(t *testing.T) { testFlushSequential(t, client, servers) })
		t.Run("concurrent", func(t *testing.T) { testFlushConcurrent(t, client, servers) })
	})
	t.Run("cluster", func(t *testing.T) {
		checkFaultLeaks(t)
		cl := redistest.Cluster(t)
		client := faultClusterClient(t, &redis.ClusterOptions{ContextTimeoutEnabled: true, Addrs: cl.Addrs()})
		t.Run("sequential", func(t *testing.T) { testFlushSequential(t, client, cl.Masters) })
		t.Run("concurrent", func(t *testing.T) { testFlushConcurrent(t, client, cl.Masters) })
		t.Run("multi-slot", func(t *testing.T) { testFlushMultiSlot(t, client, cl) })
	})
}

// testFlushSequential takes one at a time from one bucket, flushing the
// scripts after a few decisions.
func testFlushSequential(t *testing.T, client redis.UniversalClient, servers []*redistest.Server) {
	const burst = 10
	store := mustStore(t, client, goredis.WithClientClock(core.NewManualClock(frozenAt)))
	lim := redistests.Limiter(t, redistests.Policy(t, core.Rule{Name: "flush", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), burst)}),
		core.WithStore(store), core.WithFailureMode(core.FailClosed))
	req := core.Request{User: "alice"}
	ctx := context.Background()
	admitted := 0
	for i := range 2 * burst {
		var before int64
		if i == 3 {
			before = store.Stats().Reloads
			flushAllScripts(t, servers, true)
		}
		d, err := lim.Allow(ctx, req)
		if err != nil {
			t.Fatalf("Allow #%d: %v", i, err)
		}
		if i == 3 {
			if got := store.Stats().Reloads; got != before+1 {
				t.Errorf("Stats().Reloads = %d after SCRIPT FLUSH, want %d", got, before+1)
			}
		}
		wantAllowed := i < burst
		wantRemaining := int64(max(burst-1-i, 0))
		if d.Allowed != wantAllowed || d.Remaining != wantRemaining || d.Degraded ||
			(!wantAllowed && (d.Reason != core.ReasonLimited || d.RetryAfter <= 0)) {
			t.Errorf("Allow #%d = %+v, want Allowed %v, Remaining %d", i, d, wantAllowed, wantRemaining)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != burst {
		t.Errorf("admitted %d of %d, want the burst %d", admitted, 2*burst, burst)
	}
}

// testFlushConcurrent takes from one bucket with many goroutines and flushes
// the scripts while they run.
func testFlushConcurrent(t *testing.T, client redis.UniversalClient, servers []*redistest.Server) {
	const burst, workers = 300, 16
	store := mustStore(t, client, goredis.WithClientClock(core.NewManualClock(frozenAt)))
	lim := redistests.Limiter(t, redistests.Policy(t, core.Rule{Name: "flush", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), burst)}),
		core.WithStore(store), core.WithFailureMode(core.FailClosed))
	ctx := context.Background()
	req := core.Request{User: "bob"}
	l := startFaultLoad(t, workers, func(int) (core.Decision, error) { return lim.Allow(ctx, req) })
	deadline := time.Now().Add(15 * time.Second)
	var all []faultOutcome
	l.await(t, &all, deadline, "admissions before the flush", 50, func(o *faultOutcome) bool { return o.ok() && o.d.Allowed })
	before := store.Stats().Reloads
	flushAllScripts(t, servers, false)
	l.phase.Store(1)
	l.await(t, &all, deadline, "a denial after the flush", 1, func(o *faultOutcome) bool { return o.start == 1 && o.ok() && !o.d.Allowed })
	all = append(all, l.halt()...)
	admitted, failed, afterFlush := 0, 0, 0
	for i := range all {
		o := &all[i]
		switch {
		case !o.ok():
			if failed++; failed <= 5 {
				t.Errorf("decision failed: %v (%+v)", o.err, o.d)
			}
		case o.d.Allowed:
			admitted++
			if o.start == 1 {
				afterFlush++
			}
		}
	}
	if admitted != burst {
		t.Errorf("admitted %d of %d, want the burst %d", admitted, len(all), burst)
	}
	// One batcher per slot: one call in flight at a time, so exactly one
	// call meets the flushed server.
	if got := store.Stats().Reloads; got != before+1 {
		t.Errorf("Stats().Reloads = %d after SCRIPT FLUSH, want %d", got, before+1)
	}
	t.Logf("%d decisions, %d admitted (%d after the flush), %d failed", len(all), admitted, afterFlush, failed)
}

// rulesInDistinctMasters returns n rule names whose bucket keys for id lie in hash slots
// owned by n different masters.
func rulesInDistinctMasters(t *testing.T, store *goredis.Store, cl *redistest.ClusterServer, id string, n int) []string {
	t.Helper()
	var names []string
	owners := map[*redistest.Server]bool{}
	for i := 0; len(names) < n && i < 1000; i++ {
		name := "tier" + strconv.Itoa(i)
		key := store.Key(name, id)
		slot := redistest.KeySlot(key)
		if got := redisscript.Slot(key); got != slot {
			t.Fatalf("redisscript.Slot(%q) = %d, redistest.KeySlot = %d", key, got, slot)
		}
		owner := cl.SlotOwner(slot)
		if owner == nil {
			t.Fatalf("slot %d of %q has no owner", slot, key)
		}
		if !owners[owner] {
			owners[owner] = true
			names = append(names, name)
		}
	}
	if len(names) < n {
		t.Fatalf("found %d rules in distinct masters' slots, want %d", len(names), n)
	}
	return names
}

// testFlushMultiSlot takes from three buckets in three slots on three masters,
// one pipelined round trip per take, flushing every master's scripts after a
// few decisions. Every slot group reloads the script, the denials refund the
// other groups, and the counts stay exact.
func testFlushMultiSlot(t *testing.T, client redis.UniversalClient, cl *redistest.ClusterServer) {
	store := mustStore(t, client, goredis.WithClientClock(core.NewManualClock(frozenAt)))
	const id = "carol"
	names := rulesInDistinctMasters(t, store, cl, id, 3)
	bursts := []int64{5, 8, 12}
	var rules []core.Rule
	for i, name := range names {
		rules = append(rules, core.Rule{Name: name, Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), bursts[i])})
	}
	lim := redistests.Limiter(t, redistests.Policy(t, rules...), core.WithStore(store), core.WithFailureMode(core.FailClosed))
	req := core.Request{User: id}
	ctx := context.Background()
	admitted, denied := 0, 0
	refunds := store.Stats().Refunds
	for i := range 10 {
		var before int64
		if i == 2 {
			before = store.Stats().Reloads
			flushAllScripts(t, cl.Masters, true)
		}
		d, err := lim.Allow(ctx, req)
		if err != nil {
			t.Fatalf("Allow #%d: %v", i, err)
		}
		if i == 2 {
			if got := store.Stats().Reloads; got != before+int64(len(names)) {
				t.Errorf("Stats().Reloads = %d after SCRIPT FLUSH on every master, want %d (one per slot group)", got, before+int64(len(names)))
			}
		}
		wantAllowed := i < int(bursts[0])
		if d.Allowed != wantAllowed || d.Degraded || d.Rule != names[0] || d.Remaining != max(bursts[0]-1-int64(i), 0) {
			t.Errorf("Allow #%d = %+v, want Allowed %v decided by %s with Remaining %d", i, d, wantAllowed, names[0], max(bursts[0]-1-int64(i), 0))
		}
		if d.Allowed {
			admitted++
		} else {
			denied++
		}
	}
	if admitted != int(bursts[0]) {
		t.Errorf("admitted %d, want the smallest burst %d", admitted, bursts[0])
	}
	// Each denial was decided by the first tier after the two others took
	// their token: both are given back.
	if got := store.Stats().Refunds - refunds; got != int64(2*denied) {
		t.Errorf("Stats().Refunds grew by %d over %d denials, want %d", got, denied, 2*denied)
	}
	d, err := lim.AllowN(ctx, req, 0)
	if err != nil {
		t.Fatalf("AllowN(0): %v", err)
	}
	for i, ts := range d.Tiers() {
		if want := bursts[i] - bursts[0]; ts.Remaining != want {
			t.Errorf("tier %s: Remaining = %d, want %d (nothing kept from the denials)", ts.Rule.Name, ts.Remaining, want)
		}
	}
}

// TestFaultClusterSlotMigration moves the slot of a hot bucket to another
// master while many goroutines take from it: IMPORTING and MIGRATING, then
// MIGRATE of the key (the client follows ASK), then SETSLOT NODE everywhere
// (MOVED). The bucket never admits more than its burst, and all of it once
// enough requests were made.
func TestFaultClusterSlotMigration(t *testing.T) {
	checkFaultLeaks(t)
	cl := redistest.Cluster(t)
	client := faultClusterClient(t, &redis.ClusterOptions{ContextTimeoutEnabled: true, Addrs: cl.Addrs(), MaxRedirects: 8})
	store := mustStore(t, client, goredis.WithClientClock(core.NewManualClock(frozenAt)))
	// One token an hour and a frozen clock: nothing refills, and the key's
	// TTL (the time to refill) is hours.
	const burst, workers = 2000, 16
	lim := redistests.Limiter(t, redistests.Policy(t, core.Rule{Name: "hot", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerHour(1), burst)}),
		core.WithStore(store), core.WithFailureMode(core.FailClosed))
	key := store.Key("hot", "*")
	slot := redistest.KeySlot(key)
	if got := redisscript.Slot(key); got != slot {
		t.Fatalf("redisscript.Slot(%q) = %d, redistest.KeySlot = %d", key, got, slot)
	}
	source := cl.SlotOwner(slot)
	if source == nil {
		t.Fatalf("slot %d has no owner", slot)
	}
	var target *redistest.Server
	for _, m := range cl.Masters {
		if m != source {
			target = m
			break
		}
	}
	sourceID, _ := redisDo(t, source, "CLUSTER", "MYID").(string)
	targetID, _ := redisDo(t, target, "CLUSTER", "MYID").(string)
	slotArg := strconv.Itoa(slot)

	const (
		before    int32 = iota // the source owns the slot
		migrating              // IMPORTING and MIGRATING are set; the key is on the source
		moved                  // the key is on the target; the source answers ASK
		after                  // the target owns the slot
	)
	ctx := context.Background()
	l := startFaultLoad(t, workers, func(int) (core.Decision, error) { return lim.Allow(ctx, core.Request{}) })
	deadline := time.Now().Add(25 * time.Second)
	var all []faultOutcome
	startedIn := func(p int32) func(*faultOutcome) bool { return func(o *faultOutcome) bool { return o.start == p } }
	l.await(t, &all, deadline, "admissions before the migration", 100, func(o *faultOutcome) bool { return o.ok() && o.d.Allowed })

	redisDo(t, target, "CLUSTER", "SETSLOT", slotArg, "IMPORTING", sourceID)
	redisDo(t, source, "CLUSTER", "SETSLOT", slotArg, "MIGRATING", targetID)
	l.phase.Store(migrating)
	l.await(t, &all, deadline, "decisions while the slot is migrating", 100, startedIn(migrating))

	keys, _ := redisDo(t, source, "CLUSTER", "GETKEYSINSLOT", slotArg, "1000").([]any)
	if !slices.Contains(keys, any(key)) {
		t.Fatalf("CLUSTER GETKEYSINSLOT %d on the source = %v, want it to hold %q", slot, keys, key)
	}
	args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(target.Port), "", "0", "5000", "KEYS"}
	for _, k := range keys {
		args = append(args, k.(string))
	}
	redisDo(t, source, args...)
	l.phase.Store(moved)
	l.await(t, &all, deadline, "decisions after the key moved", 100, startedIn(moved))

	// As redis-cli --cluster does: the target first, so that the source's
	// MOVED never points back at a node that still sends ASK.
	redisDo(t, target, "CLUSTER", "SETSLOT", slotArg, "NODE", targetID)
	redisDo(t, source, "CLUSTER", "SETSLOT", slotArg, "NODE", targetID)
	for _, m := range cl.Masters {
		if m != source && m != target {
			redisDo(t, m, "CLUSTER", "SETSLOT", slotArg, "NODE", targetID)
		}
	}
	cl.WaitHealthy(t)
	if owner := cl.SlotOwner(slot); owner != target {
		t.Fatalf("slot %d owned by %v after the migration, want the target %s", slot, owner, target.Addr)
	}
	l.phase.Store(after)
	l.await(t, &all, deadline, "decisions after the migration", 200, startedIn(after))
	// No refill: once one request started after the migration is denied,
	// the bucket is empty for good.
	l.await(t, &all, deadline, "a denial after the migration", 1, func(o *faultOutcome) bool {
		return o.start == after && o.ok() && !o.d.Allowed
	})
	all = append(all, l.halt()...)

	var admitted, failed, byPhase [after + 1]int
	remaining := map[int64]int{}
	for i := range all {
		o := &all[i]
		if o.panicked != "" {
			t.Fatalf("a decision panicked: %s", o.panicked)
		}
		switch {
		case o.err != nil:
			if !errors.Is(o.err, core.ErrUnavailable) {
				t.Errorf("decision failed without ErrUnavailable: %v", o.err)
			}
			if failed[o.start]++; failed[o.start] <= 3 {
				t.Logf("phase %d: %v", o.start, o.err)
			}
		case o.d.Allowed:
			admitted[o.start]++
			// Cost 1 and no refill: every admission leaves a different
			// number of tokens. A repeat is a token spent twice.
			if remaining[o.d.Remaining]++; remaining[o.d.Remaining] == 2 {
				t.Errorf("two admissions left Remaining %d: a token was spent twice", o.d.Remaining)
			}
		}
		byPhase[o.start]++
	}
	total, errs := 0, 0
	for p := range admitted {
		total += admitted[p]
		errs += failed[p]
	}
	if total > burst {
		t.Errorf("admitted %d, more than the burst %d", total, burst)
	}
	// A failed call may have taken its token before its reply was lost, so
	// each failure may account for one token; without failures the count is
	// exact.
	if total < burst-errs {
		t.Errorf("admitted %d with %d failures, want at least %d of the burst %d", total, errs, burst-errs, burst)
	}
	d, err := lim.AllowN(ctx, core.Request{}, 0)
	if err != nil || d.Remaining != 0 {
		t.Errorf("AllowN(0) after the migration = %+v, %v; want Remaining 0", d, err)
	}
	if n := redisDo(t, target, "EXISTS", key); n != int64(1) {
		t.Errorf("EXISTS %s on the target = %v, want 1", key, n)
	}
	if n := redisDo(t, source, "CLUSTER", "COUNTKEYSINSLOT", slotArg); n != int64(0) {
		t.Errorf("CLUSTER COUNTKEYSINSLOT %d on the source = %v, want 0", slot, n)
	}
	t.Logf("slot %d from %s to %s: decisions per phase %v, admitted %v (%d of %d), failed %v",
		slot, source.Addr, target.Addr, byPhase, admitted, total, burst, failed)
}

// fakeScriptServer answers the connection setup as an old server would (no
// HELLO, so RESP2) and every script call with script(cmd).
func fakeScriptServer(script func(cmd []string) string) func(cmd []string) string {
	return func(cmd []string) string {
		switch strings.ToUpper(cmd[0]) {
		case "EVALSHA", "EVAL":
			return script(cmd)
		case "HELLO":
			return "-ERR unknown command 'HELLO'\r\n"
		case "PING":
			return "+PONG\r\n"
		}
		return "+OK\r\n"
	}
}

// fakeAt is the time the fake's valid replies carry.
var fakeAt = frozenAt

// fakeScriptCall is the parts of an EVALSHA or EVAL the fake looks at.
type fakeScriptCall struct {
	keys    []string
	mode    string
	buckets int      // buckets over all the call's requests
	refund  []string // ModeRefund: the two undo arguments of every bucket
}

func parseFakeScriptCall(cmd []string) (fakeScriptCall, error) {
	if len(cmd) < 3 {
		return fakeScriptCall{}, fmt.Errorf("short script call %q", cmd)
	}
	nk, err := strconv.Atoi(cmd[2])
	if err != nil || len(cmd) < 3+nk+1 || len(cmd[3+nk]) < redisscript.CallHeaderSize {
		return fakeScriptCall{}, fmt.Errorf("bad script call %q", cmd)
	}
	c := fakeScriptCall{keys: cmd[3 : 3+nk]}
	argv := cmd[3+nk:]
	// One argument: a header (the mode first, the number of limits
	// last), the limits, then the requests: per request its cost, count
	// and bucket count, then per bucket a key and a limit index. The fake
	// answers a run request by request.
	call := []byte(argv[0])
	c.mode = string(call[:1])
	nl := int(binary.LittleEndian.Uint32(call[redisscript.CallHeaderSize-4:]))
	if len(call) < redisscript.CallHeaderSize+nl*redisscript.LimitSize {
		return fakeScriptCall{}, fmt.Errorf("bad call argument %q", argv[0])
	}
	reqs := call[redisscript.CallHeaderSize+nl*redisscript.LimitSize:]
	for len(reqs) > 0 {
		if len(reqs) < 16 {
			return fakeScriptCall{}, fmt.Errorf("bad requests in %q", argv[0])
		}
		count := int(binary.LittleEndian.Uint32(reqs[8:]))
		nb := int(binary.LittleEndian.Uint32(reqs[12:]))
		if len(reqs) < 16+8*nb || count < 1 {
			return fakeScriptCall{}, fmt.Errorf("bad requests in %q", argv[0])
		}
		c.buckets += count * nb
		reqs = reqs[16+8*nb:]
	}
	if c.mode == redisscript.ModeRefund {
		// the value each bucket's take wrote and the value before it
		c.refund = argv[1:]
		if len(c.refund) != 2*c.buckets {
			return fakeScriptCall{}, fmt.Errorf("%d refund arguments for %d buckets", len(c.refund), c.buckets)
		}
	}
	return c, nil
}

// fakeReply is the reply of the real script to c, every bucket answering
// allowed with 5 remaining or denied, and for ModeTakeUndo the undo array,
// "before" and "written" for every bucket.
func fakeReply(c fakeScriptCall, allowed bool, before, written string) string {
	var states []core.BucketState
	for range c.buckets {
		if allowed {
			states = append(states, core.BucketState{Allowed: true, Remaining: 5, ResetAfter: time.Hour})
		} else {
			states = append(states, core.BucketState{Reason: core.ReasonLimited, ResetAfter: time.Hour, RetryAfter: time.Second})
		}
	}
	if c.mode != redisscript.ModeTakeUndo {
		return redistests.RespReply(fakeAt, states...)
	}
	undo := "*" + strconv.Itoa(2*c.buckets) + "\r\n"
	for range c.buckets {
		undo += redistests.RespBulk(before) + redistests.RespBulk(written)
	}
	return redistests.RespUndoReply(fakeAt, undo, states...)
}

// fakeAllowed is the script's binary reply allowing one bucket at fakeAt.
var fakeAllowed = string(redisscript.AppendReply(nil, fakeAt, core.BucketState{Allowed: true, Remaining: 5, ResetAfter: time.Hour}))

// fakeRecord returns fakeAllowed with its bucket record replaced: a code
// byte and three little-endian int64.
func fakeRecord(code byte, remaining, reset, wait int64) string {
	b := []byte(fakeAllowed[:redisscript.HeaderSize])
	b = append(b, code)
	for _, v := range []int64{remaining, reset, wait} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return redistests.RespBulk(string(b))
}

// fakeTime returns fakeAllowed with its time replaced.
func fakeTime(sec int64, ns int32) string {
	b := binary.LittleEndian.AppendUint64(nil, uint64(sec))
	b = binary.LittleEndian.AppendUint32(b, uint32(ns))
	return redistests.RespBulk(string(b) + fakeAllowed[redisscript.HeaderSize:])
}

// garbageReplies is every reply the store must refuse for a one-bucket call.
var garbageReplies = []struct {
	name  string
	reply string
	want  error // what the error wraps; nil: any error
}{
	{"bulk string", "$2\r\nok\r\n", redisscript.ErrReply},
	{"simple string", "+OK\r\n", redisscript.ErrReply},
	{"integer", ":1\r\n", redisscript.ErrReply},
	{"empty array", "*0\r\n", redisscript.ErrReply},
	{"array of three", "*3\r\n" + redistests.RespBulk(fakeAllowed) + "*0\r\n:1\r\n", redisscript.ErrReply},
	{"undo where none is due", "*2\r\n" + redistests.RespBulk(fakeAllowed) + "*0\r\n", redisscript.ErrReply},
	{"array holding an integer", "*1\r\n:1\r\n", redisscript.ErrReply},
	{"array holding an array", "*1\r\n*1\r\n:1\r\n", redisscript.ErrReply},
	{"array holding nil", "*1\r\n$-1\r\n", redisscript.ErrReply},
	{"second element not an array", "*2\r\n" + redistests.RespBulk(fakeAllowed) + ":1\r\n", redisscript.ErrReply},
	{"short reply", redistests.RespBulk(fakeAllowed[:len(fakeAllowed)-1]), redisscript.ErrReply},
	{"long reply", redistests.RespBulk(fakeAllowed + "x"), redisscript.ErrReply},
	{"empty reply", "$0\r\n\r\n", redisscript.ErrReply},
	{"array of the empty string", "*1\r\n$0\r\n\r\n", redisscript.ErrReply},
	{"array of one string", "*1\r\n" + redistests.RespBulk(fakeAllowed), redisscript.ErrReply},
	{"code out of range", fakeRecord(3, 5, 0, 0), redisscript.ErrReply},
	{"retry on a cost above the limit", fakeRecord(2, 0, 0, 1), redisscript.ErrReply},
	{"negative remaining", fakeRecord(0, -1, 0, 0), redisscript.ErrReply},
	{"negative reset", fakeRecord(0, 5, -1, 0), redisscript.ErrReply},
	{"negative retry", fakeRecord(1, 0, 0, -1), redisscript.ErrReply},
	{"negative delay", fakeRecord(0, 5, 0, -1), redisscript.ErrReply},
	{"nanoseconds out of range", fakeTime(fakeAt.Unix(), 1e9), redisscript.ErrReply},
	{"negative time", fakeTime(-1, 0), redisscript.ErrReply},
	// go-redis turns a nil reply into redis.Nil before the store sees it.
	{"nil bulk string", "$-1\r\n", redis.Nil},
	{"nil array", "*-1\r\n", redis.Nil},
	{"error reply", "-ERR ratelimit: bad arguments for bucket 1\r\n", nil},
	{"not RESP", "hello\r\n", nil},
	{"integer overflow", ":99999999999999999999\r\n", nil},
}

// TestFaultGarbageReplies answers the script with replies a real server never
// sends: the store returns an error (wrapping redisscript.ErrReply where the
// reply is well-formed RESP), never panics nor reports a decision, and a
// limiter applies its failure mode.
func TestFaultGarbageReplies(t *testing.T) {
	checkFaultLeaks(t)
	var current atomic.Pointer[string]
	f := redistests.StartFake(t, fakeScriptServer(func([]string) string { return *current.Load() }))
	client := faultClient(t, &redis.Options{ContextTimeoutEnabled: true, Addr: f.Addr, Protocol: 2, MaxRetries: -1, DisableIdentity: true,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	policy := redistests.Policy(t, core.Rule{Name: "garbage", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 10)})
	rule := policy.Rules()[0]
	ctx := context.Background()
	stores := []struct {
		name string
		opts []goredis.Option
	}{
		{"batched", nil},
		{"direct", []goredis.Option{goredis.WithoutBatching()}},
	}
	for _, s := range stores {
		store := mustStore(t, client, s.opts...)
		closed := redistests.Limiter(t, policy, core.WithStore(store), core.WithFailureMode(core.FailClosed))
		open := redistests.Limiter(t, policy, core.WithStore(store), core.WithFailureMode(core.FailOpen))
		for _, g := range garbageReplies {
			t.Run(s.name+"/"+g.name, func(t *testing.T) {
				current.Store(&g.reply)
				calls := f.Calls("EVALSHA", "EVAL")
				take := core.Take{Cost: 1, Buckets: []core.Bucket{{Rule: rule.Name, Key: "u", Limit: &rule.Limit}}, States: make([]core.BucketState, 1)}
				err := store.Take(ctx, &take)
				if err == nil {
					t.Fatalf("Take = nil error, states %+v; want an error", take.States)
				}
				if g.want != nil && !errors.Is(err, g.want) {
					t.Errorf("Take = %v, want an error wrapping %v", err, g.want)
				}
				if f.Calls("EVALSHA", "EVAL") == calls {
					t.Errorf("the fake got no script call")
				}
				d, err := closed.Allow(ctx, core.Request{User: "u"})
				if !errors.Is(err, core.ErrUnavailable) || d.Allowed || d.Reason != core.ReasonUnavailable || !d.Degraded {
					t.Errorf("FailClosed: Allow = %+v, %v; want ErrUnavailable and ReasonUnavailable", d, err)
				}
				if g.want != nil && !errors.Is(err, g.want) {
					t.Errorf("FailClosed: Allow error %v does not wrap %v", err, g.want)
				}
				d, err = open.Allow(ctx, core.Request{User: "u"})
				if err != nil || !d.Allowed || !d.Degraded || d.Err == nil {
					t.Errorf("FailOpen: Allow = %+v, %v; want allowed and degraded", d, err)
				}
				t.Logf("Take: %v", d.Err)
			})
		}
	}

	t.Run("NOSCRIPT then garbage", func(t *testing.T) {
		f := redistests.StartFake(t, fakeScriptServer(func(cmd []string) string {
			if strings.EqualFold(cmd[0], "EVALSHA") {
				return "-NOSCRIPT No matching script. Please use EVAL.\r\n"
			}
			return fakeRecord(3, 5, 0, 0)
		}))
		store := mustStore(t, faultClient(t, &redis.Options{ContextTimeoutEnabled: true, Addr: f.Addr, Protocol: 2, MaxRetries: -1}))
		take := core.Take{Cost: 1, Buckets: []core.Bucket{{Rule: rule.Name, Key: "u", Limit: &rule.Limit}}, States: make([]core.BucketState, 1)}
		if err := store.Take(ctx, &take); !errors.Is(err, redisscript.ErrReply) {
			t.Errorf("Take = %v, want an error wrapping ErrReply", err)
		}
		if got := store.Stats().Reloads; got != 1 {
			t.Errorf("Stats().Reloads = %d, want 1", got)
		}
	})

	t.Run("NOSCRIPT forever", func(t *testing.T) {
		f := redistests.StartFake(t, fakeScriptServer(func([]string) string { return "-NOSCRIPT No matching script. Please use EVAL.\r\n" }))
		store := mustStore(t, faultClient(t, &redis.Options{ContextTimeoutEnabled: true, Addr: f.Addr, Protocol: 2, MaxRetries: -1}))
		for i := range 3 {
			take := core.Take{Cost: 1, Buckets: []core.Bucket{{Rule: rule.Name, Key: "u", Limit: &rule.Limit}}, States: make([]core.BucketState, 1)}
			if err := store.Take(ctx, &take); err == nil || !strings.Contains(err.Error(), "NOSCRIPT") {
				t.Errorf("Take #%d = %v, want the NOSCRIPT error", i, err)
			}
		}
		// One reload per take, never a loop.
		if got, calls := store.Stats().Reloads, f.Calls("EVALSHA", "EVAL"); got != 3 || calls != 6 {
			t.Errorf("Stats().Reloads = %d with %d script calls, want 3 and 6", got, calls)
		}
	})

	t.Run("cluster multi-slot", func(t *testing.T) {
		// A one-node "cluster": every slot on the fake. The bucket of rule
		// "good" always takes its token; the bucket of rule "other", in
		// another slot, answers each case's reply. Whatever that group says,
		// the good group's token is given back, with the undo values its take
		// returned.
		const before, written = "BEFORE", "WRITTEN"
		var mu sync.Mutex
		var otherReply string
		var refunds [][]string // the undo arguments of every refund of the good bucket
		f := redistests.StartFake(t, fakeScriptServer(func(cmd []string) string {
			c, err := parseFakeScriptCall(cmd)
			if err != nil {
				return "-ERR " + err.Error() + "\r\n"
			}
			mu.Lock()
			defer mu.Unlock()
			if len(c.keys) != 1 || !strings.Contains(c.keys[0], ":good:") {
				return otherReply
			}
			if c.mode == redisscript.ModeRefund {
				refunds = append(refunds, c.refund)
			}
			return fakeReply(c, true, before, written)
		}))
		client := faultClusterClient(t, &redis.ClusterOptions{
			MaxRetries: -1, ContextTimeoutEnabled: true,
			ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
				return []redis.ClusterSlot{{Start: 0, End: redistest.SlotCount - 1, Nodes: []redis.ClusterNode{{Addr: f.Addr}}}}, nil
			},
			NewClient: func(o *redis.Options) *redis.Client {
				o.Protocol, o.DisableIdentity = 2, true
				return redis.NewClient(o)
			},
		})
		store := mustStore(t, client)
		policy := redistests.Policy(t,
			core.Rule{Name: "good", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 10)},
			core.Rule{Name: "other", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 10)})
		if a, b := redisscript.Slot(store.Key("good", "u")), redisscript.Slot(store.Key("other", "u")); a == b {
			t.Fatalf("both buckets in slot %d; the test needs two slots", a)
		}
		lim := redistests.Limiter(t, policy, core.WithStore(store), core.WithFailureMode(core.FailClosed))
		one := fakeScriptCall{mode: redisscript.ModeTakeUndo, buckets: 1}
		for _, tc := range []struct {
			name  string
			reply string
			want  error // nil: a denial, no error
		}{
			{"denied", fakeReply(one, false, "", ""), nil},
			{"array holding an integer", "*2\r\n:1\r\n*2\r\n$0\r\n\r\n$0\r\n\r\n", redisscript.ErrReply},
			{"short reply", "*2\r\n" + redistests.RespBulk(fakeAllowed[:20]) + "*2\r\n$0\r\n\r\n$0\r\n\r\n", redisscript.ErrReply},
			{"undo of the wrong length", strings.Replace(fakeReply(one, true, "", "x"), "*2\r\n$0", "*1\r\n$0", 1), redisscript.ErrReply},
			{"undo holding an integer", strings.Replace(fakeReply(one, true, "", "x"), "$1\r\nx\r\n", ":7\r\n", 1), redisscript.ErrReply},
			{"error reply", "-ERR ratelimit: bad arguments for bucket 1\r\n", errors.New("any")},
		} {
			t.Run(tc.name, func(t *testing.T) {
				mu.Lock()
				otherReply, refunds = tc.reply, nil
				mu.Unlock()
				stats := store.Stats()
				d, err := lim.Allow(ctx, core.Request{User: "u"})
				switch {
				case tc.want == nil:
					if err != nil || d.Allowed || d.Degraded || d.Rule != "other" {
						t.Errorf("Allow = %+v, %v; want denied by the other tier", d, err)
					}
				case !errors.Is(err, core.ErrUnavailable) || d.Reason != core.ReasonUnavailable ||
					(tc.want == redisscript.ErrReply && !errors.Is(err, redisscript.ErrReply)):
					t.Errorf("Allow = %+v, %v; want ErrUnavailable wrapping %v", d, err, tc.want)
				}
				mu.Lock()
				defer mu.Unlock()
				if got := store.Stats().Refunds - stats.Refunds; got != 1 || len(refunds) != 1 || !slices.Equal(refunds[0], []string{written, before}) {
					t.Errorf("Stats().Refunds grew by %d, refunds of the good bucket %q; want one, carrying %q", got, refunds, []string{written, before})
				}
			})
		}
	})
}

// TestFaultTimeouts runs against servers that never answer: the store's
// WithTimeout, and the limiter's, end the call promptly, and the failure mode
// decides.
func TestFaultTimeouts(t *testing.T) {
	checkFaultLeaks(t)
	const timeout = 50 * time.Millisecond
	const prompt = 2 * time.Second
	ctx := context.Background()
	policy := redistests.Policy(t,
		core.Rule{Name: "slow", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 10)},
		core.Rule{Name: "slower", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 10)})
	rules := policy.Rules()
	// The client's own timeouts are go-redis's defaults (seconds): only the
	// store's or the limiter's bound can end the call in time. go-redis puts
	// a context's deadline on the socket only with ContextTimeoutEnabled.
	options := func(addr string) *redis.Options {
		return &redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1, ContextTimeoutEnabled: true}
	}
	hangs := fakeScriptServer(func([]string) string { return "" })
	silent := func([]string) string { return "" }
	paused := redistest.Standalone(t)

	servers := []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"hangs on the script", func(t *testing.T) redis.UniversalClient {
			return faultClient(t, options(redistests.StartFake(t, hangs).Addr))
		}},
		{"answers nothing", func(t *testing.T) redis.UniversalClient {
			return faultClient(t, options(redistests.StartFake(t, silent).Addr))
		}},
		{"paused redis-server", func(t *testing.T) redis.UniversalClient {
			c := faultClient(t, &redis.Options{Addr: paused.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatalf("PING: %v", err)
			}
			paused.Pause()
			t.Cleanup(paused.Resume)
			return c
		}},
		{"cluster hangs on the script", func(t *testing.T) redis.UniversalClient {
			f := redistests.StartFake(t, hangs)
			return faultClusterClient(t, &redis.ClusterOptions{
				MaxRetries: -1, ContextTimeoutEnabled: true,
				ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
					return []redis.ClusterSlot{{Start: 0, End: redistest.SlotCount - 1, Nodes: []redis.ClusterNode{{Addr: f.Addr}}}}, nil
				},
				NewClient: func(o *redis.Options) *redis.Client {
					o.Protocol, o.DisableIdentity = 2, true
					return redis.NewClient(o)
				},
			})
		}},
	}
	timed := func(t *testing.T, what string, f func() error) error {
		t.Helper()
		start := time.Now()
		err := f()
		if took := time.Since(start); took > prompt {
			t.Errorf("%s took %v, want under %v", what, took, prompt)
		}
		return err
	}
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			client := srv.client(t)
			for _, batching := range []bool{true, false} {
				var opts []goredis.Option
				name := "batched"
				if !batching {
					opts, name = append(opts, goredis.WithoutBatching()), "direct"
				}
				store := mustStore(t, client, append(opts, goredis.WithTimeout(timeout))...)
				bare := mustStore(t, client, opts...)
				t.Run(name, func(t *testing.T) {
					// Two buckets: in Cluster they lie in two slots (but for a
					// 1-in-16384 prefix), so the take is pipelined.
					newTake := func() *core.Take {
						return &core.Take{Cost: 1, States: make([]core.BucketState, 2), Buckets: []core.Bucket{
							{Rule: rules[0].Name, Key: "u", Limit: &rules[0].Limit},
							{Rule: rules[1].Name, Key: "u", Limit: &rules[1].Limit},
						}}
					}
					if err := timed(t, "Take", func() error { return store.Take(ctx, newTake()) }); err == nil {
						t.Errorf("Take = nil error, want a timeout")
					} else {
						t.Logf("Take: %v", err)
					}

					// Many at once: queued requests wait for the call in flight,
					// which the timeout ends too.
					var wg sync.WaitGroup
					for range 8 {
						wg.Go(func() {
							if err := timed(t, "concurrent Take", func() error { return store.Take(ctx, newTake()) }); err == nil {
								t.Errorf("concurrent Take = nil error, want a timeout")
							}
						})
					}
					wg.Wait()

					req := core.Request{User: "u"}
					for _, mode := range []core.FailureMode{core.FailOpen, core.FailClosed, core.FailFallback} {
						lim := redistests.Limiter(t, policy, core.WithStore(store), core.WithFailureMode(mode))
						var d core.Decision
						err := timed(t, mode.String(), func() (err error) { d, err = lim.Allow(ctx, req); return err })
						checkFailureMode(t, mode, d, err)
					}
					// The limiter's own bound, on a store without one.
					lim := redistests.Limiter(t, policy, core.WithStore(bare), core.WithFailureMode(core.FailClosed), core.WithTimeout(timeout))
					var d core.Decision
					err := timed(t, "limiter WithTimeout", func() (err error) { d, err = lim.Allow(ctx, req); return err })
					checkFailureMode(t, core.FailClosed, d, err)
					// Not asserted: whether the error names WithTimeout races
					// with the socket deadline (see the report on core's
					// takeFrom).
					t.Logf("limiter WithTimeout: %v", err)
				})
			}
		})
	}
}

// checkFailureMode checks that a failed store call was decided by mode.
func checkFailureMode(t *testing.T, mode core.FailureMode, d core.Decision, err error) {
	t.Helper()
	switch mode {
	case core.FailOpen:
		if err != nil || !d.Allowed || !d.Degraded || d.Err == nil {
			t.Errorf("%v: Allow = %+v, %v; want allowed, degraded, Err set", mode, d, err)
		}
	case core.FailClosed:
		if !errors.Is(err, core.ErrUnavailable) || d.Allowed || d.Reason != core.ReasonUnavailable || !d.Degraded {
			t.Errorf("%v: Allow = %+v, %v; want ErrUnavailable and ReasonUnavailable", mode, d, err)
		}
	case core.FailFallback:
		if err != nil || !d.Allowed || !d.Degraded || d.Err == nil || d.Limit != 10 || d.Remaining != 9 {
			t.Errorf("%v: Allow = %+v, %v; want admitted by a fresh fallback bucket, degraded", mode, d, err)
		}
	}
}

// lockedBuffer collects log records written from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the records written so far, one JSON object each.
func (b *lockedBuffer) records(t *testing.T) []string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.buf.String()), "\n")
}
