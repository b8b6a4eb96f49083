package pglimit

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// drops counts the rows dropped by a full queue, which in a deny flood is
// nearly every denied decision, from every core at once: one shared
// counter would be a cache line bouncing between the cores on each of
// them. Each goroutine adds to one of several padded cells instead, and
// Load sums them.
type drops struct {
	cells []dropCell
	mask  uint64
}

// dropCell is one counter on a cache line of its own.
type dropCell struct {
	n atomic.Int64
	_ [56]byte
}

// newDrops returns counters with four cells per GOMAXPROCS, rounded up
// to a power of two, so that goroutines running at once seldom share one.
func newDrops() drops {
	n := 1
	for n < 4*runtime.GOMAXPROCS(0) && n < 256 {
		n *= 2
	}
	return drops{cells: make([]dropCell, n), mask: uint64(n - 1)}
}

// Add adds n to the cell of the calling goroutine, found from the address
// of a local variable, which lies in the goroutine's own stack: a few
// shifts and multiplications, where a random number costs more. The
// address is only hashed, never kept; any cell counts correctly, the
// choice only spreads the writes.
func (d *drops) Add(n int64) {
	var x byte
	a := uint64(uintptr(unsafe.Pointer(&x))) >> 11 // 2KiB, the least goroutine stack
	a *= 0x9e3779b97f4a7c15                        // Fibonacci hashing: the top bits depend on every bit
	d.cells[(a>>56)&d.mask].n.Add(n)
}

// Load returns the sum of the cells.
func (d *drops) Load() int64 {
	var sum int64
	for i := range d.cells {
		sum += d.cells[i].n.Load()
	}
	return sum
}
