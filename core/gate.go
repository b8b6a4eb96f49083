package core

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// A DenialGate holds back the Denials of WithGatedDenials while whoever
// takes them cannot (an audit log whose queue is full): while it is shut,
// a denied decision makes no Denial and calls nothing; the limiter counts
// its denying tiers in Dropped instead, for the cost of one load and one
// addition. Its owner shuts and opens it as it fills and drains. The
// count is striped, so that cores denying at once in a deny flood do not
// share one cache line. A DenialGate is safe for concurrent use; make it
// with NewDenialGate. It starts open.
type DenialGate struct {
	shut  atomic.Bool
	cells []gateCell
	mask  uint64
}

// gateCell is one stripe of Dropped, on a cache line of its own.
type gateCell struct {
	n atomic.Int64
	_ [56]byte
}

// NewDenialGate returns an open gate with four stripes per GOMAXPROCS,
// rounded up to a power of two (at most 256), so that goroutines running
// at once seldom share one.
func NewDenialGate() *DenialGate {
	n := 1
	for n < 4*runtime.GOMAXPROCS(0) && n < 256 {
		n *= 2
	}
	return &DenialGate{cells: make([]gateCell, n), mask: uint64(n - 1)}
}

// Shut holds back the Denials of the decisions that follow.
func (g *DenialGate) Shut() { g.shut.Store(true) }

// Open lets them through again.
func (g *DenialGate) Open() { g.shut.Store(false) }

// IsShut reports whether the gate is shut.
func (g *DenialGate) IsShut() bool { return g.shut.Load() }

// Drop adds n to Dropped: the owner's own drops, for one count of all.
func (g *DenialGate) Drop(n int) {
	// The stripe of the calling goroutine, from the address of a local
	// variable, which lies in the goroutine's own stack: a shift and a
	// multiplication where a random number costs more. The address is only
	// hashed, never kept; a stack that moves only changes the stripe.
	var x byte
	a := uint64(uintptr(unsafe.Pointer(&x))) >> 11 // 2KiB, the least goroutine stack
	a *= 0x9e3779b97f4a7c15                        // Fibonacci hashing: the top bits depend on every bit
	g.cells[(a>>56)&g.mask].n.Add(int64(n))
}

// Dropped returns the denying tiers held back while the gate was shut,
// and what the owner counted with Drop.
func (g *DenialGate) Dropped() int64 {
	var sum int64
	for i := range g.cells {
		sum += g.cells[i].n.Load()
	}
	return sum
}
