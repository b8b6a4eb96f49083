package core

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Lease has each Limiter serve a hot token bucket from tokens it holds
// itself: it takes a lease of tokens from the shared bucket in one store
// call (Leaser.TakeLease), decides requests from it in memory, and gives
// back what it did not use when the lease ends (Leaser.ReturnLease). A
// global bucket then costs its store one call per lease instead of one per
// request. The zero Lease leases nothing: every request is decided in the
// store. A Lease is a plain value.
//
// NewPolicy accepts a Lease only on a token bucket (not Shaping, a window
// or a log) whose Lookup is nil: a rule with limits per identity cannot be
// leased, for now. Max must be between 1 and the burst, and TTL > 0.
//
// Bounds, for N instances each holding at most Max unused tokens:
//   - Over-admission: none beyond the bucket's. Every admitted request's
//     tokens were taken from the shared bucket by its exact math, so the
//     requests admitted over [t0, t1] by all instances together are at
//     most burst + rate*(t1-t0) plus what the leases held at t0 (at most
//     N*Max; nothing from the bucket's first lease on).
//   - Under-admission: at any moment up to N*Max tokens sit unused in
//     leases, so a request can be denied while other instances hold
//     tokens. Once a refill finds the shared bucket short, or drains it,
//     the requests the instance's lease cannot serve are denied locally,
//     without a store call, until the bucket has refilled their shortfall
//     at its rate (tokens other instances return meanwhile are seen at the
//     next refill); requests that find a refill in flight wait for it.
//   - A dead instance never returns its lease: at most Max tokens are lost
//     per dead instance, once; the bucket refills at its rate, so the loss
//     is made up after Max/rate.
//
// Decisions on a leased tier: Remaining is what this instance holds after
// the decision (not the shared bucket's balance), ResetAfter the shared
// bucket's time until full as the store last said, and a denial's
// RetryAfter the time until the shared bucket holds the shortfall. A read
// (cost 0, Inspect) reports what this instance holds, without a store call.
// A store failure in TakeLease goes through the limiter's FailureMode as a
// failed Take does. Lease lifetimes are measured on the limiter's clock:
// the explicit time of AllowAt, else the local monotonic clock; the store
// decides at its own clock as for Take.
//
// On the MemoryStore leasing is pointless (the bucket is already in the
// process): a leased rule is decided there as any other, exactly.
type Lease struct {
	// Max is the most tokens one instance holds at once: the largest lease
	// it takes (a request costing more takes its cost). The lease it takes
	// adapts to its recent rate: about the tokens it used in the last TTL,
	// between the request's cost and Max. 0: no leasing.
	Max int64
	// TTL is how long a lease lives: when it ends, its unused tokens go
	// back to the shared bucket (at the next request, or by a timer for a
	// bucket nobody asks for). It bounds how long tokens sit unused; a
	// short TTL returns them sooner at the cost of more store calls. It
	// must be > 0 when Max is set.
	TTL time.Duration
}

// check validates the lease of r, whose Limit is validated.
func (ls Lease) check(r *Rule) error {
	switch {
	case ls.Max < 0:
		return fmt.Errorf("%w: Lease.Max: must be >= 0 (0: no leasing), got %d", ErrInvalidRule, ls.Max)
	case ls.Max == 0 && ls.TTL != 0:
		return fmt.Errorf("%w: Lease.TTL: %v set without Lease.Max: a lease needs both", ErrInvalidRule, ls.TTL)
	case ls.Max == 0:
		return nil
	case ls.TTL <= 0:
		return fmt.Errorf("%w: Lease.TTL: must be > 0 when Lease.Max is set, got %v", ErrInvalidRule, ls.TTL)
	case r.Limit.alg != AlgTokenBucket:
		return fmt.Errorf("%w: Lease: only a token bucket can be leased, the limit is %v", ErrInvalidRule, r.Limit.alg)
	case ls.Max > r.Limit.burst:
		return fmt.Errorf("%w: Lease.Max: must be at most the burst (%d), got %d", ErrInvalidRule, r.Limit.burst, ls.Max)
	case r.Lookup != nil:
		return fmt.Errorf("%w: Lease: a rule with a Lookup (limits per identity) cannot be leased", ErrInvalidRule)
	}
	return nil
}

