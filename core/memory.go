package core

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// MemoryStore keeps buckets in process memory. It is the embedded default
// store. Make one with NewMemoryStore; it is safe for concurrent use and must
// not be copied.
//
// The zero value, like a nil *MemoryStore, holds nothing and is not usable:
// Take returns an error wrapping ErrNotConstructed, Reclaim does nothing,
// Stats returns zero counts, and WithStore refuses it. None of them panics.
//
// Buckets are spread over shards, each an open-addressing hash table that
// is read without locking; every bucket has its own lock. A decision on one
// existing bucket hashes its key once, finds it without taking any shared
// lock, and locks only that bucket, so goroutines on different keys do not
// wait for each other and a hot key contends on a single cache line. A
// decision on several buckets locks their shards, in order, then the
// buckets. Deciding on existing buckets allocates nothing.
//
// A bucket keeps its state whatever limit a later take carries for it (see
// Limit for what a changed limit does with it). A bucket whose state is
// equivalent to a new one under any limit (a full token bucket, a window
// that has passed) has expired: it is dropped as the store goes, a few
// slots of a shard at each insertion, and all at once by Reclaim, one shard
// at a time. Nothing ever locks the whole store. Decisions with explicit times
// that can step back should keep expired buckets a while (WithReclaimDelay).
//
// The store holds at most WithMaxKeys buckets (rounded up to a multiple of
// the shard count). When a shard is full it first drops expired buckets; if
// none has expired it evicts, among eight sampled buckets, the one that would
// be full soonest. Evicting a bucket forgives what it still owed (at most its
// burst), so a store too small for its traffic can admit more than the
// policy; Stats counts evictions so that this is visible. Size the store for
// the number of live keys.
type MemoryStore struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	clock  Clock // nil: the monotonic clock below
	wall0  int64 // Unix ns at mono0
	mono0  time.Time
	perCap int   // most buckets per shard
	delay  int64 // ns an expired bucket is kept before it is reclaimed

	evictions atomic.Int64
	reclaimed atomic.Int64
}

// entry is one bucket. hash and key never change; mu guards the rest.
type entry struct {
	hash    uint64
	mu      sync.Mutex
	dead    bool // dropped from its table: look the key up again
	alg     Algorithm
	expires int64
	st      State
	key     string
}

// tombstone marks a slot whose entry was dropped, so probes continue past it.
var tombstone = &entry{}

// table is an open-addressing hash table with linear probing. Readers load
// slots atomically without a lock; only the shard's writer changes them.
// Each slot keeps its entry's hash beside the pointer, so that a lookup
// compares hashes in the table, whose lines stay shared between cores, and
// touches an entry, whose line moves to whichever core decides on it, only
// to lock it.
type table struct {
	mask  uint64
	slots []slot
}

// slot is one table position. Writers store hash before e; a reader loads e
// first, so a non-nil e comes with its hash (or, for a slot reused after a
// drop, with a later hash, which the dead flag of the old entry catches).
type slot struct {
	hash atomic.Uint64
	e    atomic.Pointer[entry]
}

type shard struct {
	mu     sync.Mutex // serializes inserts, drops and resizes
	tab    atomic.Pointer[table]
	live   int // entries in tab, under mu
	used   int // slots not nil (entries and tombstones), under mu
	cursor int // next slot the incremental sweep looks at, under mu
	_      [64]byte
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
// least 1. The default is 1,000,000, which held 160 MB of heap with IPv4
// addresses as keys.
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

// WithShards sets the number of shards, between 1 and 65536, rounded up to a
// power of two. The default is 16 per CPU (GOMAXPROCS), at least 64.
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
	n := 1 << bits.Len(uint(cfg.shards-1))
	n = min(n, 1<<bits.Len(uint(cfg.maxKeys-1))) // no shard without room
	s := &MemoryStore{
		shards: make([]shard, n),
		mask:   uint64(n - 1),
		seed:   maphash.MakeSeed(),
		clock:  cfg.clock,
		mono0:  time.Now(),
		perCap: (cfg.maxKeys + n - 1) / n,
		delay:  int64(cfg.delay),
	}
	s.wall0 = s.mono0.UnixNano()
	for i := range s.shards {
		s.shards[i].tab.Store(newTable(8))
	}
	return s, nil
}

// now returns the current Unix ns. Without an injected clock it reads the
// monotonic clock, which is cheaper than time.Now and never goes backwards.
func (s *MemoryStore) now() int64 {
	if s.clock != nil {
		return s.clock.Now().UnixNano()
	}
	return s.wall0 + int64(time.Since(s.mono0))
}

// appendKey appends the bucket key "rule\x00key". Rule names and keys hold
// no control characters, so the key is unambiguous.
func appendKey(dst []byte, b *Bucket) []byte {
	return append(append(append(dst, b.Rule...), 0), b.Key...)
}

