package core

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// MemoryStore keeps buckets in process memory. It is the embedded default
// store. Make one with NewMemoryStore; it is safe for concurrent use and must
// not be copied.
//
// The zero value, like a nil *MemoryStore, holds nothing and is not usable:
// Take returns an error wrapping ErrNotConstructed, Reclaim does nothing,
// Stats returns zero counts, and WithStore refuses it. None of them panics.
//
// Each rule has a table of its own, spread over shards, each an
// open-addressing hash table that is read without locking. A token bucket
// (or shaping) bucket is one small entry whose whole state is one integer,
// its theoretical arrival time: a decision on one existing bucket hashes the
// key once, finds the entry without taking any lock, and updates it with one
// compare-and-swap, so goroutines on different keys never wait for each
// other and a hot key contends on a single word. A decision on several
// buckets, or on a window or log, locks its buckets, each by a
// compare-and-swap on the same word, in one global order (so two decisions
// cannot deadlock), decides them all and commits only if all allow. Deciding
// on existing buckets allocates nothing.
//
// A bucket keeps its state whatever limit a later take carries for it (see
// Limit for what a changed limit does with it). A bucket whose state is
// equivalent to a new one under any limit (a full token bucket, a window
// that has passed) has expired: it is dropped as the store goes, a few
// slots of a shard at each insertion, and all at once by Reclaim, one shard
// at a time. Nothing ever locks the whole store. Decisions with explicit times
// that can step back should keep expired buckets a while (WithReclaimDelay).
//
// The store holds at most WithMaxKeys buckets, but for the buckets of
// decisions in progress (see WithMaxKeys for the exact bound). When it is
// full, an insertion first drops expired buckets of its shard; if none has
// expired it evicts, among eight sampled buckets of its shard (or, if it has
// none, of another), the one that would be full soonest, passing by the
// buckets decisions in progress hold or have just created. Evicting a bucket
// forgives what it still owed (at most its burst), so a store too small for
// its traffic can admit more than the policy; Stats counts evictions so that
// this is visible. Size the store for the number of live keys.
type MemoryStore struct {
	rules   atomic.Pointer[map[string]*ruleTable] // copied on write
	rulesMu sync.Mutex                            // serializes adding a rule's table
	nshards int                                   // shards per rule, a power of two
	seed    maphash.Seed
	clock   Clock // nil: the monotonic clock below
	wall0   int64 // Unix ns at mono0
	mono0   time.Time
	maxKeys int64
	delay   int64 // ns an expired bucket is kept before it is reclaimed

	live      atomic.Int64 // entries in every table
	evictions atomic.Int64
	reclaimed atomic.Int64
}

// ruleTable holds the buckets of one rule name.
type ruleTable struct {
	mask   uint64 // len(shards)-1
	shards []shard
	// ref is this table in its store, which a policy's rule remembers
	// (tableFor): made with the table, so that rules switching between
	// stores allocate nothing.
	ref storeTable
	// star is the last entry found for the key "*", a global rule's one
	// bucket, which every request of a policy with such a rule decides
	// on (see findStar); nil before, and possibly dead since.
	star atomic.Pointer[entry]
}

// findStar returns the entry of the key "*" in rt, as table.find does,
// and remembers it in rt.star, which its callers read first.
func (s *MemoryStore) findStar(rt *ruleTable) *entry {
	h := maphash.String(s.seed, globalKey)
	e := rt.shard(h).tab.Load().find(h, globalKey)
	if e != nil {
		rt.star.Store(e)
	}
	return e
}

// The word of an entry: a token bucket's TAT (Unix ns, never negative) or,
// for a window or log, 0; or one of these.
const (
	wordLocked int64 = -1 // a decision holds the entry; the TAT is in its hands
	wordDead   int64 = -2 // dropped from its table: look the key up again
)

// entry is one bucket. Everything but word, and the window state while word
// is wordLocked, is fixed at creation: a take under another algorithm or
// fill time replaces the entry, so that a compare-and-swap on word alone is
// exact. A token bucket's entry is 32 bytes; a window's or log's is an
// extEntry, which begins with one.
type entry struct {
	word  atomic.Int64
	key   string // the identity, unique within the rule
	shape uint64 // the algorithm << 56 | for token buckets the fill time (tau) the TAT is written under
}

// extEntry is the entry of a window or log bucket.
type extEntry struct {
	entry
	ext extState
}

// shapeOf returns the shape of an entry written under l. A fill time is at
// most MaxSpan, below 2^56 ns.
func shapeOf(l *Limit) uint64 {
	if l.isBucket() {
		return uint64(l.alg)<<56 | uint64(l.tau)
	}
	return uint64(l.alg) << 56
}

func (e *entry) alg() Algorithm { return Algorithm(e.shape >> 56) }

func (e *entry) span() int64 { return int64(e.shape & (1<<56 - 1)) }

// ext returns the window state of a window or log entry, nil for a token
// bucket's.
func (e *entry) ext() *extState {
	if a := e.alg(); a == 0 || a == AlgTokenBucket || a == AlgShaping {
		return nil
	}
	return &(*extEntry)(unsafe.Pointer(e)).ext // made by newEntry as an extEntry
}

// extState is the state of a window or log bucket, read and written only
// while its entry's word is wordLocked.
type extState struct {
	st      State
	expires int64
}

// tombstone marks a slot whose entry was dropped, so probes continue past it.
var tombstone = &entry{}

// table is an open-addressing hash table with linear probing. Readers load
// slots atomically without a lock; only the shard's writer changes them.
// Each slot keeps its entry's hash beside the pointer, so that a lookup
// compares hashes in the table, whose lines stay shared between cores, and
// touches only the entry it is after.
type table struct {
	mask  uint64
	slots []slot
}

