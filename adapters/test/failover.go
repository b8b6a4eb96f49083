package redistests

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// The bounds RunFailover asserts and the shape of its load.
const (
	// FailoverDecisionTimeout is the timeout of the context each decision of
	// the load is made with, so that no decision waits on a dead master for
	// longer: the clients' own timeouts should be shorter.
	FailoverDecisionTimeout = time.Second

	// failoverSlowest bounds the slowest decision: the context's timeout
	// plus slack for a machine shared with other -race test binaries, where
	// timers fire late.
	failoverSlowest = FailoverDecisionTimeout + 2*time.Second

	// failoverRecovery bounds the time from the kill to the first decision
	// from Redis for the failed master's keys, and to the last failed one.
	// A promotion takes about 4s (a 2s down-after or node timeout, then an
	// election); the rest is the clients noticing, on a loaded machine.
	failoverRecovery = 20 * time.Second

	// failoverSustained is how long every decision for the failed master's
	// keys must come from Redis before recovery counts as full; the load
	// runs failoverSustained and a half past the last failure, so that a
	// decision in flight when it stops may still fail without shortening
	// the window below failoverSustained.
	failoverSustained = time.Second

	// replicationWindow is how far a replica is assumed to trail its master
	// at most, in time. Redis writes a command's reply and its replication
	// stream from the same event-loop iteration, and what it has written
	// to the replica's socket reaches the replica even if the master dies
	// next, so on loopback a replica trails by microseconds; a second leaves
	// room for a replica process that the scheduler holds back on a machine
	// shared with other test binaries.
	replicationWindow = time.Second

	// failoverBurst is every key's burst. At one token an hour, 2000 tokens
	// take 83 days to refill (core allows at most 100), and less than 1% of
	// a token refills during a run: the refill allowance is 0.
	failoverBurst = 2000

	failoverRule = "failover"
)

// Failover is one master failover under load, for RunFailover. All fields
// are required unless said otherwise.
type Failover struct {
	// Name names the store and the topology in the figures' log line:
	// "goredis/sentinel".
	Name string
	// NewStore returns a store with prefix on a client of its own, whose
	// timeouts are short (below FailoverDecisionTimeout) and which does not
	// retry much; the store must have a Key(rule, id string) string method
	// that names a bucket's Redis key. RunFailover makes several.
	NewStore func(t testing.TB, prefix string) core.Store
	// Masters are the addresses of the masters before the kill, Victim
	// among them: keys are picked so that every master holds some.
	Masters []string
	// Victim is the address of the master that Kill ends.
	Victim string
	// MasterOf returns the address of the master that holds a Redis key
	// before the kill.
	MasterOf func(t testing.TB, key string) string
	// Kill ends the victim with SIGKILL and returns once it has exited.
	Kill func()
	// Promoted reports whether, as the servers see it, a live node other
	// than the victim now holds key, one of the victim's Redis keys. It is
	// polled after the kill, for the figures only.
	Promoted func(key string) bool
	// Instances is how many stores, each on a client of its own with a
	// limiter of its own, share the buckets: 4 when 0. Workers is how many
	// goroutines each instance runs: 8 when 0. KeysPerMaster is how many
	// keys each master holds: 16 when 0.
	Instances, Workers, KeysPerMaster int
}

// outcome is what became of one decision of the load.
type outcome uint8

const (
	allowed  outcome = iota // Redis allowed it
	denied                  // Redis denied it
	degraded                // the store failed; FailClosed denied it
	gaveUp                  // its context ended first: no decision
)

// failoverRecord is one decision of the load.
type failoverRecord struct {
	begin, end time.Duration // since the load began
	remaining  int64         // Decision.Remaining, when Redis decided
	key        int32         // index into the run's keys
	outcome    outcome
}

func (r *failoverRecord) ok() bool { return r.outcome <= denied }

// failoverLive is what the workers tell the test goroutine while they run.
// Times are nanoseconds since the load began; 0 is none yet.
type failoverLive struct {
	killed        atomic.Int64 // when Kill returned
	firstOK       atomic.Int64 // the end of the first decision from Redis for a victim key begun after the kill
	lastBad       atomic.Int64 // the end of the last failed decision for a victim key
	victimAllowed atomic.Int64 // admissions by Redis for victim keys
}

