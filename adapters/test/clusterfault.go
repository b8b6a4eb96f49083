package redistests

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// A Cluster master killed for good, with no replica to take over: its keys
// fail, and only its keys. See RunClusterFault.

// The options of every store of RunClusterFault: WithBreaker(FaultFailures,
// FaultCooldown) and WithTimeout(FaultBound).
//
// The bound is not the default 100ms: on a machine running other -race test
// binaries beside 512 goroutines of this one, a call to a healthy master
// now and then waits for a CPU longer than that, and its failure would be
// counted against the isolation this test measures. TestOutageLatency
// measures the default bound.
const (
	FaultFailures = 3
	FaultCooldown = 250 * time.Millisecond
	FaultBound    = time.Second
)

// The shape of RunClusterFault's load and its bounds.
const (
	faultInstances = 8  // stores, each on a client of its own, with a limiter each
	faultWorkers   = 64 // goroutines per limiter
	faultPerMaster = 8  // keys on each master
	// faultPace is how long each worker waits between two decisions, as
	// requests arrive at a rate: 512 goroutines deciding back to back, most
	// of them refused by an open breaker in microseconds, take every CPU of
	// a small machine shared with other -race test binaries, and calls to
	// the healthy masters then time out for want of CPU, not because of
	// Redis. At 100ms the load makes about 5,000 decisions a second.
	faultPace = 100 * time.Millisecond
	// faultWarm is how many decisions from Redis the load makes before the
	// kill, faultWarmVictim of them for the victim's keys.
	faultWarm, faultWarmVictim = 500, 50
	// faultOutage is how long the load runs with the victim dead before
	// the multi-tier checks and the restart.
	faultOutage = 2500 * time.Millisecond
	// faultHealthyShare is the least share of decisions from Redis for
	// keys on the masters that stayed up, during the outage: a loaded
	// machine may time out a call to a healthy master now and then.
	faultHealthyShare = 0.99
	// faultRefusedShare is the least share of the dead master's decisions
	// during the outage that the breakers refuse. A store admits every
	// request for the dead master's keys until FaultFailures calls have
	// failed, then one probe per FaultCooldown. A call to a dead node fails
	// at once on rueidis (the dial is refused) but lasts the whole bound on
	// go-redis, whose retries of the dial and of the command go on until
	// the deadline: by then about every worker that met one of those keys
	// is waiting on an admitted call. Measured: about 97% on rueidis, 79%
	// on go-redis.
	faultRefusedShare = 0.6
	// faultRecovery bounds the time from the moment the restarted master
	// serves its slots again to the first instant after which every
	// decision for its keys comes from Redis: a breaker's cooldown, then a
	// probe and a reconnection.
	faultRecovery = time.Second
	// faultSustained is how long every decision for the dead master's keys
	// must come from Redis for the recovery to count: a failure less than
	// this after the previous one moves the recovery to it; one later is
	// late, like a healthy key's rare timeout, and at most 1% may be.
	faultSustained = time.Second
	// faultServeWithin bounds the time from Restart returning to the
	// restarted master serving its keys. Redis keeps a restarted master's
	// cluster state failed, answering CLUSTERDOWN, for 2s
	// (CLUSTER_WRITABLE_DELAY in cluster.c) so that the cluster can tell it
	// of a new configuration first; the rest is slack.
	faultServeWithin = 10 * time.Second
	// faultSlowest bounds every decision: one store call, one bound (a
	// single tier is never a partial failure), and slack for 512
	// goroutines of a -race binary on a small machine.
	faultSlowest = FaultBound + 2*time.Second

	faultRule  = "cf"
	faultBurst = 1_000_000
)

// FaultStore is one store of RunClusterFault and what the test reads of it.
type FaultStore struct {
	Store    core.Store
	Key      func(rule, id string) string        // the store's Key
	Breakers func() map[string]core.BreakerState // the store's BreakerStates
	Refused  func() int64                        // Stats().Refused
	Refunds  func() int64                        // Stats().Refunds
}

