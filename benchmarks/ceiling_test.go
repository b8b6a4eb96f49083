package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// memoryCeiling is a reference point of the memory scenarios with one
// subject (see memoryCeilings): not a peer, never a verdict's yardstick,
// but what the machine allows, measured in the same run as the rest.
type memoryCeiling struct {
	name  string
	build func(tb testing.TB, q quota, s *subject, tiers int, deny bool) impl
}

// memoryCeilings are the memory scenarios' ceilings, run where a scenario
// has one subject.
var memoryCeilings = []memoryCeiling{
	{name: "ceiling_clock", build: func(_ testing.TB, _ quota, _ *subject, _ int, deny bool) impl {
		return &ceilingClock{mono0: time.Now(), answer: !deny}
	}},
	{name: "ceiling_gcra", build: func(tb testing.TB, q quota, s *subject, tiers int, _ bool) impl {
		return newCeilingGCRA(tb, q, s, tiers, false)
	}},
	{name: "ceiling_store", build: func(tb testing.TB, q quota, s *subject, tiers int, _ bool) impl {
		return newCeilingGCRA(tb, q, s, tiers, true)
	}},
}

// ceilingBuilders returns the ceilings of sc, whose subjects are subs, as
// builders of one key.
func ceilingBuilders(sc scenario, subs []subject) []builder {
	if len(subs) != 1 {
		return nil
	}
	var out []builder
	for _, c := range memoryCeilings {
		out = append(out, builder{name: c.name, oneKey: true, build: func(tb testing.TB, q quota, tiers, _ int) impl {
			return c.build(tb, q, &subs[0], tiers, sc.deny)
		}})
	}
	return out
}

// ceilingClock reads the monotonic clock once per decision, as our memory
// store does, and answers what the scenario expects: it decides nothing.
// It is what any limiter that reads a clock per decision pays at least.
type ceilingClock struct {
	mono0  time.Time
	answer bool
	sink   atomic.Int64
}

func (c *ceilingClock) allow(context.Context, *subject) (bool, error) {
	if time.Since(c.mono0) < 0 {
		// Never true: the reading is used, so that it is not optimized
		// away, without a store per decision.
		c.sink.Add(1)
	}
	return c.answer, nil
}

// ceilingGCRA is the least an exact decision costs here: per tier one slot
// of a table found by hashing the key, holding the bucket's theoretical
// arrival time (GCRA) in one integer, and per decision one read of the
// monotonic clock. One tier is decided by one compare-and-swap; several
// are locked by compare-and-swap in tier order (all deciders lock in the
// same order: no deadlock), decided, and written only if all allow. Each
// tier's remaining whole tokens are computed, as a limiter reports them.
// It holds the buckets of one subject only, made when it is built: none of
// the work of creating, finding among many or reclaiming buckets, nor of
// the identities, rule names, reset times or tier details of a decision.
//
// Built with store, it is ceiling_store: the same decisions, with the
// subject's buckets among ceilingStoreKeys others in a table 38% full (the
// memory store keeps its tables 3/8 to 3/4 full), and each decision
// reported to the caller in a ceilingDecision, what a response's header
// fields are made from.
// It is what a store that finds buckets among many and tells what it
// decided costs at least, still without creating, growing, reclaiming,
// validating identities or any layer above the store.
type ceilingGCRA struct {
	seed          maphash.Seed
	slots         []*gcraSlot
	mask          uint64
	mono0         time.Time
	interval, tau int64 // ns per token; tau = burst * interval
	burst         int64
	tiers         int
	store         bool
}

// ceilingStoreKeys is how many buckets ceiling_store holds besides its
// subject's: as many as the Keys100k scenario's.
const ceilingStoreKeys = 100_000

// ceilingDecision is what ceiling_store reports of a decision: the tier
// that decided it (on allowing, the one with the fewest tokens left; on
// denying, the denying one that frees up last), with what the header
// fields of a response need.
type ceilingDecision struct {
	Allowed                bool
	Rule                   string
	Scope                  core.Scope
	Limit, Remaining       int64
	ResetAfter, RetryAfter time.Duration
}