// slot is one table position. Writers store hash before e. A reader that
// finds e with another hash (the slot reused after a drop) compares e's key,
// which never changes, so it never takes one key's entry for another's.
type slot struct {
	hash atomic.Uint64
	e    atomic.Pointer[entry]
}

type shard struct {
	mu     sync.Mutex // serializes inserts, drops and resizes
	tab    atomic.Pointer[table]
	used   int // slots not nil (entries and tombstones), under mu
	cursor int // next slot the incremental sweep looks at, under mu
	_      [32]byte
}

// MemoryOption configures a MemoryStore; pass options to NewMemoryStore.
// Options are applied in order, so a later one replaces an earlier one of the
// same kind. A nil MemoryOption is an error.
type MemoryOption interface{ applyMemory(*memoryConfig) }

type memoryConfig struct {
	delay   time.Duration
	clock   Clock
	maxKeys int
	shards  int
	errs    []error // what the options got wrong, in order
}

// fail records an error wrapping ErrInvalidOption; NewMemoryStore returns
// them.
func (c *memoryConfig) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...))
}

type memoryOptionFunc func(*memoryConfig)

func (f memoryOptionFunc) applyMemory(c *memoryConfig) { f(c) }

// WithClock makes the store read time from c instead of the system's
// monotonic clock; c must be safe for concurrent use. Tests use a
// ManualClock. A nil c (or an interface holding a nil pointer) makes
// NewMemoryStore fail with ErrInvalidOption.
func WithClock(c Clock) MemoryOption {
	return memoryOptionFunc(func(cfg *memoryConfig) {
		if isNil(c) {
			cfg.fail("WithClock: clock is nil")
			return
		}
		cfg.clock = c
	})
}

// WithMaxKeys bounds the number of buckets the store holds; n must be at
// least 1. The default is 1,000,000. At a million token buckets with keys
// of up to 16 bytes the heap held 75 to 86 bytes per bucket (the
// benchmarks module's Keys1M scenario, and a million IPv4 addresses).
//
// An insertion into a store holding n buckets or more evicts one first
// (see MemoryStore), and a second while the store holds more than n, so
// that insertions bring it back to n. The store goes over n, by at most one
// bucket per insertion, only when insertions race into different shards,
// or when an insertion finds nothing to evict but buckets that decisions
// in progress hold or have just created: those are never dropped, so that
// a decision on more buckets than n (n below its number of tiers, or
// decisions racing on a small store) still completes.
func WithMaxKeys(n int) MemoryOption {
	return memoryOptionFunc(func(cfg *memoryConfig) { cfg.maxKeys = n })
}

// WithReclaimDelay keeps a bucket for d after it is full again before
// reclaiming it. The default, 0, reclaims it as soon as it is, which is
// right when decisions read the store's monotonic clock: time never steps
// back. Set it when decisions carry explicit times or a clock that can step
// back (replays, tests): a bucket reclaimed at a later time would otherwise
// be found new at an earlier one, and time moving backwards must never
// create tokens. A kept bucket never changes a decision; it only holds
// memory, and the bound (WithMaxKeys) still evicts it first. d must be
// between 0 and MaxSpan.
func WithReclaimDelay(d time.Duration) MemoryOption {
	return memoryOptionFunc(func(cfg *memoryConfig) { cfg.delay = d })
}

// WithShards sets the number of shards of each rule's table, between 1 and
// 65536, rounded up to a power of two. The default is 16 per CPU
// (GOMAXPROCS), at least 64.
func WithShards(n int) MemoryOption {
	return memoryOptionFunc(func(cfg *memoryConfig) { cfg.shards = n })
}

// NewMemoryStore returns an empty in-memory store with opts applied in order
// over the defaults (the monotonic clock, 1,000,000 keys, 16 shards per CPU,
// no reclaim delay). It fails with an error wrapping ErrInvalidOption, naming
// the option at fault, for a nil option (named by its position in opts,
// counted from 0), a nil clock, or a number out of range; every mistake found
// is reported, joined with errors.Join.
func NewMemoryStore(opts ...MemoryOption) (*MemoryStore, error) {
	cfg := memoryConfig{maxKeys: 1_000_000, shards: max(64, 16*runtime.GOMAXPROCS(0))}
	for i, o := range opts {
		if o == nil {
			cfg.fail("NewMemoryStore: option %d is nil", i)
			continue
		}
		o.applyMemory(&cfg)
	}
	if cfg.maxKeys < 1 {
		cfg.fail("WithMaxKeys: max keys must be >= 1, got %d", cfg.maxKeys)
	}
	if cfg.shards < 1 || cfg.shards > 1<<16 {
		cfg.fail("WithShards: shards must be between 1 and 65536, got %d", cfg.shards)
	}
	if cfg.delay < 0 || cfg.delay > MaxSpan {
		cfg.fail("WithReclaimDelay: reclaim delay must be between 0 and %v, got %v", MaxSpan, cfg.delay)
	}
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	s := &MemoryStore{
		nshards: 1 << bits.Len(uint(cfg.shards-1)),
		seed:    maphash.MakeSeed(),
		clock:   cfg.clock,
		mono0:   time.Now(),
		maxKeys: int64(cfg.maxKeys),
		delay:   int64(cfg.delay),
	}
	s.wall0 = s.mono0.UnixNano()
	s.rules.Store(&map[string]*ruleTable{})
	return s, nil
}

