package core

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"
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
	// uses its own clock (the Redis stores: the server's). Stores validate t
	// with CheckTake before deciding.
	Take(ctx context.Context, t *Take) error
}

// Take is one request against a set of buckets. The Limiter reuses Takes: a
// store must not keep a reference to one, or to its slices, after Take
// returns. A Take is not safe for concurrent use. The zero value has no
// buckets, no cost and no explicit time.
type Take struct {
	Now     time.Time     // zero: the store's clock
	Cost    int64         // tokens to take from each bucket; 0 only reads
	Buckets []Bucket      // the buckets, at most one per (Rule, Key)
	States  []BucketState // out: States[i] answers Buckets[i]
	At      time.Time     // out: the time the store decided at (Now, or its clock)
}

// Bucket names one bucket and its limit. Two buckets are the same bucket when
// Rule and Key are equal. The zero value has no limit, and CheckTake rejects
// it.
type Bucket struct {
	Rule  string // the rule's name
	Key   string // the identity, unique within the rule
	Limit *Limit // the algorithm and numbers; read only
}

// MaxKeyLen is the longest bucket key, in bytes.
const MaxKeyLen = 512

// CheckKey returns an error wrapping ErrInvalidKey if key is empty, longer
// than MaxKeyLen bytes, or holds an ASCII control character. It is for Store
// implementations, which may build keys of their own (a prefix, say) that
// must obey the same rules; CheckTake already checks every Bucket.Key. It
// is safe for concurrent use.
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

// validKey reports whether CheckKey accepts key, without making its error.
func validKey(key string) bool {
	if uint(len(key)-1) >= MaxKeyLen {
		return false // empty, or too long
	}
	if len(key) < 8 {
		return validShort(key)
	}
	if len(key) <= 16 {
		// An IPv4 address, a short user ID: two words, the second
		// overlapping the first, with no loop.
		b := unsafe.Slice(unsafe.StringData(key), len(key)) // read only
		return !hasControl(binary.LittleEndian.Uint64(b)) && !hasControl(binary.LittleEndian.Uint64(b[len(b)-8:]))
	}
	return validWords(key)
}