// gcraSlot is one bucket, alone on its cache line.
type gcraSlot struct {
	key string
	tat atomic.Int64 // ns since mono0; gcraLocked while a multi-tier decision holds it
	_   [40]byte
}

const gcraLocked = -1

var errCeilingKey = errors.New("ceiling_gcra, ceiling_store: a key it was not built with")

func newCeilingGCRA(tb testing.TB, q quota, s *subject, tiers int, store bool) *ceilingGCRA {
	size := 64
	if store {
		// 38% full: the memory store keeps each of its tables between
		// 3/8 and 3/4 full (it doubles one past 3/4), so this is a
		// table of its size at the emptiest, the fewest probes.
		size = 1 << 18
	}
	c := &ceilingGCRA{
		seed:     maphash.MakeSeed(),
		slots:    make([]*gcraSlot, size),
		mask:     uint64(size - 1),
		mono0:    time.Now(),
		interval: int64(q.period) / q.n,
		burst:    q.n,
		tiers:    tiers,
		store:    store,
	}
	if c.interval < 1 {
		tb.Fatalf("ceiling_gcra, ceiling_store: a quota of %d per %v is below 1 ns a token", q.n, q.period)
	}
	c.tau = c.interval * q.n
	for _, k := range s.keys[:tiers] {
		c.add(k)
	}
	if store {
		for i := range ceilingStoreKeys {
			c.add("other:" + strconv.Itoa(i))
		}
	}
	return c
}

// add adds a bucket for key, which it does not hold.
func (c *ceilingGCRA) add(key string) {
	i := maphash.String(c.seed, key) & c.mask
	for c.slots[i] != nil {
		i = (i + 1) & c.mask
	}
	c.slots[i] = &gcraSlot{key: key}
}

// find returns the slot of key, or nil.
func (c *ceilingGCRA) find(key string) *gcraSlot {
	for i := maphash.String(c.seed, key) & c.mask; ; i = (i + 1) & c.mask {
		e := c.slots[i]
		if e == nil || e.key == key {
			return e
		}
	}
}

func (c *ceilingGCRA) allow(_ context.Context, s *subject) (bool, error) {
	if !c.store {
		return c.decide(s, nil)
	}
	// As a limiter's caller does: a decision declared per request.
	var d ceilingDecision
	return c.decide(s, &d)
}

// decide decides one request of s and, unless d is nil, reports it in d.
func (c *ceilingGCRA) decide(s *subject, d *ceilingDecision) (bool, error) {
	now := int64(time.Since(c.mono0))
	if c.tiers == 1 {
		e := c.find(s.keys[0])
		if e == nil {
			return false, errCeilingKey
		}
		for {
			tat := e.tat.Load()
			next := max(tat, now) + c.interval
			if next-now > c.tau {
				left := (c.tau - (tat - now)) / c.interval
				if d != nil {
					c.report(d, 0, false, left, tat-now, next-now-c.tau)
				}
				return false, checkLeft(left)
			}
			if e.tat.CompareAndSwap(tat, next) {
				left := (c.tau - (next - now)) / c.interval
				if d != nil {
					c.report(d, 0, true, left, next-now, 0)
				}
				return true, checkLeft(left)
			}
		}
	}
	var (
		ents [maxTiers]*gcraSlot
		tats [maxTiers]int64
	)
	n := c.tiers
	for i, k := range s.keys[:n] {
		if ents[i] = c.find(k); ents[i] == nil {
			for j := range i {
				ents[j].tat.Store(tats[j])
			}
			return false, errCeilingKey
		}
		tats[i] = ents[i].lock()
	}
	allowed, least := true, int64(1<<62)
	for i := range n {
		next := max(tats[i], now) + c.interval
		if next-now > c.tau {
			allowed = false
		}
		least = min(least, (c.tau-(next-now))/c.interval)
	}
	for i := range n {
		tat := tats[i]
		if allowed {
			tat = max(tat, now) + c.interval
		}
		ents[i].tat.Store(tat)
	}
	if d != nil {
		c.reportTiers(d, tats[:n], now, allowed)
	}
	return allowed, checkLeft(least)
}