// now returns the current Unix ns. Without an injected clock it reads the
// monotonic clock, which is cheaper than time.Now and never goes backwards.
// It is too large to be inlined (time.Since inlined into it), so
// Limiter.decideUnder, the hot path, repeats its body rather than call it.
func (s *MemoryStore) now() int64 {
	if s.clock == nil {
		return s.wall0 + int64(time.Since(s.mono0))
	}
	return s.clockNow()
}

// nowOr returns now in Unix ns, or for a zero now the store's (now).
func (s *MemoryStore) nowOr(now time.Time) int64 {
	if now.IsZero() {
		return s.now()
	}
	return now.UnixNano()
}

// clockNow returns the current Unix ns of the injected clock; a call of
// its own keeps the clock read that decideUnder repeats from now small.
func (s *MemoryStore) clockNow() int64 { return s.clock.Now().UnixNano() }

// constructed reports whether s was made by NewMemoryStore.
func (s *MemoryStore) constructed() bool { return s != nil && s.nshards > 0 }

// table returns the table of rule, or nil if it has none and add is false.
func (s *MemoryStore) table(rule string, add bool) *ruleTable {
	if rt := (*s.rules.Load())[rule]; rt != nil || !add {
		return rt
	}
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	old := *s.rules.Load()
	if rt := old[rule]; rt != nil {
		return rt
	}
	rt := &ruleTable{mask: uint64(s.nshards - 1), shards: make([]shard, s.nshards)}
	rt.ref = storeTable{s: s, rt: rt}
	for i := range rt.shards {
		rt.shards[i].tab.Store(newTable(8))
	}
	m := make(map[string]*ruleTable, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[rule] = rt
	s.rules.Store(&m)
	return rt
}

// shard returns the shard of hash h. The table inside it indexes by the low
// bits of h; the shard takes high ones, so a shard's keys spread over its
// table.
func (rt *ruleTable) shard(h uint64) *shard { return &rt.shards[(h>>40)&rt.mask] }

// Take implements Store: it validates t with CheckTake and decides it
// without waiting, so ctx is not read. It is safe for concurrent use. It
// fails with an error wrapping ErrNotConstructed for a store not made by
// NewMemoryStore.
func (s *MemoryStore) Take(ctx context.Context, t *Take) error {
	if !s.constructed() {
		return fmt.Errorf("%w: MemoryStore is a zero value or nil; make one with NewMemoryStore", ErrNotConstructed)
	}
	if err := CheckTake(t); err != nil {
		return err
	}
	s.take(t)
	return nil
}

// take is Take for a valid t. It returns t.At in Unix nanoseconds: the
// Limiter reads that, not t.At, because a field read back from t makes the
// compiler treat t's slices, and so the caller's stack arrays, as escaping.
func (s *MemoryStore) take(t *Take) int64 {
	var now int64
	if t.Now.IsZero() {
		now = s.now()
	} else {
		now = t.Now.UnixNano()
	}
	var fast bool
	if len(t.Buckets) == 1 {
		fast = s.takeFast(&t.Buckets[0], &t.States[0], now, t.Cost)
	} else {
		fast = s.takeFastMany(nil, t.Buckets, t.States, now, t.Cost)
	}
	if !fast {
		s.takeLocked(t, nil, now)
	}
	t.At = time.Unix(0, now)
	return now
}

// find returns the entry for key, or nil, without locking. The entry may be
// dead (dropped since): its word says so.
func (tab *table) find(h uint64, key string) *entry {
	for i := h & tab.mask; ; i = (i + 1) & tab.mask {
		sl := &tab.slots[i]
		e := sl.e.Load()
		if e == nil {
			return nil
		}
		if e != tombstone && sl.hash.Load() == h && e.key == key {
			return e
		}
	}
}

// backoff waits a little for an entry another decision holds: it spins
// (its caller loads the entry's word again) up to spinLimit times, then
// yields the processor on every call.
func backoff(spins *int) {
	*spins++
	if *spins > spinLimit {
		runtime.Gosched()
	}
}

// spinLimit is how many times backoff lets its caller look at a held entry
// again before it yields. A decision holds its entries for part of its
// own time (a three-tier decision takes about 90 ns at one goroutine),
// and a yield costs more than that: with two cores deciding three tiers
// on the same buckets (the benchmarks module's ThreeTier at two
// goroutines), yielding after 4 looks put 17% of the CPU profile's
// samples in the scheduler, and 128 looks took a decision from 102.6 to
// 82.5 ns (6 interleaved rounds; 256 and 512 did no better). A holder
// that does not run (preempted) costs a waiter 128 looks at a line no one
// writes before it yields: 59 to 64 ns in 5 runs of a benchmark of that
// loop.
const spinLimit = 128

// tableFor returns the table of r, a rule of a policy, remembering it in r.
func (s *MemoryStore) tableFor(r *Rule) *ruleTable {
	if r.mem != nil {
		if st := r.mem.p.Load(); st != nil && st.s == s {
			return st.rt
		}
	}
	return s.tableOf(r)
}

// tableOf is tableFor when r does not remember its table in s.
func (s *MemoryStore) tableOf(r *Rule) *ruleTable {
	rt := s.table(r.Name, true)
	if r.mem != nil {
		r.mem.p.Store(&rt.ref)
	}
	return rt
}

// takeRule is take for a valid one-bucket take of rule r, the bucket of
// key under l, whose table it finds without a lookup by name.
func (s *MemoryStore) takeRule(r *Rule, key string, l *Limit, out *BucketState, now time.Time, cost int64) int64 {
	var ns int64
	if now.IsZero() {
		ns = s.now()
	} else {
		ns = now.UnixNano()
	}
	if !s.takeFastIn(s.tableFor(r), key, l, out, ns, cost) {
		s.takeSlow(r, key, l, out, ns, cost)
	}
	return ns
}

// takeSlow is takeRule's takeLocked, at now, for the cases takeFastIn
// leaves.
func (s *MemoryStore) takeSlow(r *Rule, key string, l *Limit, out *BucketState, now, cost int64) {
	t := Take{Cost: cost, Buckets: []Bucket{{Rule: r.Name, Key: key, Limit: l}}, States: []BucketState{{}}}
	s.takeLocked(&t, []*Rule{r}, now)
	*out = t.States[0]
}

// takeRules is take for a valid take of the buckets of rules, policy rules,
// into states, whose tables it finds without a lookup by name.
func (s *MemoryStore) takeRules(rules []*Rule, buckets []Bucket, states []BucketState, now time.Time, cost int64) int64 {
	var ns int64
	if now.IsZero() {
		ns = s.now()
	} else {
		ns = now.UnixNano()
	}
	if !s.takeFastMany(rules, buckets, states, ns, cost) {
		t := Take{Cost: cost, Buckets: buckets, States: states}
		s.takeLocked(&t, rules, ns)
	}
	return ns
}

// takeFastMany is takeLocked for the common case of several token bucket or
// shaping limits, at most maxInlineTiers, each on an existing entry written
// under the same limit: it finds them without a lock and decides them with
// decideHeld. It reports false, having changed nothing, for every other case
// (a bucket to create or replace, a window or log, an entry dropped
// meanwhile), which takeLocked decides. rules, when not nil, are the policy
// rules of the buckets, as for takeLocked.
func (s *MemoryStore) takeFastMany(rules []*Rule, buckets []Bucket, states []BucketState, now, cost int64) bool {
	n := len(buckets)
	if n > maxInlineTiers {
		return false
	}
	var (
		ents [maxInlineTiers]*entry
		lims [maxInlineTiers]*Limit
	)
	for i := range buckets {
		b := &buckets[i]
		var rt *ruleTable
		if rules != nil {
			rt = s.tableFor(rules[i])
		} else if rt = s.table(b.Rule, false); rt == nil {
			return false
		}
		l := b.Limit
		if !l.isBucket() {
			return false
		}
		h := maphash.String(s.seed, b.Key)
		e := rt.shard(h).tab.Load().find(h, b.Key)
		if e == nil || e.shape != shapeOf(l) {
			return false
		}
		ents[i], lims[i] = e, l
	}
	return decideHeld(ents[:n], lims[:n], states, now, cost)
}

// decideTiers decides a request of cost at now on ents, the existing token
// bucket or shaping entries of rules (policy rules, written under their own
// limits, at most plainTiers, none twice), into d: its tiers and summary,
// not Cost, At, Degraded, Err or ShadowDenied. It locks every entry but
// the one of the highest address in the order of their addresses, the one
// order every take locks in, and decides on that last one's word as it
// reads it: admitted, the compare-and-swap that writes it checks that it
// held that word, so that the decision holds at that instant (or it is
// decided again); denied, the read is that instant. It reports false if
// an entry was dropped meanwhile, having changed no entry and cleared the
// records it wrote in d, for its caller to clear d.
func decideTiers(ents []*entry, rules []*Rule, now, cost int64, d *Decision) bool {
	var (
		words [plainTiers]int64
		tats  [plainTiers]int64
		order [plainTiers]int
	)
	n := len(ents)
	last := sortByAddress(ents, order[:n])
	if !lockIn(ents, words[:n], order[:n-1]) {
		return false // decideOn looks the keys up again
	}
	tail := ents[last]
	for spins := 0; ; {
		w := tail.word.Load()
		if w < 0 {
			if w == wordLocked {
				backoff(&spins)
				continue
			}
			for _, i := range order[:n-1] {
				ents[i].unlock(words[i])
			}
			// decideSpans may have written records: a Decision's
			// records past those it holds stay zero (see setTiers).
			clear(d.tiers[:n])
			clear(d.flags[:n])
			return false
		}
		words[last] = w
		fit := true
		for i, r := range rules {
			next, ok := r.Limit.fits(words[i], now, cost)
			tats[i], fit = next, fit && ok
		}
		if fit {
			// Every tier admits: write, then report, so that no store
			// comes before the compare-and-swap.
			if !tail.word.CompareAndSwap(w, tats[last]) {
				continue // another decision came first: decide again
			}
			for _, i := range order[:n-1] {
				ents[i].unlock(tats[i])
			}
			best := 0
			for i, r := range rules {
				var st BucketState
				r.Limit.admitted(&st, tats[i], now)
				d.setRec(i, r, &r.Limit, &st, false)
				if st.Remaining < d.tiers[best].remaining {
					best = i
				}
			}
			// summarize's choice when every tier admits with no delay:
			// the tier with the fewest tokens left, the first of them.
			r, t := rules[best], &d.tiers[best]
			d.setTiers(n)
			d.Allowed, d.Reason, d.Limit, d.Remaining = true, ReasonNone, r.Limit.burst, t.remaining
			d.ResetAfter, d.RetryAfter, d.Delay = time.Duration(t.resetAfter), 0, 0
			d.Rule, d.Scope = r.Name, r.Scope
			return true
		}
		if decideSpans(ents, rules, words[:n], tats[:n], order[:n], now, cost, d) {
			break
		}
	}
	d.setTiers(n)
	d.summarize(rules)
	return true
}

// decideSpans is decideTiers for a request not every tier admits at once
// (a denial, a cost of 0, a shaping delay), into d's records, on the
// entries but the last locked with words, the last having held
// words[last]: it reports false, having unlocked nothing, if the last
// changed before the compare-and-swap that would admit the request.
func decideSpans(ents []*entry, rules []*Rule, words, tats []int64, order []int, now, cost int64, d *Decision) bool {
	n, last := len(ents), order[len(order)-1]
	allowed := true
	for i, r := range rules {
		var st BucketState
		tats[i] = r.Limit.span(&st, words[i], now, cost)
		d.setRec(i, r, &r.Limit, &st, false)
		allowed = allowed && st.Allowed
	}
	if allowed && cost > 0 {
		if !ents[last].word.CompareAndSwap(words[last], tats[last]) {
			return false
		}
		for _, i := range order[:n-1] {
			ents[i].unlock(tats[i])
		}
		return true
	}
	// Nothing is consumed: the tiers that would admit report their
	// balance as it stands.
	for i, r := range rules {
		if d.flags[i]&1 != 0 && cost > 0 {
			var st BucketState
			r.Limit.span(&st, words[i], now, 0)
			d.setRec(i, r, &r.Limit, &st, false)
		}
	}
	for _, i := range order[:n-1] {
		ents[i].unlock(words[i])
	}
	return true
}

// decideHeld decides a request of cost on ents, token bucket or shaping
// entries written under lims, at most maxInlineTiers: it locks them by
// compare-and-swap in the order of their addresses, decides each on its
// TAT into states and writes the new TATs only if all allow. It reports
// false, having changed nothing, if an entry was dropped meanwhile.
func decideHeld(ents []*entry, lims []*Limit, states []BucketState, now, cost int64) bool {
	var (
		words [maxInlineTiers]int64
		tats  [maxInlineTiers]int64
		order [maxInlineTiers]int
	)
	n := len(ents)
	if !lockInOrder(ents, words[:n], order[:n]) {
		return false // takeLocked looks the keys up again
	}
	allowed := true
	for i, l := range lims {
		st := &states[i]
		left, tat := l.gcraSpan(st, words[i], l.tau, now, cost)
		st.Remaining = left / l.interval
		tats[i] = tat
		allowed = allowed && st.Allowed
	}
	if !allowed || cost == 0 {
		// Nothing is consumed: report each bucket's balance as it stands.
		for i, l := range lims {
			if states[i].Allowed && cost > 0 {
				st := &states[i]
				left, _ := l.gcraSpan(st, words[i], l.tau, now, 0)
				st.Remaining = left / l.interval
			}
			ents[i].unlock(words[i])
		}
		return true
	}
	for i, e := range ents {
		e.unlock(tats[i])
	}
	return true
}

// takeFast decides a one-bucket take of a token bucket or shaping limit on
// an existing entry written under the same limit, by compare-and-swap on its
// TAT. It reports false, having changed nothing, for every other case.
func (s *MemoryStore) takeFast(b *Bucket, out *BucketState, now, cost int64) bool {
	l := b.Limit
	if !l.isBucket() {
		return false
	}
	return s.takeFastIn(s.table(b.Rule, false), b.Key, l, out, now, cost)
}

// takeFastIn is takeFast for the bucket of key under l in rt, its rule's
// table (nil: none).
func (s *MemoryStore) takeFastIn(rt *ruleTable, key string, l *Limit, out *BucketState, now, cost int64) bool {
	if rt == nil || !l.isBucket() {
		return false
	}
	h := maphash.String(s.seed, key)
	sh := rt.shard(h)
	for spins := 0; ; {
		e := sh.tab.Load().find(h, key)
		if e == nil || e.shape != shapeOf(l) {
			return false
		}
		w := e.word.Load()
		if w < 0 {
			if w == wordLocked {
				backoff(&spins)
			}
			continue // locked: wait; dead: look again
		}
		if next, ok := l.fits(w, now, cost); ok {
			if !e.word.CompareAndSwap(w, next) {
				continue // another decision came first: decide again
			}
			l.admitted(out, next, now)
			return true
		}
		tat := l.span(out, w, now, cost)
		if out.Allowed && cost > 0 && tat != w && !e.word.CompareAndSwap(w, tat) {
			continue // another decision came first: decide again
		}
		return true
	}
}

// lock locks e and returns the word it held, or reports false if e is dead.
func (e *entry) lock() (int64, bool) {
	for spins := 0; ; {
		w := e.word.Load()
		switch {
		case w == wordDead:
			return 0, false
		case w == wordLocked:
			backoff(&spins)
		case e.word.CompareAndSwap(w, wordLocked):
			return w, true
		}
	}
}

// tryLock locks e if no one holds it and it is alive.
func (e *entry) tryLock() (int64, bool) {
	w := e.word.Load()
	if w < 0 || !e.word.CompareAndSwap(w, wordLocked) {
		return 0, false
	}
	return w, true
}

// expiresAt returns when e, locked with word w, is equivalent to a new
// bucket.
func (e *entry) expiresAt(w int64) int64 {
	if x := e.ext(); x != nil {
		return x.expires
	}
	return ceilMicro(w)
}

// state returns the state e, locked with word w, holds for l: none if l is of
// another algorithm, which starts afresh.
func (e *entry) state(w int64, l *Limit) State {
	if e.alg() != l.alg {
		return State{}
	}
	if x := e.ext(); x != nil {
		return x.st
	}
	return State{A: w, Span: e.span()}
}

// newEntry returns an entry for key holding st under l, unlocked.
func newEntry(key string, l *Limit, st *State) *entry {
	if l.isBucket() {
		e := &entry{key: key, shape: shapeOf(l)}
		e.word.Store(st.A)
		return e
	}
	x := &extEntry{entry: entry{key: key, shape: shapeOf(l)}, ext: extState{st: *st, expires: l.ExpiresAt(st)}}
	return &x.entry
}

// takeLocked decides t by locking its buckets, creating the missing ones
// fresh (as good as absent), in the order of their entries' addresses, so
// that two takes cannot deadlock; it decides every bucket and commits only
// if all allow. A fresh bucket it created and did not commit is dropped
// again. rules, when not nil, are the policy rules of t's buckets, whose
// tables need no lookup by name.
func (s *MemoryStore) takeLocked(t *Take, rules []*Rule, now int64) {
	n := len(t.Buckets)
	var (
		entArr   [maxInlineTiers]*entry
		tabArr   [maxInlineTiers]*ruleTable
		wordArr  [maxInlineTiers]int64
		tatArr   [maxInlineTiers]int64
		orderArr [maxInlineTiers]int
	)
	var (
		ents        []*entry
		tabs        []*ruleTable
		words, tats []int64
		order       []int
	)
	if n <= len(entArr) {
		ents, tabs, words, tats, order = entArr[:n:n], tabArr[:n:n], wordArr[:n:n], tatArr[:n:n], orderArr[:n:n]
	} else {
		ents, tabs, words, tats, order = make([]*entry, n), make([]*ruleTable, n), make([]int64, n), make([]int64, n), make([]int, n)
	}
	for i := range t.Buckets {
		if rules != nil {
			tabs[i] = s.tableFor(rules[i])
		} else {
			tabs[i] = s.table(t.Buckets[i].Rule, true)
		}
	}
retry:
	for i := range t.Buckets {
		ents[i] = s.findOrAdd(tabs[i], &t.Buckets[i], now)
	}
	if !lockInOrder(ents, words, order) {
		goto retry // one was dropped meanwhile (reclaimed, evicted, reset)
	}
	// A token bucket decides on its locked TAT, as takeFast does on a read
	// one; a window or log on its state, decided again to commit it (it
	// stays locked, so the second decision is the first).
	allowed := true
	for i := range t.Buckets {
		t.States[i], tats[i] = ents[i].decide(words[i], t.Buckets[i].Limit, now, t.Cost)
		allowed = allowed && t.States[i].Allowed
	}
	if !allowed {
		// Nothing is consumed: report each bucket's balance as it stands.
		for i := range t.Buckets {
			if t.States[i].Allowed && t.Cost > 0 {
				t.States[i], _ = ents[i].decide(words[i], t.Buckets[i].Limit, now, 0)
			}
		}
	}
	for i, e := range ents {
		l := t.Buckets[i].Limit
		switch {
		case allowed && t.Cost > 0 && e.alg() == l.alg && (e.ext() != nil || e.span() == l.tau):
			if x := e.ext(); x != nil {
				cur := x.st
				_, next := l.Decide(&cur, now, t.Cost)
				l.Commit(&x.st, next, t.Cost)
				x.expires = l.ExpiresAt(&x.st)
				e.unlock(0)
			} else {
				e.unlock(tats[i])
			}
		case allowed && t.Cost > 0:
			// Written under another algorithm or fill time: a new entry
			// takes its place.
			st := State{A: tats[i], Span: l.tau}
			if !l.isBucket() {
				st = e.state(words[i], l)
				cur := st
				_, next := l.Decide(&cur, now, t.Cost)
				l.Commit(&st, next, t.Cost)
			}
			s.replace(tabs[i], e, newEntry(e.key, l, &st))
		case e.fresh(words[i]):
			// Created for this take, or never committed: as good as absent.
			s.replace(tabs[i], e, nil)
		default:
			e.unlock(words[i])
		}
	}
}

// lockInOrder locks ents, none twice, in the order of their addresses, the
// one order every take locks in, so that two takes cannot deadlock, and
// sets words[i] to the word ents[i] held; order, of len(ents), is its room
// to sort in. It reports false, having unlocked those it locked, when one
// was dropped meanwhile.
func lockInOrder(ents []*entry, words []int64, order []int) bool {
	sortByAddress(ents, order)
	return lockIn(ents, words, order)
}

// sortByAddress sets order, of len(ents), to the indexes of ents in the
// order of their addresses, and returns the last.
func sortByAddress(ents []*entry, order []int) int {
	for i := range ents {
		order[i] = i
		for j := i; j > 0 && uintptr(unsafe.Pointer(ents[order[j]])) < uintptr(unsafe.Pointer(ents[order[j-1]])); j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	return order[len(order)-1]
}

// lockIn locks the entries of ents at the indexes in order, in that order,
// and sets words[i] to the word ents[i] held. It reports false, having
// unlocked those it locked, when one was dropped meanwhile.
func lockIn(ents []*entry, words []int64, order []int) bool {
	for k, i := range order {
		e := ents[i]
		// An entry no one holds is locked without lock's call.
		if w := e.word.Load(); w >= 0 && e.word.CompareAndSwap(w, wordLocked) {
			words[i] = w
			continue
		}
		w, ok := e.lock()
		if !ok {
			for _, j := range order[:k] {
				ents[j].unlock(words[j])
			}
			return false
		}
		words[i] = w
	}
	return true
}

// decide decides a request of cost against e, locked with word w, under l,
// and returns, for a token bucket, the TAT to write if the request as a
// whole is admitted.
func (e *entry) decide(w int64, l *Limit, now, cost int64) (BucketState, int64) {
	if l.isBucket() && l.decidable() {
		var span int64
		if e.alg() == l.alg {
			span = e.span()
		} else {
			w = 0 // another algorithm: afresh
		}
		var st BucketState
		left, tat := l.gcraSpan(&st, w, span, now, cost)
		st.Remaining = left / l.interval
		return st, tat
	}
	cur := e.state(w, l)
	st, _ := l.Decide(&cur, now, cost)
	return st, 0
}

// isNew reports whether e, locked with word w, holds the state of a new
// bucket.
func (e *entry) isNew(w int64) bool {
	x := e.ext()
	if x == nil {
		return w == 0
	}
	st := &x.st
	return st.A == 0 && st.B == 0 && st.C == 0 && len(st.Log) == 0
}

// fresh reports whether e, locked with word w, is as good as absent: a
// take made it (findOrAdd) and has not committed it yet, and drops it if
// it does not (takeLocked). Sweeps and evictions pass such an entry by:
// dropping it would send its take back to look it up again, and with a
// bound below its number of buckets, forever.
func (e *entry) fresh(w int64) bool { return e.expiresAt(w) == 0 && e.isNew(w) }

// unlock releases e, locked, with word w.
func (e *entry) unlock(w int64) { e.word.Store(w) }

// findOrAdd returns the entry of b, adding a new one, unlocked and as good as
// absent, if there is none.
func (s *MemoryStore) findOrAdd(rt *ruleTable, b *Bucket, now int64) *entry {
	h := maphash.String(s.seed, b.Key)
	sh := rt.shard(h)
	if e := sh.tab.Load().find(h, b.Key); e != nil && e.word.Load() != wordDead {
		return e
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.tab.Load().find(h, b.Key); e != nil {
		// Under the shard lock no entry of the shard is dropped, and a
		// dead one is no longer in the table.
		return e
	}
	e := newEntry(strings.Clone(b.Key), b.Limit, &State{})
	sh.insert(s, h, e, now)
	return e
}

// replace puts next (nil: nothing) in old's place in rt, and marks old
// dead. The caller holds old locked.
func (s *MemoryStore) replace(rt *ruleTable, old, next *entry) {
	h := maphash.String(s.seed, old.key)
	sh := rt.shard(h)
	sh.mu.Lock()
	tab := sh.tab.Load()
	for i := h & tab.mask; ; i = (i + 1) & tab.mask {
		e := tab.slots[i].e.Load()
		if e == old {
			if next != nil {
				tab.slots[i].e.Store(next)
			} else {
				tab.slots[i].e.Store(tombstone)
				s.live.Add(-1)
			}
			break
		}
		if e == nil {
			break // not in the table: nothing to replace
		}
	}
	old.word.Store(wordDead)
	sh.mu.Unlock()
}

// insert adds e under hash h, making room first if the store is full. The
// caller holds sh.mu.
func (sh *shard) insert(s *MemoryStore, h uint64, e *entry, now int64) {
	sh.sweep(s, now, 2)
	if s.live.Load() >= s.maxKeys {
		// Full: look a little further for expired entries, then evict.
		// Both are bounded, so an insert never scans the whole table. A
		// store over the bound (see WithMaxKeys) loses a second, so that
		// it comes back to it.
		sh.sweep(s, now, 32)
		for range 2 {
			if s.live.Load() < s.maxKeys || !sh.evict(s) && !s.evictElsewhere(sh) {
				break
			}
		}
	}
	tab := sh.tab.Load()
	if 4*(sh.used+1) > 3*len(tab.slots) {
		tab = sh.resize()
	}
	i := h & tab.mask
	for {
		if cur := tab.slots[i].e.Load(); cur == nil || cur == tombstone {
			if cur == nil {
				sh.used++
			}
			break
		}
		i = (i + 1) & tab.mask
	}
	tab.slots[i].hash.Store(h)
	tab.slots[i].e.Store(e)
	s.live.Add(1)
}

// resize publishes a new table with room for twice the live entries,
// without tombstones. Readers still on the old table find the same entries
// there.
func (sh *shard) resize() *table {
	old := sh.tab.Load()
	live := 0
	for i := range old.slots {
		if e := old.slots[i].e.Load(); e != nil && e != tombstone {
			live++
		}
	}
	size := 8
	for size < 2*(live+1) {
		size *= 2
	}
	tab := newTable(size)
	for i := range old.slots {
		e := old.slots[i].e.Load()
		if e == nil || e == tombstone {
			continue
		}
		h := old.slots[i].hash.Load()
		j := h & tab.mask
		for tab.slots[j].e.Load() != nil {
			j = (j + 1) & tab.mask
		}
		tab.slots[j].hash.Store(h)
		tab.slots[j].e.Store(e)
	}
	sh.used = live
	sh.cursor = 0
	sh.tab.Store(tab)
	return tab
}

func newTable(size int) *table {
	return &table{mask: uint64(size - 1), slots: make([]slot, size)}
}

// sweep looks at up to n slots from the cursor and drops the expired
// entries. A bucket locked by someone else is in use: it is passed by. The
// caller holds sh.mu.
func (sh *shard) sweep(s *MemoryStore, now int64, n int) {
	tab := sh.tab.Load()
	for ; n > 0; n-- {
		if sh.cursor >= len(tab.slots) {
			sh.cursor = 0
		}
		i := sh.cursor
		sh.cursor++
		e := tab.slots[i].e.Load()
		if e == nil || e == tombstone {
			continue
		}
		w, ok := e.tryLock()
		if !ok {
			continue
		}
		// now - delay, not expires + delay: a sliding window expires up to
		// two MaxSpan after MaxTime, at the very end of int64.
		if e.expiresAt(w) <= now-s.delay && !e.fresh(w) {
			sh.drop(s, tab, i, e)
			s.reclaimed.Add(1)
		} else {
			e.unlock(w)
		}
	}
}

// evictElsewhere evicts a bucket from another shard than own, of any rule,
// for an insert into own, which has none to evict, and reports whether it
// did. It passes by the shards whose lock is held: the caller holds own's,
// and waiting for a second one could deadlock with another insert.
func (s *MemoryStore) evictElsewhere(own *shard) bool {
	for _, rt := range s.tables() {
		for i := range rt.shards {
			sh := &rt.shards[i]
			if sh == own || !sh.mu.TryLock() {
				continue
			}
			done := sh.evict(s)
			sh.mu.Unlock()
			if done {
				return true
			}
		}
	}
	return false
}

// evict drops, among up to eight entries from the cursor, the one that
// expires first: it forgives the least. Entries in use, locked or fresh,
// possibly by the caller's own take, are passed by. It reports whether it
// dropped one.
func (sh *shard) evict(s *MemoryStore) bool {
	tab := sh.tab.Load()
	best, bestAt, bestW := -1, int64(0), int64(0)
	for seen, k := 0, 0; seen < 8 && k < len(tab.slots); k++ {
		i := (sh.cursor + k) & int(tab.mask)
		e := tab.slots[i].e.Load()
		if e == nil || e == tombstone {
			continue
		}
		w, ok := e.tryLock()
		if !ok {
			continue
		}
		if e.fresh(w) {
			e.unlock(w)
			continue
		}
		seen++
		if at := e.expiresAt(w); best < 0 || at < bestAt {
			if best >= 0 {
				tab.slots[best].e.Load().unlock(bestW)
			}
			best, bestAt, bestW = i, at, w
		} else {
			e.unlock(w)
		}
	}
	if best < 0 {
		return false
	}
	sh.drop(s, tab, best, tab.slots[best].e.Load())
	sh.cursor = best + 1
	s.evictions.Add(1)
	return true
}

// drop removes e, locked, at slot i, from the table, and marks it dead. The
// caller holds sh.mu; goroutines that found e before look again.
func (sh *shard) drop(s *MemoryStore, tab *table, i int, e *entry) {
	tab.slots[i].e.Store(tombstone)
	e.word.Store(wordDead)
	s.live.Add(-1)
}

// tables returns every rule's table.
func (s *MemoryStore) tables() []*ruleTable {
	m := *s.rules.Load()
	out := make([]*ruleTable, 0, len(m))
	for _, rt := range m {
		out = append(out, rt)
	}
	return out
}

// Reclaim drops every expired bucket now. It locks one shard at a time, so
// concurrent decisions wait at most for one shard's sweep, and it shrinks
// tables that have become mostly empty. It is safe for concurrent use, and
// does nothing on a store not made by NewMemoryStore.
func (s *MemoryStore) Reclaim() {
	if !s.constructed() {
		return
	}
	for _, rt := range s.tables() {
		for i := range rt.shards {
			sh := &rt.shards[i]
			sh.mu.Lock()
			sh.sweep(s, s.now(), len(sh.tab.Load().slots))
			if n := len(sh.tab.Load().slots); n > 8 && 8*sh.live() < n {
				sh.resize()
			}
			sh.mu.Unlock()
		}
	}
}

// live counts the entries of sh's table. The caller holds sh.mu.
func (sh *shard) live() int {
	tab, n := sh.tab.Load(), 0
	for i := range tab.slots {
		if e := tab.slots[i].e.Load(); e != nil && e != tombstone {
			n++
		}
	}
	return n
}

// Reset implements Resetter: it drops bucket (rule, id), which is then
// full. Decisions under way on it finish first; later ones find it new. It
// fails with an error wrapping ErrInvalidKey for an id CheckKey refuses and
// ErrNotConstructed for a store not made by NewMemoryStore.
func (s *MemoryStore) Reset(_ context.Context, rule, id string) error {
	if !s.constructed() {
		return fmt.Errorf("%w: MemoryStore is a zero value or nil; make one with NewMemoryStore", ErrNotConstructed)
	}
	if err := CheckKey(id); err != nil {
		return err
	}
	rt := s.table(rule, false)
	if rt == nil {
		return nil // absent: full already
	}
	h := maphash.String(s.seed, id)
	sh := rt.shard(h)
	for spins := 0; ; backoff(&spins) {
		// A decision holding the bucket may need the shard lock to finish:
		// never wait for the bucket while holding it.
		sh.mu.Lock()
		tab := sh.tab.Load()
		i, e := tab.slot(h, id)
		if e == nil {
			sh.mu.Unlock()
			return nil // absent: full already
		}
		if _, ok := e.tryLock(); ok {
			sh.drop(s, tab, i, e)
			sh.mu.Unlock()
			return nil
		}
		sh.mu.Unlock()
	}
}

// slot returns the entry for key and its slot, or a nil entry.
func (tab *table) slot(h uint64, key string) (int, *entry) {
	for i := h & tab.mask; ; i = (i + 1) & tab.mask {
		e := tab.slots[i].e.Load()
		if e == nil {
			return 0, nil
		}
		if e != tombstone && tab.slots[i].hash.Load() == h && e.key == key {
			return int(i), e
		}
	}
}

// MemoryStats counts what a MemoryStore holds and has dropped. The zero
// value is an empty store that never dropped anything.
type MemoryStats struct {
	Keys      int   // buckets held now, expired or not
	Reclaimed int64 // expired buckets dropped since creation
	Evictions int64 // unexpired buckets dropped at the bound since creation
}

// Stats returns the store's counters, read without locking: while
// decisions run they are not one snapshot. It is safe for concurrent use,
// and returns zero counts for a store not made by NewMemoryStore.
func (s *MemoryStore) Stats() MemoryStats {
	if !s.constructed() {
		return MemoryStats{}
	}
	return MemoryStats{Keys: int(s.live.Load()), Reclaimed: s.reclaimed.Load(), Evictions: s.evictions.Load()}
}
