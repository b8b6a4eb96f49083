package core

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"
)

// Lookup gives a rule its limit per identity (Rule.Lookup): the numbers of
// one tenant, API key or user, kept in a configuration store and looked up
// at request time. The rule's own Limit is the fallback for identities the
// lookup has none for. LimitTable is an in-memory Lookup; LookupFunc makes
// one of a function, for other sources.
//
// A bucket is keyed by the rule and the identity, not by the limit, so an
// identity whose limit changes keeps its bucket: a token bucket keeps the
// share of its burst it had, a window its count (see the package
// documentation).
type Lookup interface {
	// Limit returns identity's limit and true, or false when identity has
	// none and the rule's Limit applies. The limit must have been made by
	// NewLimit (or come from a LimitTable) and must not be modified. An
	// error fails the decision: the Limiter returns it wrapped, naming the
	// rule, and the middleware hands it to its error handler.
	//
	// It is called on every decision the rule applies to, from many
	// goroutines at once: it must be safe for concurrent use, and quick,
	// for the decision waits for it.
	Limit(ctx context.Context, identity string) (*Limit, bool, error)
}

// NewLimit validates l as NewPolicy validates a rule's limit and returns a
// copy ready for a Lookup to return. The error wraps ErrInvalidRate,
// ErrInvalidBurst, ErrInvalidWindow or ErrInvalidRule.
func NewLimit(l Limit) (*Limit, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	return &l, nil
}

// LookupFunc is a Lookup made of a function, for limits kept elsewhere (a
// database, a configuration service): fn returns identity's limit and
// true, false when it has none, or an error. Each limit it returns is
// validated on every call (an invalid one fails the decision with an error
// wrapping ErrInvalidRate, ErrInvalidBurst, ...); equal limits share one
// copy while fn keeps returning them, so the Redis stores reuse their
// encoded arguments. fn is called on every decision the rule applies to,
// concurrently: cache what is slow to fetch.
type LookupFunc func(ctx context.Context, identity string) (Limit, bool, error)

// Limit calls f and validates its limit.
func (f LookupFunc) Limit(ctx context.Context, identity string) (*Limit, bool, error) {
	l, ok, err := f(ctx, identity)
	if err != nil || !ok {
		return nil, false, err
	}
	if err := l.validate(); err != nil {
		return nil, false, fmt.Errorf("identity %q: %w", identity, err)
	}
	slot := &recentLimits[maphash.Comparable(limitSeed, l)%uint64(len(recentLimits))]
	if p := slot.Load(); p != nil && *p == l {
		return p, true, nil
	}
	p := &l
	slot.Store(p)
	return p, true, nil
}

// recentLimits holds the limits LookupFuncs returned lately, one per slot
// by hash: equal limits returned again share one copy, and the cache holds
// at most its length, whatever the functions return.
var (
	recentLimits [256]atomic.Pointer[Limit]
	limitSeed    = maphash.MakeSeed()
)

// LimitTable is an in-memory Lookup the service fills and updates at run
// time: tenant limits loaded at start-up and changed as customers change
// plans. Make one with NewLimitTable. It is safe for concurrent use; a
// lookup takes a read lock on one of many shards and allocates nothing, so
// its cost does not grow with the number of identities. Equal limits share
// one copy. The zero value is not usable.
type LimitTable struct {
	seed   maphash.Seed
	shards [tableShards]tableShard

	mu     sync.Mutex // guards intern
	intern map[Limit]weak.Pointer[Limit]
}

const tableShards = 64

type tableShard struct {
	mu sync.RWMutex
	m  map[string]*Limit
	_  [64 - 32]byte // a cache line each
}

// NewLimitTable returns an empty table.
func NewLimitTable() *LimitTable {
	t := &LimitTable{seed: maphash.MakeSeed(), intern: map[Limit]weak.Pointer[Limit]{}}
	for i := range t.shards {
		t.shards[i].m = map[string]*Limit{}
	}
	return t
}

func (t *LimitTable) shard(identity string) *tableShard {
	return &t.shards[maphash.String(t.seed, identity)%tableShards]
}

// Set gives identity limit l, replacing any it had. It fails, changing
// nothing, with an error naming the identity and wrapping ErrInvalidKey
// for an identity that cannot be a key (see CheckKey), or the error of an
// invalid l (ErrInvalidRate, ErrInvalidBurst, ...).
func (t *LimitTable) Set(identity string, l Limit) error {
	if t == nil || t.intern == nil {
		return fmt.Errorf("%w: LimitTable is a zero value or nil; make one with NewLimitTable", ErrNotConstructed)
	}
	if err := CheckKey(identity); err != nil {
		return fmt.Errorf("ratelimit: LimitTable.Set: identity %q: %w", identity, err)
	}
	if err := l.validate(); err != nil {
		return fmt.Errorf("ratelimit: LimitTable.Set: identity %q: %w", identity, err)
	}
	p := t.canonical(l)
	s := t.shard(identity)
	s.mu.Lock()
	s.m[identity] = p
	s.mu.Unlock()
	return nil
}

// canonical returns the table's one copy of l, a validated limit.
func (t *LimitTable) canonical(l Limit) *Limit {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w, ok := t.intern[l]; ok {
		if p := w.Value(); p != nil {
			return p
		}
	}
	p := &l
	t.intern[l] = weak.Make(p)
	// A weak reference to t: a cleanup's argument is a root, and t holds p.
	runtime.AddCleanup(p, forget, tableLimit{weak.Make(t), l})
	return p
}

type tableLimit struct {
	t weak.Pointer[LimitTable]
	l Limit
}

// forget drops a limit's entry once no identity holds its copy, unless a
// newer copy took its place.
func forget(tl tableLimit) {
	t, l := tl.t.Value(), tl.l
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if w, ok := t.intern[l]; ok && w.Value() == nil {
		delete(t.intern, l)
	}
}

// Delete removes identity's limit: the rule's Limit applies to it again.
func (t *LimitTable) Delete(identity string) {
	s := t.shard(identity)
	s.mu.Lock()
	delete(s.m, identity)
	s.mu.Unlock()
}

// Get returns identity's limit, and false when it has none.
func (t *LimitTable) Get(identity string) (Limit, bool) {
	p, ok, _ := t.Limit(context.Background(), identity)
	if !ok {
		return Limit{}, false
	}
	return *p, true
}

// Len returns the number of identities with a limit.
func (t *LimitTable) Len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}

// Limit returns identity's limit, and false when it has none. It never
// fails.
func (t *LimitTable) Limit(_ context.Context, identity string) (*Limit, bool, error) {
	s := t.shard(identity)
	s.mu.RLock()
	p, ok := s.m[identity]
	s.mu.RUnlock()
	return p, ok, nil
}