// reportTiers reports in d the decision of several tiers, whose TATs were
// tats before it. Every tier has the same limit, so the tier with the
// fewest tokens left, or the denying tier that frees up last, is the one
// whose next TAT is the latest.
func (c *ceilingGCRA) reportTiers(d *ceilingDecision, tats []int64, now int64, allowed bool) {
	by, latest := 0, int64(-1)
	for i, tat := range tats {
		next := max(tat, now) + c.interval
		if (allowed || next-now > c.tau) && next > latest {
			by, latest = i, next
		}
	}
	from := max(tats[by], now)
	if allowed {
		c.report(d, by, true, (c.tau-(latest-now))/c.interval, latest-now, 0)
		return
	}
	c.report(d, by, false, (c.tau-(from-now))/c.interval, from-now, latest-now-c.tau)
}

// report writes in d a decision by tier, with left whole tokens left (none
// when negative) and the reset and retry times in ns.
func (c *ceilingGCRA) report(d *ceilingDecision, tier int, allowed bool, left, resetAfter, retryAfter int64) {
	*d = ceilingDecision{
		Allowed:    allowed,
		Rule:       tierDefs[tier].rule,
		Scope:      tierDefs[tier].scope,
		Limit:      c.burst,
		Remaining:  max(left, 0),
		ResetAfter: time.Duration(resetAfter),
		RetryAfter: time.Duration(retryAfter),
	}
}

// lock takes e's TAT for a multi-tier decision and returns it.
func (e *gcraSlot) lock() int64 {
	for {
		tat := e.tat.Load()
		if tat != gcraLocked && e.tat.CompareAndSwap(tat, gcraLocked) {
			return tat
		}
		runtime.Gosched()
	}
}

var errNegativeLeft = errors.New("ceiling_gcra: negative remaining tokens")

// checkLeft uses a remaining count, so that computing it is not optimized
// away: it is never negative for an allowed decision.
func checkLeft(left int64) error {
	if left < -1<<62 {
		return errNegativeLeft
	}
	return nil
}

// TestCeilingGCRAExact checks that ceiling_gcra and ceiling_store are the
// exact limiter their figures stand for: under 64 goroutines at once each
// admits its limit and no more, on one tier and on three (all or nothing:
// each tier's bucket holds exactly what the admitted requests took); and
// that ceiling_store reports each decision as it is: the admitted ones
// with the tokens each left, the denied ones with none left and a retry
// time.
func TestCeilingGCRAExact(t *testing.T) {
	for _, store := range []bool{false, true} {
		for _, tiers := range []int{1, 3} {
			t.Run(fmt.Sprintf("store=%v/tiers=%d", store, tiers), func(t *testing.T) {
				checkCeilingExact(t, store, tiers)
			})
		}
	}
}