// checkLeaser refuses p when it has a leased rule and l's store can lease
// nothing (the MemoryStore decides such rules as any other).
func (l *Limiter) checkLeaser(p *Policy) error {
	if p == nil || !p.leased || l.leases != nil || l.memory != nil {
		return nil
	}
	for i := range p.rules {
		if p.rules[i].Lease.Max > 0 {
			return fmt.Errorf("%w: rule %q has a Lease, and the store (%T) is not a Leaser", ErrInvalidOption, p.rules[i].Name, l.store)
		}
	}
	return nil
}

// leaseShards is the number of locks the lease table is split under.
const leaseShards = 32

// leaseTable holds a Limiter's leases, by rule name and identity. It is
// safe for concurrent use.
type leaseTable struct {
	store  Leaser
	seed   maphash.Seed
	shards [leaseShards]leaseShard
}

type leaseShard struct {
	mu sync.RWMutex
	m  map[leaseKey]*lease
	_  [40]byte // a cache line of its own
}

type leaseKey struct{ rule, key string }

func newLeaseTable(s Leaser) *leaseTable {
	t := &leaseTable{store: s, seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].m = map[leaseKey]*lease{}
	}
	return t
}

// lease is one instance's lease of one bucket. tokens, expires, resetAt and
// limit are read without the lock on the fast path; everything else is
// guarded by mu, which is never held across a store call.
type lease struct {
	tokens  atomic.Int64          // held, unused
	expires atomic.Int64          // when the lease ends, ns on the limiter's clock; 0: no lease
	resetAt atomic.Int64          // when the shared bucket is full, as the store last said, ns
	limit   atomic.Pointer[Limit] // the limit of the last grant
	dead    atomic.Bool           // out of the table: tokens put back go to the store

	key leaseKey

	mu      sync.Mutex
	refill  *refill     // the store call in flight; nil: none
	gen     uint64      // counts timers and ends: a timer acts only on its own generation
	timer   *time.Timer // ends the lease and forgets e; nil: none pending (the refill in flight arms one)
	asked   bool        // a request was denied from e since the timer was armed
	blocked bool        // the last refill found the shared bucket short
	blockAt int64       // then a request short by s tokens waits until blockAt + s*interval
	held    int64       // tokens held right after the last grant or end
	// Tokens used per TTL, for the size of the next lease: the current
	// window, from winStart, and the one before it.
	born, winStart, cur, prev int64
}

// refill is a store call made for a lease, which the lease's other
// requests wait for.
type refill struct {
	done  chan struct{}
	err   error // the store's failure, for the waiters too
	again bool  // the caller gave up: waiters try on their own
}

// get returns the lease of bucket (rule, key), making it if needed.
func (t *leaseTable) get(rule, key string, now int64) *lease {
	k := leaseKey{rule, key}
	sh := &t.shards[maphash.Comparable(t.seed, k)%leaseShards]
	sh.mu.RLock()
	e := sh.m[k]
	sh.mu.RUnlock()
	if e != nil {
		return e
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e = sh.m[k]; e == nil {
		// Copies: a middleware's strings may alias buffers it reuses.
		k = leaseKey{strings.Clone(rule), strings.Clone(key)}
		e = &lease{key: k, born: now, winStart: now}
		sh.m[k] = e
	}
	return e
}

// peek returns the lease of bucket (rule, key), nil if none.
func (t *leaseTable) peek(rule, key string) *lease {
	k := leaseKey{rule, key}
	sh := &t.shards[maphash.Comparable(t.seed, k)%leaseShards]
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[k]
}

// remove drops e from the table.
func (t *leaseTable) remove(e *lease) {
	sh := &t.shards[maphash.Comparable(t.seed, e.key)%leaseShards]
	sh.mu.Lock()
	if sh.m[e.key] == e {
		delete(sh.m, e.key)
	}
	sh.mu.Unlock()
}

// all returns every lease in the table.
func (t *leaseTable) all() []*lease {
	var out []*lease
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.RLock()
		for _, e := range sh.m {
			out = append(out, e)
		}
		sh.mu.RUnlock()
	}
	return out
}