// NewFaultStore is the FaultStore of s, whose Stats stats reads (refused,
// refunds).
func NewFaultStore(s interface {
	core.Store
	Key(rule, id string) string
	BreakerStates() map[string]core.BreakerState
}, stats func() (refused, refunds int64)) FaultStore {
	return FaultStore{
		Store:    s,
		Key:      s.Key,
		Breakers: s.BreakerStates,
		Refused:  func() int64 { r, _ := stats(); return r },
		Refunds:  func() int64 { _, r := stats(); return r },
	}
}

// ClusterFault is a store under test for RunClusterFault.
type ClusterFault struct {
	// Name names the store in the figures' log line: "goredis".
	Name string
	// NewStore returns a store with prefix, WithBreaker(FaultFailures,
	// FaultCooldown) and WithTimeout(FaultBound), and otherwise the
	// store's defaults, on a Cluster client of its own for addrs, with the
	// client's defaults (and ContextTimeoutEnabled for go-redis), which it
	// closes when t ends.
	NewStore func(t testing.TB, addrs []string, prefix string) FaultStore
}

// RunClusterFault kills one master of a 3-master Cluster without replicas,
// under load, and restarts it. The nodes run with
// --cluster-require-full-coverage no: by default the other masters answer
// CLUSTERDOWN for every key once they mark the dead one failed (about 3s
// after the kill), and no store could do better.
//
// faultInstances stores, each on a client of its own with a FailClosed
// limiter, run faultWorkers goroutines each that take one token at a time
// from keys on every master, each a bucket so large that Redis always
// allows. Phases: healthy, until faultWarm decisions came from Redis; the
// victim killed with SIGKILL; the outage, faultOutage under load, then the
// multi-tier checks with the load paused (see clusterMultiTier); Restart;
// the restarted master serving its keys again, which it owns again
// (WaitHealthy, SlotOwner); recovery, until every decision for its keys
// has come from Redis for faultSustained.
//
// A restarted master answers CLUSTERDOWN for its first 2s (see
// faultServeWithin): the recovery is measured from Restart returning, as
// the figures report it, and bounded from the moment the master serves
// again, which the test sees by asking it directly.
//
// It asserts: during the outage, at least faultHealthyShare of the
// decisions for keys on the other masters came from Redis, and every
// decision for the victim's keys followed FailClosed (an error wrapping
// core.ErrUnavailable, ReasonUnavailable, degraded, a Retry-After), at
// least faultRefusedShare of them refused at once by the breaker
// (core.ErrBreakerOpen, a Retry-After within the cooldown); what
// clusterMultiTier asserts; recovery within faultRecovery of the victim
// serving again, then at most 1% late failures; no decision slower than
// faultSlowest; no goroutine left once the load stopped and the clients
// closed. It logs one line, "cluster fault[Name]: ...", with the figures
// the test is about, and one with the details.
func RunClusterFault(t *testing.T, f ClusterFault) {
	CheckLeaks(t)
	cl := redistest.Cluster(t, redistest.WithArgs("--cluster-require-full-coverage", "no"))
	victim := cl.Masters[1]
	prefix := NewPrefix()
	policy := Policy(t, core.Rule{Name: faultRule, Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(faultBurst), faultBurst)})
	stores := make([]FaultStore, faultInstances)
	limiters := make([]*core.Limiter, faultInstances)
	for i := range stores {
		stores[i] = f.NewStore(t, cl.Addrs(), prefix)
		limiters[i] = Limiter(t, policy, core.WithStore(stores[i].Store), core.WithFailureMode(core.FailClosed))
	}

	// Keys: faultPerMaster on every master.
	var (
		reqs      []core.Request
		onVictim  []bool
		victimKey string // a Redis key of the victim's, to ask it directly
	)
	perMaster := map[*redistest.Server]int{}
	for i := 0; len(reqs) < faultPerMaster*len(cl.Masters); i++ {
		if i > 100_000 {
			t.Fatalf("found only %d keys with %d on each master: %v", len(reqs), faultPerMaster, perMaster)
		}
		id := "k" + strconv.Itoa(i)
		m := masterOf(t, cl, stores[0].Key(faultRule, id))
		if perMaster[m] == faultPerMaster {
			continue
		}
		perMaster[m]++
		reqs = append(reqs, core.Request{User: id})
		onVictim = append(onVictim, m == victim)
		if m == victim {
			victimKey = stores[0].Key(faultRule, id)
		}
	}

	// Every store must know the slot map, so that each master has a
	// breaker of its own: until then all keys share one.
	deadline := time.Now().Add(10 * time.Second)
	for i, s := range stores {
		for {
			states := s.Breakers()
			if hasAll(states, cl.Addrs()) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("store %d: breakers %v, want one for each master %v", i, states, cl.Addrs())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	ctx := context.Background()
	rep := &reporter{t: t}
	var (
		okHealthy, okVictim atomic.Int64
		restarted           atomic.Int64 // when Restart returned, since the load began; 0 before
		victimOKAfter       atomic.Int64 // decisions from Redis for the victim's keys begun after the restart
		victimLastBad       atomic.Int64 // the end of the last failed decision for the victim's keys
		errVictim, errOther atomic.Pointer[error]
		// The first error for the victim's keys once every decision for
		// them should come from Redis again, for the figures.
		servingAt atomic.Int64
		errLate   atomic.Pointer[error]
		origin    = time.Now() // about the load's own origin, for errLate
	)
	l := startLoad(t, faultInstances*faultWorkers, faultPace, func(w, i int) (int32, kind) {
		lim := limiters[w%faultInstances]
		// Every worker walks all keys, each from another start.
		k := (w*7 + i) % len(reqs)
		d, err := lim.Allow(ctx, reqs[k])
		if err != nil {
			if at := servingAt.Load(); onVictim[k] && at != 0 && time.Since(origin) > time.Duration(at)+faultRecovery {
				errLate.CompareAndSwap(nil, &err)
			}
			if onVictim[k] {
				errVictim.CompareAndSwap(nil, &err)
			} else {
				errOther.CompareAndSwap(nil, &err)
			}
		}
		switch {
		case err == nil && !d.Degraded:
			if !d.Allowed || d.Rule != faultRule || d.Limit != faultBurst || d.Err != nil {
				rep.errorf("%s: Allow = %s; want allowed by %s from Redis", reqs[k].User, brief(d), faultRule)
				return int32(k), kindWrong
			}
			return int32(k), kindRedis
		case !errors.Is(err, core.ErrUnavailable) || d.Allowed || d.Reason != core.ReasonUnavailable ||
			!d.Degraded || d.Err == nil || d.RetryAfter <= 0:
			rep.errorf("%s: Allow = %s, %v; want a FailClosed denial wrapping ErrUnavailable", reqs[k].User, brief(d), err)
			return int32(k), kindWrong
		case errors.Is(err, core.ErrBreakerOpen) != errors.Is(d.Err, core.ErrBreakerOpen):
			rep.errorf("%s: Allow = %s, %v; the error and Decision.Err disagree on the breaker", reqs[k].User, brief(d), err)
			return int32(k), kindWrong
		case errors.Is(err, core.ErrBreakerOpen):
			var open *core.BreakerOpenError
			if !errors.As(err, &open) || d.RetryAfter > FaultCooldown {
				rep.errorf("%s: Allow = %s, %v; want a *core.BreakerOpenError and a Retry-After within the cooldown %v", reqs[k].User, brief(d), err, FaultCooldown)
				return int32(k), kindWrong
			}
			return int32(k), kindRefused
		}
		return int32(k), kindDegraded
	}, func(s *sample) {
		switch {
		case s.kind == kindRedis && onVictim[s.key]:
			okVictim.Add(1)
			if r := restarted.Load(); r != 0 && int64(s.begin) >= r {
				victimOKAfter.Add(1)
			}
		case s.kind == kindRedis:
			okHealthy.Add(1)
		case onVictim[s.key]:
			raiseTo(&victimLastBad, int64(s.end))
		}
	})
	fail := func(format string, args ...any) {
		t.Helper()
		l.halt()
		t.Fatalf(format, args...)
	}

	// Healthy.
	deadline = time.Now().Add(20 * time.Second)
	for okHealthy.Load()+okVictim.Load() < faultWarm || okVictim.Load() < faultWarmVictim {
		if time.Now().After(deadline) {
			fail("before the kill: %d decisions from Redis (%d for the victim's keys) in 20s, want %d (%d)",
				okHealthy.Load()+okVictim.Load(), okVictim.Load(), faultWarm, faultWarmVictim)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// The outage.
	killAt := l.now()
	victim.Kill()
	killed := l.now()
	time.Sleep(faultOutage)
	pausedAt := l.now()
	l.pause()
	multi := clusterMultiTier(t, f, cl, victim)
	l.resume()
	resumedAt := l.now()

	// The restart.
	restartAt := l.now()
	victim.Restart(t)
	restarted.Store(int64(l.now()))
	var serving time.Duration
	for deadline := time.Now().Add(faultServeWithin); ; {
		// GET of a key the victim owns: CLUSTERDOWN until it serves.
		if _, err := victim.Do("GET", victimKey); err == nil {
			serving = l.now()
			servingAt.Store(int64(serving))
			break
		}
		if time.Now().After(deadline) {
			fail("the restarted master %s does not serve its keys %v after Restart", victim.Addr, faultServeWithin)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cl.WaitHealthy(t)
	healthyAt := l.now()
	for k, on := range onVictim {
		if key := stores[0].Key(faultRule, reqs[k].User); on && masterOf(t, cl, key) != victim {
			fail("after the restart, slot %d of %q is not the restarted master's %s", redistest.KeySlot(key), key, victim.Addr)
		}
	}

	// Recovery: every decision for the victim's keys from Redis for
	// faultSustained.
	deadline = time.Now().Add(15 * time.Second)
	for victimOKAfter.Load() == 0 || l.now()-time.Duration(max(victimLastBad.Load(), int64(serving))) < faultSustained*3/2 {
		if time.Now().After(deadline) {
			break // the figures say how far it got
		}
		time.Sleep(10 * time.Millisecond)
	}
	samples := l.halt()
	restartedAt := time.Duration(restarted.Load())

	// The figures.
	var (
		healthyN, healthyOK, deadN, deadRefused, deadFromRedis int
		before, beforeOK                                       int
		healthyLat, deadLat                                    []time.Duration
		bad                                                    []sample // failed decisions for the victim's keys after the restart
		firstOK                                                time.Duration
		slowest                                                time.Duration
		lastEnd                                                time.Duration
		after, afterDead                                       int
	)
	for i := range samples {
		s := &samples[i]
		slowest = max(slowest, s.took())
		lastEnd = max(lastEnd, s.end)
		if s.took() > faultSlowest {
			rep.errorf("%s: a decision took %v, more than %v", reqs[s.key].User, s.took(), faultSlowest)
		}
		switch {
		case s.end <= killAt:
			before++
			if s.kind == kindRedis {
				beforeOK++
			}
		case s.begin >= killed && s.end <= restartAt && !onVictim[s.key]:
			healthyN++
			healthyLat = append(healthyLat, s.took())
			if s.kind == kindRedis {
				healthyOK++
			}
		case s.begin >= killed && s.end <= restartAt:
			deadN++
			deadLat = append(deadLat, s.took())
			switch s.kind {
			case kindRedis:
				deadFromRedis++
			case kindRefused:
				deadRefused++
			}
		case s.begin >= restartedAt:
			after++
			if !onVictim[s.key] {
				break
			}
			afterDead++
			if s.kind == kindRedis {
				if firstOK == 0 || s.end < firstOK {
					firstOK = s.end
				}
			} else {
				bad = append(bad, *s)
			}
		}
	}
	// Recovery: the start of the first window of faultSustained, from the
	// first decision from Redis on, without a failed decision for the
	// victim's keys; failures after it are late.
	slices.SortFunc(bad, func(a, b sample) int { return cmp.Compare(a.end, b.end) })
	recovered, late, lateRefused := firstOK, 0, 0
	for _, b := range bad {
		switch {
		case firstOK == 0 || b.end <= recovered:
		case b.end-recovered < faultSustained:
			recovered = b.end
		default:
			late++
			if b.kind == kindRefused {
				lateRefused++
			}
		}
	}
	share := func(n, of int) float64 {
		if of == 0 {
			return 0
		}
		return 100 * float64(n) / float64(of)
	}
	_, hp99, hmax := quantiles(healthyLat)
	dp50, dp99, dmax := quantiles(deadLat)
	refusedStats := int64(0)
	for _, s := range stores {
		refusedStats += s.Refused()
	}
	t.Logf("cluster fault[%s]: healthy keys %d decisions, %.2f%% from Redis; dead keys %d decisions, %d refused by the breaker; recovery after restart %dms; p99 latency during outage healthy=%s dead=%s",
		f.Name, healthyN, share(healthyOK, healthyN), deadN, deadRefused, (recovered - restartedAt).Milliseconds(), ms(hp99), ms(dp99))
	t.Logf("cluster fault[%s] details: %d decisions by %dx%d workers on %d keys over %v; before the kill %d, %.2f%% from Redis; outage %v (load paused %v for the multi-tier checks); "+
		"dead keys p50=%s max=%s, healthy max=%s; the master served again %dms after Restart returned (Restart took %dms), recovery %dms after that, %d late failures (%d refused by a breaker) in %d decisions for its keys after the restart; WaitHealthy returned %dms after Restart; "+
		"Stats().Refused over the stores %d; slowest decision %s; multi-tier: %s",
		f.Name, len(samples), faultInstances, faultWorkers, len(reqs), lastEnd.Round(time.Millisecond), before, share(beforeOK, before),
		(restartAt - killed).Round(time.Millisecond), (resumedAt - pausedAt).Round(time.Millisecond),
		ms(dp50), ms(dmax), ms(hmax), (serving - restartedAt).Milliseconds(), (restartedAt - restartAt).Milliseconds(),
		(recovered - serving).Milliseconds(), late, lateRefused, afterDead, (healthyAt - restartedAt).Milliseconds(), refusedStats, ms(slowest), multi)
	if err := errVictim.Load(); err != nil {
		t.Logf("first error for the dead master's keys: %v", *err)
	}
	if err := errOther.Load(); err != nil {
		t.Logf("first error for other keys: %v", *err)
	}
	if err := errLate.Load(); err != nil {
		t.Logf("first error for the restarted master's keys %v after it served again: %v", faultRecovery, *err)
	}

	if float64(beforeOK) < faultHealthyShare*float64(before) {
		t.Errorf("before the kill: %d of %d decisions from Redis, want at least %.0f%%", beforeOK, before, 100*faultHealthyShare)
	}
	if healthyN < faultWarm {
		t.Errorf("%d decisions for keys on the healthy masters during the outage, want at least %d", healthyN, faultWarm)
	}
	if float64(healthyOK) < faultHealthyShare*float64(healthyN) {
		t.Errorf("during the outage, %d of %d decisions for keys on the healthy masters came from Redis (%.2f%%), want at least %.0f%%",
			healthyOK, healthyN, share(healthyOK, healthyN), 100*faultHealthyShare)
	}
	if deadN == 0 {
		t.Errorf("no decision for the dead master's keys during the outage")
	}
	if deadFromRedis > 0 {
		t.Errorf("%d decisions for the dead master's keys came from Redis during the outage", deadFromRedis)
	}
	if float64(deadRefused) < faultRefusedShare*float64(deadN) {
		t.Errorf("during the outage, the breakers refused %d of %d decisions for the dead master's keys, want at least %.0f%%",
			deadRefused, deadN, 100*faultRefusedShare)
	}
	if refusedStats < int64(deadRefused) {
		t.Errorf("Stats().Refused over the stores = %d, less than the %d refusals the decisions report", refusedStats, deadRefused)
	}
	switch {
	case firstOK == 0:
		t.Errorf("no decision from Redis for the restarted master's keys in the %v after Restart", lastEnd-restartedAt)
	case recovered-serving > faultRecovery:
		t.Errorf("every decision for the restarted master's keys from Redis only %v after it served again, want within %v (%v after Restart returned)",
			recovered-serving, faultRecovery, recovered-restartedAt)
	case lastEnd-recovered < faultSustained:
		t.Errorf("no window of %v in which every decision for the restarted master's keys came from Redis", faultSustained)
	}
	if late > afterDead/100 {
		t.Errorf("%d of %d decisions for the restarted master's keys failed after the recovery, want at most 1%%", late, afterDead)
	}
	if after == 0 {
		t.Errorf("no decision after the restart")
	}
}

// masterOf returns the master that owns key's slot, as the servers say,
// and checks that it is the one the cluster started with.
func masterOf(t testing.TB, cl *redistest.ClusterServer, key string) *redistest.Server {
	t.Helper()
	slot := redistest.KeySlot(key)
	if got := redisscript.Slot(key); got != slot {
		t.Fatalf("redisscript.Slot(%q) = %d, redistest.KeySlot = %d", key, got, slot)
	}
	m := cl.SlotOwner(slot)
	if m == nil {
		t.Fatalf("slot %d of %q has no owner", slot, key)
	}
	if m != initialOwner(cl, key) {
		t.Fatalf("slot %d of %q is owned by %s, not by %s as when the cluster started", slot, key, m.Addr, initialOwner(cl, key).Addr)
	}
	return m
}

// initialOwner returns the master that owned key's slot when the cluster
// started: Masters[i] owns slots [i*16384/n, (i+1)*16384/n) of n masters.
func initialOwner(cl *redistest.ClusterServer, key string) *redistest.Server {
	n, slot := len(cl.Masters), redistest.KeySlot(key)
	for i := n - 1; ; i-- {
		if i*redistest.SlotCount/n <= slot {
			return cl.Masters[i]
		}
	}
}

// hasAll reports whether states has a breaker for every address.
func hasAll(states map[string]core.BreakerState, addrs []string) bool {
	for _, a := range addrs {
		if _, ok := states[a]; !ok {
			return false
		}
	}
	return true
}

// The multi-tier checks: a "near" tier on a healthy master, small and slow
// to refill, and a "far" tier on the dead one.
const (
	nearRule      = "near"
	farRule       = "far"
	nearBurst     = 5
	multiRequests = 3 * nearBurst // per identity
	multiIDs      = 3             // identities per failure mode
)

// clusterMultiTier runs requests with one tier on a healthy master and one
// on victim, which is dead, and returns the figures. Each failure mode has
// a store of its own, new, so that both see the breaker closed first (the
// near tier's take sent, then given back) and then open (nothing sent);
// a third store, which only reads near buckets, checks what Redis holds.
//
// FailClosed: every request is denied as unavailable, with a
// *core.PartialError naming the far tier, and the near bucket is left
// full.
//
// FailOpen: the far tier counts as allowing and Redis decides the near
// tier alone: exactly nearBurst requests per identity are admitted, by the
// near tier's bucket, which is empty afterwards; every decision is
// degraded, with the PartialError.
//
// Both: the breakers of the healthy masters stay closed.
func clusterMultiTier(t *testing.T, f ClusterFault, cl *redistest.ClusterServer, victim *redistest.Server) string {
	t.Helper()
	prefix := NewPrefix()
	reader := f.NewStore(t, cl.Addrs(), prefix)
	policy := Policy(t,
		core.Rule{Name: nearRule, Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), nearBurst)},
		core.Rule{Name: farRule, Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(faultBurst), faultBurst)})
	near := policy.Rules()[0]
	var ids []string
	healthy := map[string]bool{} // the near tiers' masters
	for i := 0; len(ids) < 2*multiIDs; i++ {
		id := "m" + strconv.Itoa(i)
		// The victim is dead: SlotOwner no longer names it once the others
		// mark it failed. Nothing moved its slots.
		if m := initialOwner(cl, reader.Key(nearRule, id)); m != victim && initialOwner(cl, reader.Key(farRule, id)) == victim {
			ids = append(ids, id)
			healthy[m.Addr] = true
		}
	}
	ctx := context.Background()
	// Errors of single requests, a few per failure mode; those of whole
	// identities and stores are all reported.
	rep := &reporter{t: t, max: 4}
	// ready waits until st knows the slot map. A store learns it from
	// whichever node answers CLUSTER SLOTS, again after a failure when a
	// take asks for a domain: until then every key is in one domain, and
	// a refusal is whole.
	ready := func(st FaultStore) {
		t.Helper()
		probe := &core.Take{Cost: 0, Buckets: []core.Bucket{{Rule: nearRule, Key: ids[0], Limit: &near.Limit}}, States: make([]core.BucketState, 1)}
		for deadline := time.Now().Add(10 * time.Second); !hasAll(st.Breakers(), cl.Addrs()); {
			if time.Now().After(deadline) {
				t.Fatalf("multi-tier store: breakers %v, want one for each master %v", st.Breakers(), cl.Addrs())
			}
			_ = st.Store.Take(ctx, probe)
			time.Sleep(10 * time.Millisecond)
		}
	}
	ready(reader)
	// checkPartial checks that err is a PartialError naming the far tier
	// (index 1, in policy order) alone.
	checkPartial := func(what string, err error) {
		t.Helper()
		var pe *core.PartialError
		if !errors.As(err, &pe) || !slices.Equal(pe.Failed, []int{1}) {
			rep.errorf("%s: Decision.Err %v; want a *core.PartialError naming the far tier, [1]", what, err)
		}
	}
	// nearRemaining reads the near bucket of id, without taking.
	nearRemaining := func(id string) int64 {
		t.Helper()
		tk := &core.Take{Cost: 0, Buckets: []core.Bucket{{Rule: nearRule, Key: id, Limit: &near.Limit}}, States: make([]core.BucketState, 1)}
		if err := reader.Store.Take(ctx, tk); err != nil {
			t.Errorf("%s: reading the near bucket on a healthy master: %v", id, err)
			return -1
		}
		return tk.States[0].Remaining
	}
	// checkBreakers checks that st's breakers of the healthy masters are
	// closed.
	checkBreakers := func(mode string, st FaultStore) {
		t.Helper()
		states := st.Breakers()
		for addr := range healthy {
			if states[addr] != core.BreakerClosed {
				t.Errorf("%s: the breaker of the healthy master %s is %v, want closed: the dead master's failures were counted against it (%s)",
					mode, addr, states[addr], sortedStates(states))
			}
		}
	}

	st := f.NewStore(t, cl.Addrs(), prefix)
	ready(st)
	closed := Limiter(t, policy, core.WithStore(st.Store), core.WithFailureMode(core.FailClosed))
	refunds := st.Refunds()
	var sent, refusedN int
	var held []int64
	for _, id := range ids[:multiIDs] {
		for i := range multiRequests {
			d, err := closed.Allow(ctx, core.Request{User: id})
			what := fmt.Sprintf("FailClosed %s #%d", id, i)
			if !errors.Is(err, core.ErrUnavailable) || d.Allowed || d.Reason != core.ReasonUnavailable || !d.Degraded || d.RetryAfter <= 0 {
				rep.errorf("%s: Allow = %s, %v; want a denial wrapping ErrUnavailable", what, brief(d), err)
			}
			checkPartial(what, d.Err)
			if errors.Is(err, core.ErrBreakerOpen) {
				refusedN++
			} else {
				sent++
			}
		}
		got := nearRemaining(id)
		held = append(held, got)
		if got != nearBurst {
			t.Errorf("FailClosed %s: the near bucket holds %d after %d denied requests, want %d: denied requests consumed", id, got, multiRequests, nearBurst)
		}
	}
	gaveBack := st.Refunds() - refunds
	if refusedN == 0 {
		t.Errorf("FailClosed: the breaker never refused the dead master in %d requests", multiIDs*multiRequests)
	}
	if sent > 0 && gaveBack == 0 {
		t.Errorf("FailClosed: %d requests sent while the breaker was closed, none given back (Stats().Refunds)", sent)
	}
	checkBreakers("FailClosed", st)
	closedStates := sortedStates(st.Breakers())

	st = f.NewStore(t, cl.Addrs(), prefix)
	ready(st)
	rep = &reporter{t: t, max: 4}
	lenient := Limiter(t, policy, core.WithStore(st.Store), core.WithFailureMode(core.FailOpen))
	var admitted, left []int64
	for _, id := range ids[multiIDs:] {
		var n int64
		for i := range multiRequests {
			d, err := lenient.Allow(ctx, core.Request{User: id})
			what := fmt.Sprintf("FailOpen %s #%d", id, i)
			checkPartial(what, d.Err)
			switch {
			case err != nil || !d.Degraded || d.Rule != nearRule || d.Limit != nearBurst:
				rep.errorf("%s: Allow = %s, %v; want a degraded decision of the near tier", what, brief(d), err)
			case d.Allowed:
				n++
				if want := nearBurst - n; d.Remaining != want {
					rep.errorf("%s: Allow = %s; want Remaining %d", what, brief(d), want)
				}
			case d.Reason != core.ReasonLimited || d.RetryAfter <= 0:
				rep.errorf("%s: Allow = %s; want a denial by the near tier's limit", what, brief(d))
			}
		}
		admitted = append(admitted, n)
		if n != nearBurst {
			t.Errorf("FailOpen %s: the near tier admitted %d of %d, want its burst %d", id, n, multiRequests, nearBurst)
		}
		got := nearRemaining(id)
		left = append(left, got)
		if got != 0 {
			t.Errorf("FailOpen %s: the near bucket holds %d after its burst was admitted, want 0", id, got)
		}
	}
	checkBreakers("FailOpen", st)
	return fmt.Sprintf("FailClosed %d requests denied (%d sent, given back %d times; %d refused by the breaker), near buckets then hold %v of %d, breakers %s; "+
		"FailOpen: the near tier admitted %v of %d per identity, near buckets then hold %v, breakers %s",
		multiIDs*multiRequests, sent, gaveBack, refusedN, held, nearBurst, closedStates, admitted, multiRequests, left, sortedStates(st.Breakers()))
}

// sortedStates formats breaker states in address order.
func sortedStates(states map[string]core.BreakerState) string {
	var s string
	for _, k := range slices.Sorted(maps.Keys(states)) {
		s += fmt.Sprintf("%s=%v ", k, states[k])
	}
	return s
}

// brief formats the summary of d, without its tiers.
func brief(d core.Decision) string {
	return fmt.Sprintf("{Allowed:%v Reason:%v Rule:%q Limit:%d Remaining:%d RetryAfter:%v Degraded:%v Err:%v}",
		d.Allowed, d.Reason, d.Rule, d.Limit, d.Remaining, d.RetryAfter, d.Degraded, d.Err)
}