func checkCeilingExact(t *testing.T, store bool, tiers int) {
	s := newSubject("admission", tiers)
	c := newCeilingGCRA(t, admissionQuota, &s, tiers, store)
	var (
		admitted, errs atomic.Int64
		mu             sync.Mutex
		left           []int64  // tokens left, by admitted decision
		bad            []string // decisions reported wrong
		wg             sync.WaitGroup
		start          = make(chan struct{})
	)
	for range admissionGoroutines {
		wg.Go(func() {
			<-start
			var mine []int64
			for range admissionAttempts {
				// ceiling_gcra through allow, as the benchmarks run
				// it; ceiling_store through decide, to read what it
				// reports.
				var d ceilingDecision
				var ok bool
				var err error
				if store {
					ok, err = c.decide(&s, &d)
				} else {
					ok, err = c.allow(context.Background(), &s)
				}
				switch {
				case err != nil:
					errs.Add(1)
					continue
				case ok:
					admitted.Add(1)
				}
				if !store {
					continue
				}
				switch {
				case ok != d.Allowed || d.Rule != tierDefs[0].rule || d.Scope != tierDefs[0].scope || d.Limit != admissionQuota.n:
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%v: %+v", ok, d))
					mu.Unlock()
				case ok:
					mine = append(mine, d.Remaining)
				case d.Remaining != 0 || d.RetryAfter <= 0 || d.ResetAfter <= time.Duration(c.tau-c.interval):
					mu.Lock()
					bad = append(bad, fmt.Sprintf("denied: %+v", d))
					mu.Unlock()
				}
			}
			mu.Lock()
			left = append(left, mine...)
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if admitted.Load() != admissionQuota.n || errs.Load() != 0 {
		t.Errorf("%d admitted, %d errors; want %d and none", admitted.Load(), errs.Load(), admissionQuota.n)
	}
	// Every bucket is ahead of the start by what the admitted took.
	for _, k := range s.keys[:tiers] {
		e := c.find(k)
		if lead := e.tat.Load() - int64(time.Since(c.mono0)); lead <= c.tau-2*c.interval || lead > c.tau {
			t.Errorf("bucket %q is %d ns ahead, want about tau %d", k, lead, c.tau)
		}
	}
	if store {
		// The k-th admitted decision leaves n-k tokens, or n-k-1 when
		// it read the clock before the first one did (it reports what
		// is left at its own reading, which is earlier): of the counts
		// reported, at least n-m-1 and at most n-m are m or more.
		n := admissionQuota.n
		for m := range n {
			atLeast := int64(0)
			for _, l := range left {
				if l >= m {
					atLeast++
				}
			}
			if atLeast > n-m || atLeast < n-m-1 {
				slices.Sort(left)
				t.Errorf("%d admitted decisions left %d or more tokens, want %d or %d; all: %v", atLeast, m, n-m-1, n-m, left)
				break
			}
		}
		if len(bad) > 0 {
			t.Errorf("%d decisions reported wrong, the first: %s", len(bad), bad[0])
		}
	}
	if _, err := c.allow(context.Background(), &subject{keys: []string{"elsewhere", "x", "y"}}); !errors.Is(err, errCeilingKey) {
		t.Errorf("a key it was not built with: %v, want errCeilingKey", err)
	}
}

// TestCeilingStoreTier checks that ceiling_store reports the tier that
// decided: the one with the fewest tokens left, then the one that denies.
func TestCeilingStoreTier(t *testing.T) {
	s := newSubject("tier", 3)
	c := newCeilingGCRA(t, admissionQuota, &s, 3, true)
	// The third tier, global, has one token left.
	c.find(s.keys[2]).tat.Store(int64(time.Since(c.mono0)) + c.tau - c.interval)
	var d ceilingDecision
	if ok, err := c.decide(&s, &d); !ok || err != nil || d.Rule != tierDefs[2].rule || d.Remaining != 0 {
		t.Errorf("the last token of global: %v, %v, %+v; want allowed by global with none left", ok, err, d)
	}
	if ok, err := c.decide(&s, &d); ok || err != nil || d.Rule != tierDefs[2].rule || d.RetryAfter <= 0 || d.RetryAfter > time.Duration(c.interval) {
		t.Errorf("global empty: %v, %v, %+v; want denied by global, retry within one token's time", ok, err, d)
	}
	// The denial took nothing: the first tier has given one token.
	if lead := c.find(s.keys[0]).tat.Load() - int64(time.Since(c.mono0)); lead <= 0 || lead > c.interval {
		t.Errorf("per-user is %d ns ahead after one admitted request, want up to one token's %d", lead, c.interval)
	}
}
