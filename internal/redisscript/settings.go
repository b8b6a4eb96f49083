package redisscript

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// Settings are the options the Redis stores share. Each store's With*
// options set them; Check validates them once for both.
type Settings struct {
	Prefix  string        // key prefix; "ratelimit" by default
	HashAll bool          // hash every identity with Secret
	Secret  []byte        // the HMAC key when HashAll
	Clock   core.Clock    // nil: the Redis server's TIME
	Timeout time.Duration // bound on each Take; 0: none
	MinTTL  time.Duration // least life of a written key; 0: exact
	Local   bool          // answer provable denials locally
	NoBatch bool          // one script call per request
}

// DefaultSettings returns the defaults of both stores.
func DefaultSettings() Settings { return Settings{Prefix: "ratelimit"} }

// Check validates s and returns its key namer. Errors wrap
// core.ErrInvalidOption.
func (s *Settings) Check() (*Keys, error) {
	if s.Timeout < 0 {
		return nil, fmt.Errorf("%w: timeout must be >= 0, got %v", core.ErrInvalidOption, s.Timeout)
	}
	if s.MinTTL < 0 || s.MinTTL > core.MaxSpan {
		return nil, fmt.Errorf("%w: WithMinTTL must be between 0 and %v, got %v", core.ErrInvalidOption, core.MaxSpan, s.MinTTL)
	}
	return NewKeys(s.Prefix, s.HashAll, s.Secret)
}

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