// clockNs returns the limiter's clock for leases: now when explicit, else
// the local clock, in Unix ns.
func clockNs(now time.Time) int64 {
	if !now.IsZero() {
		return now.UnixNano()
	}
	return time.Now().UnixNano()
}

// allowed is the state of a leased tier that took its cost, with rem
// tokens held after it.
func (e *lease) allowed(rem, t int64) BucketState {
	return BucketState{Allowed: true, Remaining: rem, ResetAfter: time.Duration(max(e.resetAt.Load()-t, 0))}
}

// read is the state of a leased tier for a read, or for a request that
// another tier denied first.
func (t *leaseTable) read(b *Bucket, now int64) BucketState {
	e := t.peek(b.Rule, b.Key)
	if e == nil {
		return BucketState{Allowed: true}
	}
	held := int64(0)
	if now < e.expires.Load() {
		held = e.tokens.Load()
	}
	return e.allowed(held, now)
}

// putBack gives n tokens that a denied request took back to e, or to the
// store when e has left the table meanwhile.
func (l *Limiter) putBack(e *lease, b *Bucket, n int64) int64 {
	h := e.tokens.Add(n)
	if e.dead.Load() {
		if back := e.tokens.Swap(0); back > 0 {
			l.returnTokens(context.Background(), *b, back, time.Time{})
		}
		return 0
	}
	return h
}

// leaseTake decides a request of cost n >= 1 on tier b of rule r from this
// limiter's lease of its bucket, refilling the lease from the store when
// it holds less than n. It returns the tier's state and, when it took n
// tokens, the lease they came from (to put them back if another tier
// denies the request).
func (l *Limiter) leaseTake(ctx context.Context, now time.Time, r *Rule, b *Bucket, n int64) (BucketState, *lease, error) {
	lim := b.Limit
	t := clockNs(now)
	if n > lim.burst {
		st := l.leases.read(b, t)
		st.Allowed, st.Reason = false, ReasonCostExceedsLimit
		return st, nil, nil
	}
	e := l.leases.get(b.Rule, b.Key, t)
	for {
		if t < e.expires.Load() && e.limit.Load() == lim {
			for h := e.tokens.Load(); h >= n; h = e.tokens.Load() {
				if e.tokens.CompareAndSwap(h, h-n) {
					return e.allowed(h-n, t), e, nil
				}
			}
		}
		st, took, again, err := l.leaseSlow(ctx, e, now, t, r, b, n)
		if !again {
			if !took {
				return st, nil, err
			}
			return st, e, err
		}
		if e.dead.Load() {
			e = l.leases.get(b.Rule, b.Key, t)
		}
		t = clockNs(now)
	}
}

