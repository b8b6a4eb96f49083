package redisscript

import (
	"sync/atomic"
	"time"
)

// MaxBatch is the most requests one script call carries.
const MaxBatch = 128

// Batchers holds one Batcher per hash slot (one in all outside Cluster),
// each made on first use. It is safe for concurrent use.
type Batchers struct {
	slots   []atomic.Pointer[Batcher]
	send    Sender
	timeout time.Duration
	minTTL  time.Duration
}

// NewBatchers returns the batchers of a store with slots hash slots (1, or
// 16384 in Cluster) sending through send.
func NewBatchers(slots int, send Sender, timeout, minTTL time.Duration) *Batchers {
	return &Batchers{slots: make([]atomic.Pointer[Batcher], slots), send: send, timeout: timeout, minTTL: minTTL}
}

// For returns the batcher of slot.
func (b *Batchers) For(slot int) *Batcher {
	p := &b.slots[slot]
	if bt := p.Load(); bt != nil {
		return bt
	}
	p.CompareAndSwap(nil, NewBatcher(b.send, MaxBatch, b.timeout, b.minTTL))
	return p.Load()
}
