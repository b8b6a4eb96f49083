package core

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Store holds bucket state. Implementations must be safe for concurrent use
// and must pass the conformance suite (module conformance).
type Store interface {
	// Take decides one request of t.Cost against every bucket in t.Buckets
	// atomically: if every bucket allows it, each consumes t.Cost; if any
	// denies, none changes. It fills t.States[i] with the answer of
	// t.Buckets[i] (t.States has len(t.Buckets) on entry). A store failure is
	// returned as an error, never reported as a denial; on error t.States is
	// undefined and the limiter's failure policy decides.
	//
	// t.Now, when not zero, is the time of the decision; otherwise the store
	// uses its own clock (the Redis stores: the server's). Stores validate
	// keys and cost with CheckKey and CheckCost.
	Take(ctx context.Context, t *Take) error
}

// Take is one request against a set of buckets. The Limiter reuses Takes: a
// store must not keep a reference to one, or to its slices, after Take
// returns.
type Take struct {
	Now     time.Time     // zero: the store's clock
	Cost    int64         // tokens to take from each bucket; 0 only reads
	Buckets []Bucket      // the buckets, at most one per (Rule, Key)
	States  []BucketState // out: States[i] answers Buckets[i]
	At      time.Time     // out: the time the store decided at (Now, or its clock)
}

// Bucket names one bucket and its limit. Two buckets are the same bucket when
// Rule and Key are equal.
type Bucket struct {
	Rule  string // the rule's name
	Key   string // the identity, unique within the rule
	Limit *Limit // the algorithm and numbers; read only
}

// MaxKeyLen is the longest bucket key, in bytes.
const MaxKeyLen = 512

// CheckKey returns an error wrapping ErrInvalidKey if key is empty, longer
// than MaxKeyLen bytes, or holds an ASCII control character.
func CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: control character %#x at byte %d", ErrInvalidKey, c, i)
		}
	}
	return nil
}

// CheckCost returns an error wrapping ErrInvalidCost if cost is negative or
// above MaxCost.
func CheckCost(cost int64) error {
	if cost < 0 || cost > MaxCost {
		return fmt.Errorf("%w: must be between 0 and 2^50, got %d", ErrInvalidCost, cost)
	}
	return nil
}

// CheckTime returns an error wrapping ErrInvalidTime if t is before the Unix
// epoch or after MaxTime.
func CheckTime(t time.Time) error {
	if t.Before(time.Unix(0, 0)) || t.After(MaxTime) {
		return fmt.Errorf("%w: %v is outside 1970 to %v", ErrInvalidTime, t, MaxTime)
	}
	return nil
}

// CheckTake validates a Take as every store must before deciding: the cost,
// the explicit time if any, each key, and a limit on every bucket.
func CheckTake(t *Take) error {
	if err := CheckCost(t.Cost); err != nil {
		return err
	}
	if !t.Now.IsZero() {
		if err := CheckTime(t.Now); err != nil {
			return err
		}
	}
	if len(t.States) != len(t.Buckets) {
		return fmt.Errorf("%w: %d states for %d buckets", ErrInvalidOption, len(t.States), len(t.Buckets))
	}
	for i := range t.Buckets {
		b := &t.Buckets[i]
		if b.Limit == nil || b.Limit.alg == 0 || (b.Limit.isBucket() && b.Limit.interval == 0) {
			return fmt.Errorf("%w: bucket %q has no validated limit", ErrInvalidRule, b.Rule)
		}
		if !validName(b.Rule) {
			return fmt.Errorf("%w: rule name %q", ErrInvalidKey, b.Rule)
		}
		if err := CheckKey(b.Key); err != nil {
			return err
		}
		for j := range i {
			if t.Buckets[j].Rule == b.Rule && t.Buckets[j].Key == b.Key {
				return fmt.Errorf("%w: bucket %q/%q appears twice", ErrInvalidKey, b.Rule, b.Key)
			}
		}
	}
	return nil
}

// Clock tells the time. Inject one into a store to control time in tests.
type Clock interface {
	Now() time.Time
}

// ManualClock is a Clock that moves only when told to. The zero value reads
// as the Unix epoch; it is safe for concurrent use.
type ManualClock struct {
	ns atomic.Int64
}

// NewManualClock returns a ManualClock set to t.
func NewManualClock(t time.Time) *ManualClock {
	c := &ManualClock{}
	c.Set(t)
	return c
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Set moves the clock to t, forwards or backwards.
func (c *ManualClock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Advance moves the clock forwards by d (backwards if d < 0).
func (c *ManualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
