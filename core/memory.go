package core

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// MemoryStore keeps buckets in process memory. It is the embedded default
// store and is safe for concurrent use.
//
// Keys are spread over independently locked shards, so goroutines on
// different keys rarely wait for each other. Deciding on an existing bucket
// allocates nothing.
//
// A bucket whose state is equivalent to a new one (a full token bucket, an
// empty window) is expired: it is dropped as the store goes, a few slots of
// a shard at each insertion, and all at once by Reclaim, one shard at a time.
// Nothing ever locks the whole store.
//
// The store holds at most WithMaxKeys buckets (rounded up to a multiple of
// the shard count). When a shard is full, it first
// drops expired buckets; if none has expired it evicts, among eight sampled
// buckets, the one that would be full soonest. Evicting a bucket forgives
// what it still owed (at most its burst), so a store too small for its
// traffic can admit more than the policy; Stats counts evictions so that
// this is visible. Size the store for the number of live keys.
type MemoryStore struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	clock  Clock // nil: the monotonic clock below
	wall0  int64 // Unix ns at mono0
	mono0  time.Time
	perCap int // most buckets per shard

	evictions atomic.Int64
	reclaimed atomic.Int64
}

type shard struct {
	mu     sync.Mutex
	index  map[string]int32 // bucket key -> slot
	slots  []slot
	free   []int32
	cursor int // next slot the incremental sweep looks at
	_      [64]byte
}

type slot struct {
	key     string // "" when free
	alg     Algorithm
	expires int64
	st      State
}

// MemoryOption configures a MemoryStore.
type MemoryOption interface{ applyMemory(*memoryConfig) }

type memoryConfig struct {
	clock   Clock
	maxKeys int
	shards  int
}

type memoryOptionFunc func(*memoryConfig)

func (f memoryOptionFunc) applyMemory(c *memoryConfig) { f(c) }

// WithClock makes the store read time from c instead of the system's
// monotonic clock. Tests use a ManualClock.
func WithClock(c Clock) MemoryOption {
	return memoryOptionFunc(func(cfg *memoryConfig) { cfg.clock = c })
}

// WithMaxKeys bounds the number of buckets the store holds. The default is
// 1,000,000 (about 100 MB at most, with short keys).
func WithMaxKeys(n int) MemoryOption {
	return memoryOptionFunc(func(cfg *memoryConfig) { cfg.maxKeys = n })
}

// WithShards sets the number of shards, rounded up to a power of two. The
// default is 16 per CPU, at least 64.
func WithShards(n int) MemoryOption {
	return memoryOptionFunc(func(cfg *memoryConfig) { cfg.shards = n })
}