// leaseSlow is leaseTake when e cannot serve n tokens at once: it waits for
// the refill in flight, ends a lease whose TTL passed (or whose limit a new
// policy changed), denies while the shared bucket is known to be short, or
// refills. again asks the caller to look at e (or its successor) again.
func (l *Limiter) leaseSlow(ctx context.Context, e *lease, now time.Time, t int64, r *Rule, b *Bucket, n int64) (st BucketState, took, again bool, err error) {
	e.mu.Lock()
	if e.dead.Load() {
		e.mu.Unlock()
		return st, false, true, nil
	}
	if rf := e.refill; rf != nil {
		e.mu.Unlock()
		select {
		case <-rf.done:
		case <-ctx.Done():
			return st, false, false, ctx.Err()
		}
		if rf.err != nil && !rf.again {
			return st, false, false, rf.err
		}
		return st, false, true, nil
	}
	lim := b.Limit
	if old := e.limit.Load(); old != lim && old != nil && *old == *lim {
		// A new policy with the same numbers: the lease goes on.
		e.limit.Store(lim)
	}
	var back, h int64
	granted := *b // b under the limit e's tokens were granted under
	if exp := e.expires.Load(); t >= exp || e.limit.Load() != lim {
		// No lease, or it ended: what it still holds goes back first,
		// under the limit it was taken under, not a new policy's.
		back = e.tokens.Swap(0)
		if old := e.limit.Load(); old != nil {
			granted.Limit = old
		}
		if exp != 0 {
			e.endLocked()
		}
		if back > 0 {
			e.blocked = false // the bucket gets tokens back
		}
	} else {
		h = e.tokens.Swap(0)
		if h >= n {
			// Put back by a denied request meanwhile.
			rem := e.tokens.Add(h - n)
			e.mu.Unlock()
			return e.allowed(rem, t), true, false, nil
		}
	}
	e.count(t, back+h, r.Lease.TTL)
	need := n - h
	if e.blocked && back == 0 {
		if until := e.blockAt + need*lim.interval; t < until {
			rem := e.tokens.Add(h)
			e.held = rem
			if e.timer == nil {
				// The lease just ended, stopping its timer.
				e.armLocked(l, r.Lease.TTL)
			} else {
				e.asked = true
			}
			e.mu.Unlock()
			return BucketState{Reason: ReasonLimited, Remaining: rem, ResetAfter: time.Duration(max(e.resetAt.Load()-t, 0)), RetryAfter: time.Duration(until - t)}, false, false, nil
		}
	}
	size := max(e.size(t, r.Lease), n) - h
	rf := &refill{done: make(chan struct{})}
	e.refill = rf
	e.mu.Unlock()

	if back > 0 {
		l.returnTokens(ctx, granted, back, now)
	}
	g, err := l.takeLease(ctx, *b, need, size, now)

	e.mu.Lock()
	t2 := t
	if now.IsZero() {
		t2 = time.Now().UnixNano()
	}
	switch {
	case err != nil:
		e.tokens.Add(h)
		rf.err, rf.again = err, gaveUp(ctx, err)
	case g.Granted >= need:
		e.cur += n // this request's use, which held does not show
		rem := e.tokens.Add(h + g.Granted - n)
		e.grantLocked(l, lim, t, t2, r.Lease.TTL, g.State.ResetAfter)
		st, took = e.allowed(rem, t2), true
		if g.Granted < size {
			// The grant drained the shared bucket, whose room is now
			// tau - ResetAfter: until it refills, requests this lease
			// cannot serve are denied here instead of waiting in turn
			// for refills that find it empty.
			e.blocked = true
			e.blockAt = t2 + int64(g.State.ResetAfter) - lim.tau
		}
	default:
		rem := e.tokens.Add(h)
		e.blocked = true
		e.blockAt = t2 + int64(g.State.RetryAfter) - need*lim.interval
		e.resetAt.Store(t2 + int64(g.State.ResetAfter))
		st = g.State
		st.Allowed, st.Remaining = false, rem
		if st.Reason == ReasonNone {
			st.Reason = ReasonLimited
		}
	}
	if e.timer == nil {
		// Denied or failed, after the lease ended or its timer fired
		// during the refill, or with no lease yet: nothing else would
		// forget e.
		e.armLocked(l, r.Lease.TTL)
	}
	e.held = e.tokens.Load()
	e.refill = nil
	close(rf.done)
	e.mu.Unlock()
	return st, took, false, err
}

// grantLocked starts a lease of e under lim at t (the limiter's clock when
// the store was asked; t2 when it answered), ending after ttl.
func (e *lease) grantLocked(l *Limiter, lim *Limit, t, t2 int64, ttl time.Duration, reset time.Duration) {
	e.limit.Store(lim)
	e.resetAt.Store(t2 + int64(reset))
	e.blocked = false
	// The lease ends ttl after the store was asked, on the limiter's
	// clock; the timer gives back the tokens of a bucket nobody asks for.
	e.expires.Store(t + int64(ttl))
	e.armLocked(l, ttl)
}