// constructed reports whether s was made by NewMemoryStore, which always
// makes shards.
func (s *MemoryStore) constructed() bool { return s != nil && s.shards != nil }

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
	if len(t.Buckets) == 1 {
		s.takeOne(t, now)
	} else {
		s.takeMany(t, now)
	}
	t.At = time.Unix(0, now)
	return now
}

// lookup returns the entry for key, or nil. It takes no lock; the caller
// holds the shard's lock or accepts that the entry may be dropped.
func (tab *table) lookup(h uint64, key []byte) *entry {
	for i := h & tab.mask; ; i = (i + 1) & tab.mask {
		e := tab.slots[i].e.Load()
		if e == nil {
			return nil
		}
		if e != tombstone && tab.slots[i].hash.Load() == h && e.key == string(key) {
			return e
		}
	}
}

// lockEntry returns the entry for key locked, or nil if there is none. It
// locks a candidate before reading it, so that a hot entry's cache line moves
// between cores once per decision, not twice. again reports that the entry
// was dropped meanwhile: look again from the shard's current table.
func (tab *table) lockEntry(h uint64, key []byte) (e *entry, again bool) {
	for i := h & tab.mask; ; i = (i + 1) & tab.mask {
		e := tab.slots[i].e.Load()
		if e == nil {
			return nil, false
		}
		if e == tombstone || tab.slots[i].hash.Load() != h {
			continue
		}
		e.mu.Lock()
		if e.dead {
			e.mu.Unlock()
			return nil, true
		}
		if e.key == string(key) {
			return e, false
		}
		e.mu.Unlock() // another key with the same 64-bit hash: probe on
	}
}

func (s *MemoryStore) takeOne(t *Take, now int64) {
	var arr [128]byte
	b := &t.Buckets[0]
	key := appendKey(arr[:0], b)
	h := maphash.Bytes(s.seed, key)
	sh := &s.shards[h&s.mask]
	for {
		e, again := sh.tab.Load().lockEntry(h, key)
		if again {
			continue // dropped since (expired or evicted): look again
		}
		if e == nil {
			break
		}
		if b.Limit.isBucket() {
			// The hot path: divide for Remaining once the lock is free.
			st, left := e.decideBucket(b.Limit, now, t.Cost)
			e.mu.Unlock()
			st.Remaining = left / b.Limit.interval
			t.States[0] = st
			return
		}
		t.States[0] = e.decide(b.Limit, now, t.Cost)
		e.mu.Unlock()
		return
	}
	// Not found: decide under the shard lock, which every insert of this
	// shard holds, so no one else creates the bucket meanwhile.
	sh.mu.Lock()
	if e := sh.tab.Load().lookup(h, key); e != nil {
		e.mu.Lock()
		t.States[0] = e.decide(b.Limit, now, t.Cost)
		e.mu.Unlock()
		sh.mu.Unlock()
		return
	}
	var fresh entry
	t.States[0] = fresh.decide(b.Limit, now, t.Cost)
	if fresh.alg != 0 {
		// Committed: the bucket now differs from a new one.
		sh.insert(s, h, string(key), &fresh, now)
	}
	sh.mu.Unlock()
}

// decide decides one request against e alone and commits it if allowed.
// The caller holds e.mu, or owns e. A fresh entry (alg 0) stays fresh unless
// the request changed it; a denied request writes nothing.
func (e *entry) decide(l *Limit, now, cost int64) BucketState {
	if e.alg != l.alg && e.alg != 0 {
		// The rule changed algorithm under the same name: start afresh.
		e.st, e.alg, e.expires = State{Log: e.st.Log[:0]}, 0, 0
	}
	if l.isBucket() {
		st, left := e.decideBucket(l, now, cost)
		st.Remaining = left / l.interval
		return st
	}
	st, next := l.Decide(&e.st, now, cost)
	if st.Allowed && cost > 0 {
		l.Commit(&e.st, next, cost)
		e.alg, e.expires = l.alg, l.ExpiresAt(&e.st)
	}
	return st
}

// decideBucket is decide for a token bucket or shaping limit, whose state is
// a TAT and the fill time it was written under, without the division for
// Remaining: it returns the span Remaining counts intervals of (see
// Limit.gcraSpan). The caller holds e.mu.
func (e *entry) decideBucket(l *Limit, now, cost int64) (BucketState, int64) {
	if e.alg != l.alg && e.alg != 0 {
		e.st, e.alg, e.expires = State{Log: e.st.Log[:0]}, 0, 0
	}
	st, left, tat := l.gcraSpan(e.st.A, e.st.Span, now, cost)
	if st.Allowed && cost > 0 {
		// Full again at the TAT, under this limit and (rounded up to the
		// microsecond) under any other that may read it later: see
		// Limit.ExpiresAt.
		e.alg, e.st.A, e.st.Span, e.expires = l.alg, tat, l.tau, ceilMicro(tat)
	}
	return st, left
}