// NewMemoryStore returns an empty in-memory store.
func NewMemoryStore(opts ...MemoryOption) (*MemoryStore, error) {
	cfg := memoryConfig{maxKeys: 1_000_000, shards: max(64, 16*runtime.GOMAXPROCS(0))}
	for _, o := range opts {
		o.applyMemory(&cfg)
	}
	if cfg.maxKeys < 1 {
		return nil, fmt.Errorf("%w: max keys must be >= 1, got %d", ErrInvalidOption, cfg.maxKeys)
	}
	if cfg.shards < 1 || cfg.shards > 1<<16 {
		return nil, fmt.Errorf("%w: shards must be between 1 and 65536, got %d", ErrInvalidOption, cfg.shards)
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
	}
	s.wall0 = s.mono0.UnixNano()
	for i := range s.shards {
		s.shards[i].index = make(map[string]int32)
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

// Take implements Store.
func (s *MemoryStore) Take(ctx context.Context, t *Take) error {
	if err := CheckTake(t); err != nil {
		return err
	}
	now := s.now()
	if !t.Now.IsZero() {
		now = t.Now.UnixNano()
	}
	if len(t.Buckets) == 1 {
		s.takeOne(t, now)
		return nil
	}
	s.takeMany(t, now)
	return nil
}

func (s *MemoryStore) takeOne(t *Take, now int64) {
	var arr [96]byte
	b := &t.Buckets[0]
	key := appendKey(arr[:0], b)
	sh := &s.shards[maphash.Bytes(s.seed, key)&s.mask]
	sh.mu.Lock()
	i, ok := sh.index[string(key)]
	var cur State
	var sl *slot
	if ok {
		sl = &sh.slots[i]
		if sl.alg != b.Limit.alg {
			sl.st = State{Log: sl.st.Log[:0]}
			sl.alg = b.Limit.alg
		}
		cur = sl.st
	}
	st, next := b.Limit.Decide(&cur, now, t.Cost)
	t.States[0] = st
	if st.Allowed && t.Cost > 0 {
		if sl == nil {
			sl = sh.insert(s, string(key), b.Limit.alg, now)
		}
		b.Limit.Commit(&sl.st, next, t.Cost)
		sl.expires = b.Limit.ExpiresAt(&sl.st)
	}
	sh.mu.Unlock()
}

// takeMany locks every shard involved, in index order so that two takes
// cannot deadlock, decides every bucket, and commits only if all allow.
func (s *MemoryStore) takeMany(t *Take, now int64) {
	n := len(t.Buckets)
	var (
		keyArr   [512]byte // the keys, back to back
		endArr   [8]int    // where each key ends in keyArr
		shArr    [8]uint32
		slotArr  [8]int32
		stateArr [8]State
	)
	kb, ends, shs, slots, states := keyArr[:0], endArr[:0], shArr[:0], slotArr[:0], stateArr[:0]
	if n > len(endArr) {
		ends, shs, slots, states = make([]int, 0, n), make([]uint32, 0, n), make([]int32, 0, n), make([]State, 0, n)
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
		shs = append(shs, uint32(maphash.Bytes(s.seed, key(i))&s.mask))
	}
	// Lock each distinct shard once, in ascending order.
	order := make([]uint32, 0, 8)
	order = append(order, shs...)
	sortUint32(order)
	order = dedupUint32(order)
	for _, o := range order {
		s.shards[o].mu.Lock()
	}
	allowed := true
	states = states[:n]
	slots = slots[:n]
	for i := range t.Buckets {
		b := &t.Buckets[i]
		sh := &s.shards[shs[i]]
		slots[i] = -1
		states[i] = State{}
		if j, ok := sh.index[string(key(i))]; ok {
			slots[i] = j
			sl := &sh.slots[j]
			if sl.alg != b.Limit.alg {
				sl.st = State{Log: sl.st.Log[:0]}
				sl.alg = b.Limit.alg
			}
			states[i] = sl.st
		}
		var next State
		t.States[i], next = b.Limit.Decide(&states[i], now, t.Cost)
		states[i] = next
		allowed = allowed && t.States[i].Allowed
	}
	if allowed && t.Cost > 0 {
		// Existing buckets first: once committed they are unexpired, so the
		// sweep in insert cannot drop a slot this take still refers to.
		for pass := 0; pass < 2; pass++ {
			for i := range t.Buckets {
				if (slots[i] >= 0) != (pass == 0) {
					continue
				}
				b := &t.Buckets[i]
				sh := &s.shards[shs[i]]
				var sl *slot
				if pass == 0 {
					sl = &sh.slots[slots[i]]
				} else {
					sl = sh.insert(s, string(key(i)), b.Limit.alg, now)
				}
				b.Limit.Commit(&sl.st, states[i], t.Cost)
				sl.expires = b.Limit.ExpiresAt(&sl.st)
			}
		}
	} else if !allowed {
		// Nothing is consumed: report each bucket's balance as it stands.
		for i := range t.Buckets {
			if t.States[i].Allowed {
				cur := State{}
				if slots[i] >= 0 {
					cur = s.shards[shs[i]].slots[slots[i]].st
				}
				t.States[i], _ = t.Buckets[i].Limit.Decide(&cur, now, 0)
			}
		}
	}
	for k := len(order) - 1; k >= 0; k-- {
		s.shards[order[k]].mu.Unlock()
	}
}

// insert adds a bucket, making room first if the shard is full, and returns
// its slot. The caller holds sh.mu. insert may grow sh.slots and drop expired
// or evicted slots, so pointers into sh.slots taken before it are invalid.
func (sh *shard) insert(s *MemoryStore, key string, alg Algorithm, now int64) *slot {
	sh.sweep(s, now, 2)
	if len(sh.index) >= s.perCap {
		sh.sweep(s, now, len(sh.slots))
		if len(sh.index) >= s.perCap {
			sh.evict(s)
		}
	}
	var i int32
	if n := len(sh.free); n > 0 {
		i = sh.free[n-1]
		sh.free = sh.free[:n-1]
	} else {
		sh.slots = append(sh.slots, slot{})
		i = int32(len(sh.slots) - 1)
	}
	sl := &sh.slots[i]
	sl.key, sl.alg, sl.expires = key, alg, 0
	sl.st = State{Log: sl.st.Log[:0]}
	sh.index[key] = i
	return sl
}

// sweep looks at up to n slots from the cursor and drops the expired ones.
func (sh *shard) sweep(s *MemoryStore, now int64, n int) {
	for ; n > 0 && len(sh.slots) > 0; n-- {
		if sh.cursor >= len(sh.slots) {
			sh.cursor = 0
		}
		sl := &sh.slots[sh.cursor]
		if sl.key != "" && sl.expires <= now {
			sh.drop(int32(sh.cursor))
			s.reclaimed.Add(1)
		}
		sh.cursor++
	}
}

// evict drops, among up to eight slots from the cursor, the bucket that
// expires first: it forgives the least.
func (sh *shard) evict(s *MemoryStore) {
	best := int32(-1)
	for seen, i := 0, 0; seen < 8 && i < len(sh.slots); i++ {
		j := int32((sh.cursor + i) % len(sh.slots))
		if sh.slots[j].key == "" {
			continue
		}
		seen++
		if best < 0 || sh.slots[j].expires < sh.slots[best].expires {
			best = j
		}
	}
	if best >= 0 {
		sh.drop(best)
		s.evictions.Add(1)
	}
}

func (sh *shard) drop(i int32) {
	sl := &sh.slots[i]
	delete(sh.index, sl.key)
	sl.key = ""
	sl.st = State{Log: sl.st.Log[:0]}
	sh.free = append(sh.free, i)
}

// Reclaim drops every expired bucket now. It locks one shard at a time, so
// concurrent decisions wait at most for one shard's sweep.
func (s *MemoryStore) Reclaim() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.sweep(s, s.now(), len(sh.slots))
		sh.mu.Unlock()
	}
}

// MemoryStats counts what a MemoryStore holds and has dropped.
type MemoryStats struct {
	Keys      int   // buckets held now, expired or not
	Reclaimed int64 // expired buckets dropped since creation
	Evictions int64 // unexpired buckets dropped at the bound since creation
}

// Stats returns the store's counters. It locks one shard at a time.
func (s *MemoryStore) Stats() MemoryStats {
	st := MemoryStats{Reclaimed: s.reclaimed.Load(), Evictions: s.evictions.Load()}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += len(sh.index)
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