// armLocked starts e's timer, in place of any other: ttl from now it ends
// e's lease, if any, and forgets e unless a request was denied from it
// meanwhile (see expireLease). Every entry in the table has a timer
// pending or a refill in flight, whose end arms one when none is pending:
// so each is forgotten, whatever its last refill said.
func (e *lease) armLocked(l *Limiter, ttl time.Duration) {
	e.gen++
	if e.timer != nil {
		e.timer.Stop()
	}
	e.asked = false
	gen := e.gen
	e.timer = time.AfterFunc(ttl, func() { l.expireLease(e, gen, ttl) })
}

// endLocked ends e's lease, whose tokens the caller has taken.
func (e *lease) endLocked() {
	e.expires.Store(0)
	e.gen++
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
}

// count adds to e's use the tokens used since the last grant or end, for
// held tokens still held at t; windows are ttl long.
func (e *lease) count(t, held int64, ttl time.Duration) {
	used := max(e.held-held, 0)
	w := int64(ttl)
	switch d := t - e.winStart; {
	case d >= 2*w:
		e.winStart, e.prev, e.cur = t, 0, 0
	case d >= w:
		e.winStart, e.prev, e.cur = e.winStart+w, e.cur, 0
	}
	e.cur += used
}

// size returns the lease to take at t: about the tokens used in the last
// TTL (extrapolated while the lease is younger than that), between 1 and
// ls.Max.
func (e *lease) size(t int64, ls Lease) int64 {
	w := float64(ls.TTL)
	var est float64
	if age := t - e.born; float64(age) < w {
		est = float64(e.cur) * w / float64(max(age, 1))
	} else {
		f := float64(min(max(t-e.winStart, 0), int64(ls.TTL))) / w
		est = float64(e.prev)*(1-f) + float64(e.cur)
	}
	if est >= float64(ls.Max) {
		return ls.Max
	}
	return max(int64(est), 1)
}

// expireLease is the timer of e, generation gen, armed for ttl: it gives
// back what e still holds, under the limit it was granted under, and drops
// e from the table. When a request was denied from e meanwhile, e stays,
// with its lease ended, for another ttl: it remembers that the shared
// bucket is short, which spares the store a call per request. A newer
// timer, an earlier end or a refill in flight (whose end arms a timer)
// make it do nothing.
func (l *Limiter) expireLease(e *lease, gen uint64, ttl time.Duration) {
	e.mu.Lock()
	if e.gen != gen || e.dead.Load() {
		e.mu.Unlock()
		return
	}
	if e.refill != nil {
		e.timer = nil
		e.mu.Unlock()
		return
	}
	if e.asked {
		back, lim := e.tokens.Swap(0), e.limit.Load()
		e.endLocked()
		e.held = 0 // going back, not used
		if back > 0 {
			e.blocked = false // the bucket gets tokens back
		}
		e.armLocked(l, ttl)
		e.mu.Unlock()
		l.returnHeld(context.Background(), e, back, lim)
		return
	}
	back, lim := e.forgetLocked()
	e.mu.Unlock()
	l.leases.remove(e)
	l.returnHeld(context.Background(), e, back, lim)
}

// forgetLocked ends e's lease and marks e out of the table, for the caller
// to remove once it unlocks e. It returns the tokens e held and the limit
// they were granted under.
func (e *lease) forgetLocked() (int64, *Limit) {
	// Dead first: a put-back after the swap then sees it (see putBack).
	e.dead.Store(true)
	back := e.tokens.Swap(0)
	e.endLocked()
	return back, e.limit.Load()
}