// takeMany locks every shard involved, in index order so that two takes
// cannot deadlock, then the existing buckets; decides every bucket; and
// commits only if all allow. Single-bucket takes lock one bucket and never
// wait for another lock while holding it, so they cannot deadlock with this.
func (s *MemoryStore) takeMany(t *Take, now int64) {
	n := len(t.Buckets)
	var (
		keyArr   [512]byte // the keys, back to back
		endArr   [8]int    // where each key ends in keyArr
		hashArr  [8]uint64
		entArr   [8]*entry
		nextArr  [8]State
		orderArr [8]uint32
	)
	kb, ends, hashes, ents, nexts, order := keyArr[:0], endArr[:0], hashArr[:0], entArr[:0], nextArr[:0], orderArr[:0]
	if n > len(endArr) {
		ends, hashes, ents, nexts, order = make([]int, 0, n), make([]uint64, 0, n), make([]*entry, 0, n), make([]State, 0, n), make([]uint32, 0, n)
	}
	for i := range t.Buckets {
		kb = appendKey(kb, &t.Buckets[i])
		ends = append(ends, len(kb))
	}
	key := func(i int) []byte {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		return kb[start:ends[i]]
	}
	for i := range t.Buckets {
		h := maphash.Bytes(s.seed, key(i))
		hashes = append(hashes, h)
		order = append(order, uint32(h&s.mask))
	}
	sortUint32(order)
	order = dedupUint32(order)
	for _, o := range order {
		s.shards[o].mu.Lock()
	}
	// With the shard locks held, no entry of these shards is inserted or
	// dropped, so the lookups stay valid and none is dead.
	for i := range t.Buckets {
		e := s.shards[hashes[i]&s.mask].tab.Load().lookup(hashes[i], key(i))
		if e != nil {
			e.mu.Lock()
		}
		ents = append(ents, e)
	}
	allowed := true
	nexts = nexts[:n]
	for i := range t.Buckets {
		l := t.Buckets[i].Limit
		var cur State
		if e := ents[i]; e != nil && e.alg == l.alg {
			cur = e.st
		}
		t.States[i], nexts[i] = l.Decide(&cur, now, t.Cost)
		allowed = allowed && t.States[i].Allowed
	}
	if allowed && t.Cost > 0 {
		// Existing buckets first: once committed they are unexpired, and
		// locked, so the sweep in insert passes them by.
		for i, e := range ents {
			if e != nil {
				l := t.Buckets[i].Limit
				if e.alg != l.alg {
					e.st = State{Log: e.st.Log[:0]}
				}
				l.Commit(&e.st, nexts[i], t.Cost)
				e.alg, e.expires = l.alg, l.ExpiresAt(&e.st)
			}
		}
		for i, e := range ents {
			if e == nil {
				l := t.Buckets[i].Limit
				var fresh entry
				l.Commit(&fresh.st, nexts[i], t.Cost)
				fresh.alg, fresh.expires = l.alg, l.ExpiresAt(&fresh.st)
				s.shards[hashes[i]&s.mask].insert(s, hashes[i], string(key(i)), &fresh, now)
			}
		}
	} else if !allowed {
		// Nothing is consumed: report each bucket's balance as it stands.
		for i := range t.Buckets {
			if t.States[i].Allowed {
				l := t.Buckets[i].Limit
				var cur State
				if e := ents[i]; e != nil && e.alg == l.alg {
					cur = e.st
				}
				t.States[i], _ = l.Decide(&cur, now, 0)
			}
		}
	}
	for _, e := range ents {
		if e != nil {
			e.mu.Unlock()
		}
	}
	for k := len(order) - 1; k >= 0; k-- {
		s.shards[order[k]].mu.Unlock()
	}
}

// insert adds a copy of fresh under key, making room first if the shard is
// full. The caller holds sh.mu.
func (sh *shard) insert(s *MemoryStore, h uint64, key string, fresh *entry, now int64) {
	sh.sweep(s, now, 2)
	if sh.live >= s.perCap {
		// Full: look a little further for expired entries, then evict.
		// Both are bounded, so an insert never scans the whole table.
		sh.sweep(s, now, 32)
		if sh.live >= s.perCap {
			sh.evict(s)
		}
	}
	tab := sh.tab.Load()
	if 2*(sh.used+1) > len(tab.slots) {
		tab = sh.resize()
	}
	e := &entry{hash: h, key: key, alg: fresh.alg, expires: fresh.expires, st: fresh.st}
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
	sh.live++
}

