package ginlimit

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"github.com/gin-gonic/gin"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
)

// passes records the requests a middleware has let through whose chain
// is still running, by their *gin.Context: the middleware that meets one
// of them again (installed at two levels, or run again by
// engine.HandleContext, which clears c.Keys but keeps c) lets it through
// uncharged, and another middleware over the same limiter fails it. A
// gin.Context belongs to one request at a time (gin pools them, and takes
// one back only when its request is served), and a request is recorded
// only while the middleware's c.Next runs, so a context recorded is the
// request in progress, never one served before.
//
// Most requests take a slot of a table of addresses, found by hashing
// the context's: a group of passGroup slots, one cache line (the table,
// 8 KiB holding no pointers, is an object of that size class, which the
// allocator aligns to 8 KiB), which the request claims by a
// compare-and-swap and clears when its chain returns. A request that finds its group full (more requests at once
// than the table spreads well) goes in a map under a lock instead, so
// that the record never drops one.
type passes struct {
	// slots hold the contexts' addresses, which the GC need not scan or
	// be told of: a context recorded is in use by its request anyway.
	slots *[passSlots]atomic.Uintptr
	// over holds the requests that found their group full, under mu;
	// nover is its length, which lookups read before taking mu.
	nover atomic.Int64
	mu    sync.Mutex
	over  map[*gin.Context]struct{}
}

const (
	passGroup = 8               // slots a context may take, one cache line of addresses
	passSlots = 128 * passGroup // 8 KiB per middleware
	// passShift keeps the top bits of the hash, which pick the group.
	passShift = 64 - 7
)

// newPasses returns an empty record.
func newPasses() *passes {
	return &passes{slots: new([passSlots]atomic.Uintptr)}
}

// overflowed is where add records a request that took no slot.
const overflowed = -1

// group returns the index of c's first slot.
func group(c uintptr) int {
	// Fibonacci hashing of the address: its high bits depend on every
	// bit of the address, whose low ones are the same for every context.
	h := uint64(c) * 0x9e3779b97f4a7c15
	return int(h>>passShift) * passGroup
}

// addr is c's address, which a slot holds.
func addr(c *gin.Context) uintptr { return uintptr(unsafe.Pointer(c)) }

// has reports whether c is recorded.
func (p *passes) has(c *gin.Context) bool {
	a := addr(c)
	g := group(a)
	for i := g; i < g+passGroup; i++ {
		if p.slots[i].Load() == a {
			return true
		}
	}
	if p.nover.Load() == 0 {
		return false
	}
	p.mu.Lock()
	_, ok := p.over[c]
	p.mu.Unlock()
	return ok
}

// add records c, which is not recorded, and returns where, for remove.
func (p *passes) add(c *gin.Context) int {
	a := addr(c)
	g := group(a)
	for i := g; i < g+passGroup; i++ {
		if p.slots[i].Load() == 0 && p.slots[i].CompareAndSwap(0, a) {
			return i
		}
	}
	p.mu.Lock()
	if p.over == nil {
		p.over = make(map[*gin.Context]struct{})
	}
	p.over[c] = struct{}{}
	p.nover.Add(1)
	p.mu.Unlock()
	return overflowed
}

// remove forgets c, which add recorded at at.
func (p *passes) remove(c *gin.Context, at int) {
	if at != overflowed {
		p.slots[at].Store(0)
		return
	}
	p.mu.Lock()
	delete(p.over, c)
	p.nover.Add(-1)
	p.mu.Unlock()
}

// siblings are the gin middlewares made over one limiter, each of which
// fails a request another one has let through (flow.Engine.SeenBy). They
// are kept with the limiter (flow.Shared), and each is dropped from them
// when it is collected.
type siblings struct {
	mu   sync.Mutex                                 // serializes changes of list
	list atomic.Pointer[[]weak.Pointer[middleware]] // copied on write
}

// siblingsKey is the key of a limiter's siblings in flow.Shared.
type siblingsKey struct{}

// siblingsOf returns the siblings of the gin middlewares over limiter;
// with add false, nil when there are none.
func siblingsOf(limiter *core.Limiter, add bool) *siblings {
	var newValue func() any
	if add {
		newValue = func() any { return new(siblings) }
	}
	s, _ := flow.Shared(limiter, siblingsKey{}, newValue).(*siblings)
	return s
}

// join adds m to the siblings of the gin middlewares over limiter, and
// returns them.
func join(limiter *core.Limiter, m *middleware) *siblings {
	s := siblingsOf(limiter, true)
	wm := weak.Make(m)
	s.change(func(list []weak.Pointer[middleware]) []weak.Pointer[middleware] { return append(list, wm) })
	runtime.AddCleanup(m, func(s *siblings) {
		s.change(func(list []weak.Pointer[middleware]) []weak.Pointer[middleware] {
			// Every pointer to m is nil once it is collected: drop them all.
			var kept []weak.Pointer[middleware]
			for _, w := range list {
				if w.Value() != nil {
					kept = append(kept, w)
				}
			}
			return kept
		})
	}, s)
	return s
}

// change replaces s's list with what f makes of a copy of it.
func (s *siblings) change(f func([]weak.Pointer[middleware]) []weak.Pointer[middleware]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var list []weak.Pointer[middleware]
	if p := s.list.Load(); p != nil {
		list = append(list, *p...)
	}
	list = f(list)
	s.list.Store(&list)
}