// validShort is validKey's check of the bytes of a key under eight bytes,
// one at a time. It is small enough to be inlined, so that a hot path may
// accept a short key without a call: validShort(key) || validKey(key)
// decides as validKey(key) for any non-empty key.
func validShort(key string) bool {
	if len(key) >= 8 {
		return false
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// validWords is validKey's check of the bytes of a key of at least eight,
// eight bytes at a time, the last eight overlapping the word before.
func validWords(key string) bool {
	b := unsafe.Slice(unsafe.StringData(key), len(key)) // read only
	for i := 0; i < len(b)-8; i += 8 {
		if hasControl(binary.LittleEndian.Uint64(b[i:])) {
			return false
		}
	}
	return !hasControl(binary.LittleEndian.Uint64(b[len(b)-8:]))
}

// hasControl reports whether one of the eight bytes of x is an ASCII
// control character, below 0x20 or 0x7f, eight at a time: a byte below
// 0x20 leaves its high bit set in x-0x20 (a borrow from a lower byte can
// set more, but only when a lower byte is itself below 0x20), where it was
// clear in x; a byte equal to 0x7f is one that is zero in x^0x7f, found
// the same way. The result is exact for the word as a whole.
func hasControl(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	below := (x - 0x20*ones) &^ x & highs
	y := x ^ 0x7f*ones
	del := (y - ones) &^ y & highs
	return below|del != 0
}

// validCost reports whether cost is between 0 and MaxCost.
func validCost(cost int64) bool { return cost >= 0 && cost <= MaxCost }

// checkCost returns an error wrapping ErrInvalidCost if cost is negative or
// above MaxCost.
func checkCost(cost int64) error {
	if !validCost(cost) {
		return fmt.Errorf("%w: must be between 0 and 2^50, got %d", ErrInvalidCost, cost)
	}
	return nil
}

// checkTime returns an error wrapping ErrInvalidTime if t is before the Unix
// epoch or after maxTime.
func checkTime(t time.Time) error {
	if t.Before(time.Unix(0, 0)) || t.After(maxTime) {
		return fmt.Errorf("%w: %v is outside 1970 to %v", ErrInvalidTime, t, maxTime)
	}
	return nil
}

// CheckTake validates a Take as every Store implementation must before
// deciding, and returns the first problem: a cost outside [0, MaxCost]
// (ErrInvalidCost), an explicit time before the Unix epoch or after
// MaxTime() (ErrInvalidTime), States not as long as Buckets or a nil t
// (ErrInvalidOption), a bucket without a limit validated by NewPolicy
// (ErrInvalidRule), an invalid rule name or key, or one bucket twice
// (ErrInvalidKey). It is safe for concurrent use on distinct Takes.
func CheckTake(t *Take) error {
	if t == nil {
		return fmt.Errorf("%w: Take is nil", ErrInvalidOption)
	}
	if err := checkCost(t.Cost); err != nil {
		return err
	}
	if !t.Now.IsZero() {
		if err := checkTime(t.Now); err != nil {
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
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// ManualClock is a Clock that moves only when told to, with nanosecond
// resolution. The zero value reads as the Unix epoch; it is safe for
// concurrent use. Its methods must not be called on a nil *ManualClock, which
// WithClock refuses.
type ManualClock struct {
	ns atomic.Int64
}

// NewManualClock returns a ManualClock set to t.
func NewManualClock(t time.Time) *ManualClock {
	c := &ManualClock{}
	c.Set(t)
	return c
}

// Now returns the clock's time, in the local time zone.
func (c *ManualClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Set moves the clock to t, forwards or backwards.
func (c *ManualClock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Advance moves the clock forwards by d (backwards if d < 0).
func (c *ManualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// PartialError is a store failure confined to some of a take's buckets: the
// failure domains (Redis nodes, say) holding the buckets at the indices in
// Failed failed or have an open Breaker, and every other bucket of the take
// was left unchanged. A store that knows its failure domains returns one, so
// that the Limiter applies its failure mode to the failed tiers only (see
// FailureMode). Failed is ascending, non-empty and names fewer buckets than
// the take has; otherwise the Limiter treats the whole take as failed.
type PartialError struct {
	Failed []int // indices into Take.Buckets
	Err    error // the failure
}

// Error says how many buckets failed, and why.
func (e *PartialError) Error() string {
	return fmt.Sprintf("ratelimit: %d of the buckets failed: %v", len(e.Failed), e.Err)
}

// Unwrap returns the failure.
func (e *PartialError) Unwrap() error { return e.Err }

// Leaser is a Store that can lease tokens: take a number of them from a
// token bucket in one atomic step, for a Limiter to hand out locally, and
// take back those left unused (see Lease). The Redis stores are Leasers; a
// Limiter whose policy has a leased rule needs one (or the MemoryStore,
// which decides such a rule as any other). Implementations must be safe
// for concurrent use, and must state the same bucket in the same terms as
// Take: a leased rule and an unleased one on one bucket see each other's
// tokens.
type Leaser interface {
	// TakeLease takes tokens from bucket b, a token bucket: if it holds at
	// least need tokens, as many as it holds up to size (size >= need >=
	// 1), in one atomic step, as Take of that many would (GCRA: the
	// theoretical arrival time moves by Granted times the interval);
	// otherwise none, and the grant's State says when need could pass, as
	// a denied Take of need would. now, when not zero, is the time of the
	// decision; otherwise the store uses its own clock, as in Take. A
	// store failure is an error, and the grant is then undefined: the
	// store may have taken the tokens or not. Stores validate the
	// arguments with CheckLease first.
	TakeLease(ctx context.Context, b Bucket, need, size int64, now time.Time) (LeaseGrant, error)
	// ReturnLease gives n tokens back to bucket b, a token bucket (n >= 1):
	// the theoretical arrival time moves back by n intervals, never before
	// now, so that a bucket never holds more than its burst. It is how a
	// lease's unused tokens go back. now is as for TakeLease. On error the
	// tokens may or may not have gone back: a lost return under-admits,
	// it never over-admits.
	ReturnLease(ctx context.Context, b Bucket, n int64, now time.Time) error
}

// LeaseGrant is a store's answer to TakeLease. The zero value grants
// nothing and says nothing of the bucket.
type LeaseGrant struct {
	// Granted is the number of tokens taken: 0 (the bucket held fewer
	// than need), or between need and size.
	Granted int64
	// State is the bucket's answer, as Take of need would give it, but
	// with Remaining the whole tokens left after the grant: Allowed when
	// Granted > 0; otherwise denied, with the RetryAfter of need tokens
	// (ReasonLimited), or ReasonCostExceedsLimit when need is above the
	// burst.
	State BucketState
	// At is the time the store decided at (the explicit time, or its
	// clock).
	At time.Time
}

// CheckLease validates the arguments of TakeLease (n as need, with size)
// or ReturnLease (n, with size 0) as a Leaser must before acting, and
// returns the first problem: a bucket whose limit NewPolicy did not
// validate or that is not a token bucket (ErrInvalidRule); an invalid rule
// name or key (ErrInvalidKey); n below 1 or above MaxCost, or a size
// other than 0 below n or above MaxCost (ErrInvalidCost); an explicit time
// before the Unix epoch or after MaxTime() (ErrInvalidTime). It is safe
// for concurrent use.
func CheckLease(b *Bucket, n, size int64, now time.Time) error {
	if b.Limit == nil || b.Limit.alg != AlgTokenBucket || b.Limit.interval == 0 {
		return fmt.Errorf("%w: bucket %q has no validated token bucket limit, which leasing needs", ErrInvalidRule, b.Rule)
	}
	if !validName(b.Rule) {
		return fmt.Errorf("%w: rule name %q", ErrInvalidKey, b.Rule)
	}
	if err := CheckKey(b.Key); err != nil {
		return err
	}
	switch {
	case n < 1 || n > MaxCost:
		return fmt.Errorf("%w: lease of %d tokens: must be between 1 and 2^50", ErrInvalidCost, n)
	case size != 0 && (size < n || size > MaxCost):
		return fmt.Errorf("%w: lease size %d: must be between need (%d) and 2^50", ErrInvalidCost, size, n)
	}
	if !now.IsZero() {
		if err := checkTime(now); err != nil {
			return err
		}
	}
	return nil
}