// resize publishes a new table sized for twice the live entries, without
// tombstones. Readers still on the old table find the same entries there.
func (sh *shard) resize() *table {
	old := sh.tab.Load()
	size := 8
	for size < 4*(sh.live+1) {
		size *= 2
	}
	tab := newTable(size)
	for i := range old.slots {
		e := old.slots[i].e.Load()
		if e == nil || e == tombstone {
			continue
		}
		j := e.hash & tab.mask
		for tab.slots[j].e.Load() != nil {
			j = (j + 1) & tab.mask
		}
		tab.slots[j].hash.Store(e.hash)
		tab.slots[j].e.Store(e)
	}
	sh.used = sh.live
	sh.cursor = 0
	sh.tab.Store(tab)
	return tab
}

func newTable(size int) *table {
	return &table{mask: uint64(size - 1), slots: make([]slot, size)}
}

// sweep looks at up to n slots from the cursor and drops the expired
// entries. A bucket locked by someone else is in use: it is passed by.
func (sh *shard) sweep(s *MemoryStore, now int64, n int) {
	tab := sh.tab.Load()
	for ; n > 0; n-- {
		if sh.cursor >= len(tab.slots) {
			sh.cursor = 0
		}
		i := sh.cursor
		sh.cursor++
		e := tab.slots[i].e.Load()
		if e == nil || e == tombstone || !e.mu.TryLock() {
			continue
		}
		// now - delay, not expires + delay: a sliding window expires up to
		// two MaxSpan after MaxTime, at the very end of int64.
		if e.expires <= now-s.delay {
			sh.drop(tab, i, e)
			s.reclaimed.Add(1)
		}
		e.mu.Unlock()
	}
}

// evict drops, among up to eight entries from the cursor, the one that
// expires first: it forgives the least. Entries locked elsewhere (in use,
// possibly by the caller's own take) are passed by.
func (sh *shard) evict(s *MemoryStore) {
	tab := sh.tab.Load()
	best, bestAt := -1, int64(0)
	for seen, k := 0, 0; seen < 8 && k < len(tab.slots); k++ {
		i := (sh.cursor + k) & int(tab.mask)
		e := tab.slots[i].e.Load()
		if e == nil || e == tombstone || !e.mu.TryLock() {
			continue
		}
		seen++
		if best < 0 || e.expires < bestAt {
			if best >= 0 {
				tab.slots[best].e.Load().mu.Unlock()
			}
			best, bestAt = i, e.expires
		} else {
			e.mu.Unlock()
		}
	}
	if best < 0 {
		return
	}
	e := tab.slots[best].e.Load()
	sh.drop(tab, best, e)
	e.mu.Unlock()
	sh.cursor = best + 1
	s.evictions.Add(1)
}

// drop removes e, at slot i, from the table. The caller holds sh.mu and
// e.mu; goroutines that found e before are told by e.dead to look again.
func (sh *shard) drop(tab *table, i int, e *entry) {
	e.dead = true
	tab.slots[i].e.Store(tombstone)
	sh.live--
}

// Reclaim drops every expired bucket now. It locks one shard at a time, so
// concurrent decisions wait at most for one shard's sweep, and it shrinks
// tables that have become mostly empty. It is safe for concurrent use, and
// does nothing on a store not made by NewMemoryStore.
func (s *MemoryStore) Reclaim() {
	if !s.constructed() {
		return
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.sweep(s, s.now(), len(sh.tab.Load().slots))
		if n := len(sh.tab.Load().slots); n > 8 && 8*sh.live < n {
			sh.resize()
		}
		sh.mu.Unlock()
	}
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
	key := appendKey(nil, &Bucket{Rule: rule, Key: id})
	h := maphash.Bytes(s.seed, key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tab := sh.tab.Load()
	for i := h & tab.mask; ; i = (i + 1) & tab.mask {
		e := tab.slots[i].e.Load()
		if e == nil {
			return nil // absent: full already
		}
		if e != tombstone && tab.slots[i].hash.Load() == h && e.key == string(key) {
			e.mu.Lock()
			sh.drop(tab, int(i), e)
			e.mu.Unlock()
			return nil
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

// Stats returns the store's counters. It locks one shard at a time, so the
// counts are not one snapshot while decisions run. It is safe for concurrent
// use, and returns zero counts for a store not made by NewMemoryStore.
func (s *MemoryStore) Stats() MemoryStats {
	if !s.constructed() {
		return MemoryStats{}
	}
	st := MemoryStats{Reclaimed: s.reclaimed.Load(), Evictions: s.evictions.Load()}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.live
		sh.mu.Unlock()
	}
	return st
}

func sortUint32(a []uint32) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

func dedupUint32(a []uint32) []uint32 {
	if len(a) == 0 {
		return a
	}
	out := a[:1]
	for _, v := range a[1:] {
		if v != out[len(out)-1] {
			out = append(out, v)
		}
	}
	return out
}