func storeMin(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if (old != 0 && old <= v) || a.CompareAndSwap(old, v) {
			return
		}
	}
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if old >= v || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// RunFailover measures what killing a master costs limiters that share
// their buckets through Redis, and asserts what must hold.
//
// Several instances, each a store on a client of its own with a FailClosed
// limiter, run many goroutines that take one token at a time from keys on
// every master, each key a bucket of failoverBurst tokens refilling at one
// an hour. Once the load has been admitted for a while, Kill ends the
// victim with SIGKILL; the load runs on until every decision for the
// victim's keys has come from Redis again for failoverSustained. Then every
// bucket is drained (AllowN of what Redis says remains) until Redis says
// none remain, so that every token a bucket forgot has been admitted again.
//
// Replication is asynchronous: the replica that takes over may miss the
// victim's last writes, and the tokens they spent are admitted again. The
// figures, logged as one line that starts "failover[Name]:":
//
//   - over-admission: the tokens Redis admitted above the math, the sum over
//     keys of max(0, admitted - burst - refill), where refill is the whole
//     tokens the rate adds between the first and the last decision (0 in
//     any run shorter than an hour);
//   - double-spent: the tokens admitted twice. With no refill, each
//     admission leaves a bucket a different Remaining; two admissions that
//     leave the same one spent the same token. Over-admission is at most
//     this, less where a failed decision's take ran but its reply was lost,
//     which under-admits;
//   - the bound: admissions Redis acknowledged for the victim's keys in the
//     replicationWindow before the kill. A token is admitted twice only if
//     the victim acknowledged its take and died before the replica received
//     it; if the replica trailed by less than replicationWindow, that take
//     is one of these. RunFailover asserts double-spent <= bound;
//   - in-flight failed: decisions for the victim's keys begun before the
//     kill that failed. Their takes may have run, spending tokens no
//     admission counts, which hides as many over-admitted ones;
//   - recovery: promoted, when the servers named a new master (polled);
//     first, from the kill to the first decision from Redis for the
//     victim's keys; full, from the kill to the start of the first window
//     of failoverSustained in which every decision for them came from Redis,
//     and late failures, those after it;
//   - degraded: decisions the failure mode made from the kill on, and
//     timed out, those whose context ended first, each also for keys on
//     other masters; failures before the kill, if any; the slowest
//     decision.
//
// RunFailover asserts: no Redis-backed decision is wrong for the rule, no
// degraded decision admits, no decision takes longer than failoverSlowest,
// Redis decides for the victim's keys again within failoverRecovery, fully
// for failoverSustained; the victim's keys were being admitted when it died,
// double-spent and over-admitted tokens are at most the bound, and keys on
// other masters are exact.
func RunFailover(t *testing.T, f Failover) {
	instances, workers, perMaster := f.Instances, f.Workers, f.KeysPerMaster
	if instances == 0 {
		instances = 4
	}
	if workers == 0 {
		workers = 8
	}
	if perMaster == 0 {
		perMaster = 16
	}
	policy := Policy(t, core.Rule{Name: failoverRule, Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), failoverBurst)})
	limit := policy.Rules()[0].Limit
	prefix := NewPrefix()
	limiters := make([]*core.Limiter, instances)
	var namer interface{ Key(rule, id string) string }
	for i := range limiters {
		st := f.NewStore(t, prefix)
		if i == 0 {
			var ok bool
			if namer, ok = st.(interface{ Key(rule, id string) string }); !ok {
				t.Fatalf("%T has no Key method to place the keys on masters", st)
			}
		}
		limiters[i] = Limiter(t, policy, core.WithStore(st), core.WithFailureMode(core.FailClosed))
	}

	// Keys: perMaster on every master, in the order they come.
	var (
		ids        []string
		onVictim   []bool
		victimKey  string // a Redis key of the victim, for Promoted
		victimKeys int
	)
	count := map[string]int{}
	for _, m := range f.Masters {
		count[m] = 0
	}
	for i := 0; len(ids) < perMaster*len(f.Masters); i++ {
		if i > 1000*perMaster*len(f.Masters) {
			t.Fatalf("found only %d keys with %d on each of %d masters: %v", len(ids), perMaster, len(f.Masters), count)
		}
		id := "k" + strconv.Itoa(i)
		key := namer.Key(failoverRule, id)
		m := f.MasterOf(t, key)
		n, known := count[m]
		if !known {
			t.Fatalf("key %q is on %q, not one of the masters %v", key, m, f.Masters)
		}
		if n == perMaster {
			continue
		}
		count[m]++
		ids = append(ids, id)
		onVictim = append(onVictim, m == f.Victim)
		if m == f.Victim {
			victimKeys++
			victimKey = key
		}
	}
	if victimKeys == 0 {
		t.Fatalf("no key on the victim %s, which is not among the masters %v", f.Victim, f.Masters)
	}
	reqs := make([]core.Request, len(ids))
	for i, id := range ids {
		reqs[i] = core.Request{User: id}
	}

	// The load.
	var (
		live    failoverLive
		stop    atomic.Bool
		wrong   atomic.Int64 // decisions that break the rule's math or the failure mode
		wg      sync.WaitGroup
		mu      sync.Mutex
		records [][]failoverRecord
		// The first error of a decision for a victim key and for another.
		firstErr [2]atomic.Pointer[error]
		origin   = time.Now()
		bad      = func(format string, args ...any) {
			if wrong.Add(1) <= 10 {
				t.Errorf(format, args...)
			}
		}
	)
	for i, lim := range limiters {
		for w := range workers {
			wg.Go(func() {
				var mine []failoverRecord
				// Every worker walks all keys, each from another start.
				k := (i*workers + w) * 7 % len(reqs)
				for !stop.Load() {
					k = (k + 1) % len(reqs)
					r := failoverRecord{key: int32(k), begin: time.Since(origin)}
					ctx, cancel := context.WithTimeout(context.Background(), FailoverDecisionTimeout)
					d, err := lim.Allow(ctx, reqs[k])
					cancel()
					r.end = time.Since(origin)
					switch {
					case err == nil && !d.Degraded:
						r.outcome, r.remaining = denied, d.Remaining
						if d.Allowed {
							r.outcome = allowed
						}
						if d.Rule != failoverRule || d.Limit != failoverBurst || d.Remaining < 0 || d.Remaining >= failoverBurst ||
							d.Allowed != (d.Reason == core.ReasonNone) || (!d.Allowed && (d.Reason != core.ReasonLimited || d.Remaining != 0)) {
							bad("key %s: Allow = %+v; not a decision of the rule %v", ids[k], d, limit)
						}
					case d.Degraded:
						r.outcome = degraded
						if d.Allowed || !errors.Is(err, core.ErrUnavailable) {
							bad("key %s: Allow = %+v, %v; want a FailClosed denial wrapping ErrUnavailable", ids[k], d, err)
						}
					default:
						r.outcome = gaveUp
						if !errors.Is(err, context.DeadlineExceeded) {
							bad("key %s: Allow = %+v, %v; want a decision or the context's deadline", ids[k], d, err)
						}
					}
					if err != nil {
						which := 0
						if !onVictim[k] {
							which = 1
						}
						firstErr[which].CompareAndSwap(nil, &err)
					}
					if onVictim[k] {
						switch killed := live.killed.Load(); {
						case !r.ok():
							storeMax(&live.lastBad, int64(r.end))
						case killed != 0 && int64(r.begin) >= killed:
							storeMin(&live.firstOK, int64(r.end))
						}
						if r.outcome == allowed {
							live.victimAllowed.Add(1)
						}
					}
					mine = append(mine, r)
				}
				mu.Lock()
				records = append(records, mine)
				mu.Unlock()
			})
		}
	}
	halt := sync.OnceFunc(func() {
		stop.Store(true)
		wg.Wait()
	})
	t.Cleanup(halt)

	// Warm up until a quarter of the victim's tokens are spent, or a second
	// passed and some were: its buckets are being drained, not empty, when
	// it dies.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	warm := int64(victimKeys * failoverBurst / 4)
	for n := live.victimAllowed.Load(); n < warm && (n == 0 || time.Since(origin) < time.Second); n = live.victimAllowed.Load() {
		if time.Since(origin) > 15*time.Second {
			halt()
			t.Fatal("no admission for the victim's keys in 15s before the kill")
		}
		<-tick.C
	}
	killAt := time.Since(origin)
	f.Kill()
	killDone := time.Since(origin)
	live.killed.Store(int64(killDone))

	// Run until every decision for the victim's keys has come from Redis
	// for a while, or until failoverRecovery.
	var promoted time.Duration
	for {
		<-tick.C
		now := time.Since(origin)
		if promoted == 0 && f.Promoted(victimKey) {
			promoted = time.Since(origin)
		}
		if first := live.firstOK.Load(); first != 0 && now-time.Duration(max(first, live.lastBad.Load())) >= failoverSustained*3/2 {
			break
		}
		if now-killAt > failoverRecovery+failoverSustained*3/2 {
			break
		}
	}
	halt()
	var all []failoverRecord
	for _, rs := range records {
		all = append(all, rs...)
	}
	if len(all) == 0 {
		t.Fatal("the load made no decision")
	}

	// Drain every bucket: what Redis says remains is admitted in one take,
	// until it says none remains.
	type drainTake struct {
		key  int
		cost int64
	}
	var drains []drainTake
	drainFailures := 0
	recovered := live.firstOK.Load() != 0
	for k, req := range reqs {
		if !recovered && onVictim[k] {
			continue // the figures say so below
		}
		for attempt := 0; ; attempt++ {
			if attempt == 10 {
				t.Errorf("key %s: Redis still failed to drain the bucket after 10 attempts; its over-admission is not counted", ids[k])
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), FailoverDecisionTimeout)
			d, err := limiters[0].AllowN(ctx, req, 0)
			cancel()
			if err != nil || d.Degraded {
				drainFailures++
				continue
			}
			if d.Remaining == 0 {
				break
			}
			n := d.Remaining
			ctx, cancel = context.WithTimeout(context.Background(), FailoverDecisionTimeout)
			d, err = limiters[0].AllowN(ctx, req, n)
			cancel()
			switch {
			case err != nil || d.Degraded:
				// Its take may have run: those tokens go uncounted, which
				// can only hide over-admission; the log line counts these.
				drainFailures++
			case !d.Allowed || d.Remaining != 0:
				t.Errorf("key %s: AllowN(%d) after Redis said %[2]d remain = %+v; want allowed, 0 remaining", ids[k], n, d)
				drainFailures++
			default:
				drains = append(drains, drainTake{k, n})
			}
		}
	}

	// Tokens per key: each admission of cost c leaving m spent tokens
	// m+1 ... m+c; with no refill, a token spent twice was forgotten.
	spent := make([][]uint16, len(ids))
	admitted := make([]int64, len(ids))
	for k := range spent {
		spent[k] = make([]uint16, failoverBurst+1)
	}
	var (
		first, lastVictimEnd, slowest time.Duration
		badEnds                       []time.Duration // the ends of failed decisions for the victim's keys
		otherFirstBad, otherLastBad   time.Duration   // failures for keys on other masters, from the kill on
		firstBegin, lastEnd           = all[0].begin, all[0].end
		acked, inFlight, beforeKill   int
		degradedVictim, degradedOther int
		gaveUpVictim, gaveUpOther     int
	)
	for i := range all {
		r := &all[i]
		firstBegin, lastEnd = min(firstBegin, r.begin), max(lastEnd, r.end)
		slowest = max(slowest, r.end-r.begin)
		if r.end-r.begin > failoverSlowest {
			bad("key %s: a decision took %v, more than %v", ids[r.key], r.end-r.begin, failoverSlowest)
		}
		if r.outcome == allowed {
			admitted[r.key]++
			if r.remaining < failoverBurst { // else reported by the worker
				spent[r.key][r.remaining+1]++
			}
		}
		if !r.ok() && r.end < killAt {
			beforeKill++
		}
		if !r.ok() && r.end >= killAt {
			if !onVictim[r.key] {
				if otherFirstBad == 0 || r.end < otherFirstBad {
					otherFirstBad = r.end
				}
				otherLastBad = max(otherLastBad, r.end)
			}
			switch {
			case r.outcome == degraded && onVictim[r.key]:
				degradedVictim++
			case r.outcome == degraded:
				degradedOther++
			case onVictim[r.key]:
				gaveUpVictim++
			default:
				gaveUpOther++
			}
		}
		if !onVictim[r.key] {
			continue
		}
		lastVictimEnd = max(lastVictimEnd, r.end)
		switch {
		case r.ok() && r.begin >= killDone:
			if first == 0 || r.end < first {
				first = r.end
			}
		case !r.ok():
			badEnds = append(badEnds, r.end)
		}
		if r.begin < killDone {
			// Begun before the victim was gone: the victim may have run it.
			if r.outcome == allowed && r.end >= killAt-replicationWindow {
				acked++
			}
			if !r.ok() && r.end >= killAt {
				inFlight++
			}
		}
	}
	for _, d := range drains {
		admitted[d.key] += d.cost
		for m := range d.cost {
			spent[d.key][m+1]++
		}
	}
	refill := int64((lastEnd - firstBegin) / limit.Interval())
	var over, doubled, overOther, doubledOther int64
	for k := range ids {
		o := max(0, admitted[k]-failoverBurst-refill)
		var twice int64
		for _, n := range spent[k] {
			twice += int64(max(n, 1) - 1)
		}
		if onVictim[k] {
			over, doubled = over+o, doubled+twice
		} else {
			overOther, doubledOther = overOther+o, doubledOther+twice
		}
	}

	rate := float64(len(all)) / (lastEnd - firstBegin).Seconds()
	rel := func(d time.Duration) time.Duration { return (d - killAt).Round(time.Millisecond) }
	after := func(d time.Duration, seen bool) string {
		if !seen {
			return "none"
		}
		return rel(d).String()
	}
	// Full recovery: the start of the first window of failoverSustained,
	// from the first decision from Redis on, in which no decision for the
	// victim's keys failed. Failures after it are late: a loaded machine
	// can time out a call to a healthy server too.
	slices.Sort(badEnds)
	full, late := first, 0
	for _, b := range badEnds {
		switch {
		case first == 0 || b <= full:
		case b-full < failoverSustained:
			full = b
		default:
			late++
		}
	}
	t.Logf("failover[%s]: over-admission=%d tokens over %d keys on the failed master (double-spent=%d, bound=%d admitted in the %v before the kill, in-flight failed=%d), "+
		"recovery promoted=%v first=%v full=%v (late failures=%d), degraded=%d (+%d timed out; other masters %d+%d from %v to %v), before-kill failures=%d, slowest=%v, "+
		"decisions=%d at %.0f/s by %dx%d workers, %d keys in all, drain failures=%d",
		f.Name, over, victimKeys, doubled, acked, replicationWindow, inFlight,
		after(promoted, promoted != 0), after(first, first != 0), after(full, first != 0), late, degradedVictim+degradedOther, gaveUpVictim+gaveUpOther, degradedOther, gaveUpOther, after(otherFirstBad, otherFirstBad != 0), after(otherLastBad, otherLastBad != 0), beforeKill, slowest.Round(time.Millisecond),
		len(all), rate, instances, workers, len(ids), drainFailures)

	for i, which := range []string{"the failed master", "other masters"} {
		if err := firstErr[i].Load(); err != nil {
			t.Logf("first error for keys on %s: %v", which, *err)
		}
	}

	switch {
	case first == 0:
		t.Errorf("no decision from Redis for the victim's keys in the %v after the kill", lastVictimEnd-killAt)
	case first-killAt > failoverRecovery:
		t.Errorf("first decision from Redis for the victim's keys %v after the kill, want within %v", rel(first), failoverRecovery)
	}
	if first != 0 && full-killAt > failoverRecovery {
		t.Errorf("full recovery of the victim's keys %v after the kill, want within %v", rel(full), failoverRecovery)
	}
	if first != 0 && lastVictimEnd-full < failoverSustained {
		t.Errorf("no window of %v in which every decision for the victim's keys came from Redis: the last began %v after the kill, the load stopped %v after it",
			failoverSustained, rel(full), rel(lastVictimEnd))
	}
	if acked == 0 {
		t.Errorf("no admission for the victim's keys in the %v before the kill: the measurement saw no write the replica could miss", replicationWindow)
	}
	if doubled > int64(acked) || over > int64(acked) {
		t.Errorf("%d tokens double-spent and %d over-admitted on the victim's keys, more than the %d admissions acknowledged in the %v before the kill",
			doubled, over, acked, replicationWindow)
	}
	if overOther != 0 || doubledOther != 0 {
		t.Errorf("keys on the masters that stayed up: %d tokens over-admitted, %d double-spent; want 0, 0", overOther, doubledOther)
	}
}