// returnHeld gives back the n tokens lease e held, granted under lim, to
// the store.
func (l *Limiter) returnHeld(ctx context.Context, e *lease, n int64, lim *Limit) error {
	if n <= 0 || lim == nil {
		return nil
	}
	return l.returnTokens(ctx, Bucket{Rule: e.key.rule, Key: e.key.key, Limit: lim}, n, time.Time{})
}

// ReturnLeases gives back to the store every token this limiter holds in
// leases (see Lease), ends the leases and forgets their buckets; later
// requests take new ones.
// Call it when an instance shuts down, after it has stopped serving: the
// tokens it held are then not lost to the other instances. It returns the
// store's errors, joined, for the returns that failed (their tokens are
// lost, which under-admits), and does nothing for a limiter that leases
// nothing. It is safe for concurrent use.
func (l *Limiter) ReturnLeases(ctx context.Context) error {
	if !l.constructed() {
		return errNotConstructed()
	}
	if l.leases == nil {
		return nil
	}
	var errs []error
	for _, e := range l.leases.all() {
		e.mu.Lock()
		if e.refill != nil || e.dead.Load() {
			// Its refill's tokens are in use already.
			e.mu.Unlock()
			continue
		}
		back, lim := e.forgetLocked()
		e.mu.Unlock()
		l.leases.remove(e)
		if err := l.returnHeld(ctx, e, back, lim); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// takeLease runs the store's TakeLease under WithTimeout's bound.
func (l *Limiter) takeLease(ctx context.Context, b Bucket, need, size int64, now time.Time) (LeaseGrant, error) {
	if l.timeout <= 0 {
		return l.leases.store.TakeLease(ctx, b, need, size, now)
	}
	tctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	g, err := l.leases.store.TakeLease(tctx, b, need, size, now)
	if err != nil && !ended(ctx) && ended(tctx) {
		err = fmt.Errorf("ratelimit: store call exceeded WithTimeout(%v): %w", l.timeout, err)
	}
	return g, err
}

// returnTokens gives n tokens of b back to the store, under WithTimeout's
// bound, and logs a failure: the tokens are then lost, which under-admits.
func (l *Limiter) returnTokens(ctx context.Context, b Bucket, n int64, now time.Time) error {
	if l.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	err := l.leases.store.ReturnLease(ctx, b, n, now)
	if err != nil {
		err = fmt.Errorf("ratelimit: rule %q: returning %d leased tokens: %w", b.Rule, n, err)
		l.log.Log(ctx, slog.LevelWarn, "lease:"+ErrorKind(err), "ratelimit: leased tokens not returned",
			slog.String("rule", b.Rule), slog.Int64("tokens", n), slog.String("error", err.Error()))
	}
	return err
}

// settleLeased is settle for a request whose tiers include leased rules:
// each leased tier takes its cost from this limiter's lease, the others go
// to the store in one Take, all or nothing: when a tier denies, the
// tokens taken from leases go back to them.
func (l *Limiter) settleLeased(ctx context.Context, now time.Time, n int64, buckets []Bucket, states []BucketState, rules []*Rule, d *Decision) error {
	d.Allowed, d.Cost = true, n
	k := len(buckets)
	var (
		takenArr [maxInlineTiers]*lease
		kindArr  [maxInlineTiers]tierKind
	)
	taken, kind := takenArr[:], kindArr[:]
	if k > maxInlineTiers {
		taken, kind = make([]*lease, k), make([]tierKind, k)
	}
	giveBack := func() {
		for i, e := range taken[:k] {
			if e != nil {
				states[i].Remaining = l.putBack(e, &buckets[i], n)
				taken[i] = nil
			}
		}
	}
	t := clockNs(now)
	denied, unleased := false, 0
	var failure error
	for i := range k {
		if rules[i].Lease.Max == 0 {
			unleased++
			continue
		}
		kind[i] = tierLeased
		if n == 0 || denied {
			states[i] = l.leases.read(&buckets[i], t)
			continue
		}
		st, e, err := l.leaseTake(ctx, now, rules[i], &buckets[i], n)
		switch {
		case err != nil && gaveUp(ctx, err):
			giveBack()
			*d = Decision{}
			return err
		case err != nil:
			kind[i], failure = tierFailed, err
			continue
		}
		states[i], taken[i] = st, e
		denied = denied || !st.Allowed
	}
	if failure != nil {
		switch l.failure {
		case FailClosed:
			giveBack()
			return failClosed(n, failure, d)
		case FailFallback:
			// The private memory store decides the failed tiers.
			var fb []Bucket
			for i := range k {
				if kind[i] == tierFailed {
					fb = append(fb, buckets[i])
				}
			}
			fs := make([]BucketState, len(fb))
			cost := n
			if denied {
				cost = 0
			}
			ft := Take{Now: now, Cost: cost, Buckets: fb, States: fs}
			l.fallback.take(&ft)
			for i, j := 0, 0; i < k; i++ {
				if kind[i] == tierFailed {
					states[i], kind[i] = fs[j], tierLeased
					denied = denied || !fs[j].Allowed
					j++
				}
			}
		}
	}
	var sub Decision
	if unleased > 0 {
		var (
			bucketArr [maxInlineTiers]Bucket
			stateArr  [maxInlineTiers]BucketState
			ruleArr   [maxInlineTiers]*Rule
		)
		ub, us, ur := bucketArr[:0], stateArr[:0], ruleArr[:0]
		for i := range k {
			if kind[i] == tierUnleased {
				ub, us, ur = append(ub, buckets[i]), append(us, BucketState{}), append(ur, rules[i])
			}
		}
		cost := n
		if denied {
			cost = 0 // reads the other tiers' balances
		}
		switch err := l.settle(ctx, now, cost, ub, us, ur, &sub); {
		case err != nil && gaveUp(ctx, err):
			giveBack()
			*d = Decision{}
			return err
		case err != nil && !denied:
			// FailClosed decided.
			giveBack()
			*d = sub
			return err
		case err != nil:
			// A leased tier denied already: the failed read decides nothing.
			sub = Decision{Allowed: true, Degraded: true, Err: sub.Err}
		}
		// Back in policy order; a tier the failure mode decided without
		// the store (FailOpen) is not in sub, as settle leaves it out.
		for i := range k {
			if kind[i] != tierUnleased {
				continue
			}
			kind[i] = tierHidden
			for j := range sub.NumTiers() {
				if tr := sub.TierAt(j); tr.Rule == rules[i] {
					states[i], kind[i] = tr.BucketState, tierUnleased
					break
				}
			}
		}
		denied = denied || !sub.Allowed
	}
	if denied {
		giveBack()
	}
	// Tiers that failed open are left out of the decision, as settle
	// leaves them out.
	shown := k
	for i := range k {
		if kind[i] == tierFailed || kind[i] == tierHidden {
			shown--
		}
	}
	if shown < k {
		var sb []Bucket
		var ss []BucketState
		var sr []*Rule
		for i := range k {
			if kind[i] != tierFailed && kind[i] != tierHidden {
				sb, ss, sr = append(sb, buckets[i]), append(ss, states[i]), append(sr, rules[i])
			}
		}
		buckets, states, rules = sb, ss, sr
	}
	if len(states) > 0 {
		d.fill(states, rules, buckets, l.shadow)
	}
	d.Allowed = d.Allowed && !denied
	d.At = sub.At
	if d.At.IsZero() {
		d.At = time.Unix(0, t)
	}
	switch {
	case failure != nil:
		d.Degraded, d.Err = true, failure
	case sub.Degraded:
		d.Degraded, d.Err = true, sub.Err
	}
	return nil
}

// tierKind is how settleLeased decides a tier.
type tierKind uint8

const (
	tierUnleased tierKind = iota // by the store, in one Take
	tierLeased                   // from this limiter's lease
	tierFailed                   // leased, and the store failed; FailOpen
	tierHidden                   // by the store, which failed; FailOpen left it out
)
