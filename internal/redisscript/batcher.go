package redisscript

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// Sender runs one script call (EVALSHA, reloading on NOSCRIPT) with keys
// and args, and returns the reply's binary string (see Decode) and, for a
// call in ModeTakeUndo on undo buckets in all, its undo strings (undo 0: a
// call without them): two per record of the reply, at most two per bucket,
// fewer when the script answered runs at once (Builder.DecodeUndo checks
// them).
type Sender func(ctx context.Context, keys []string, args []any, undo int) (string, []string, error)

// Batcher sends the requests for one hash slot so that requests arriving
// while a call is in flight go out together, as one script call, in arrival
// order (identical requests together, at the first's place: see
// Builder.Add). It never waits on a timer: an idle Batcher sends at once, so at low
// load a decision costs one round trip, as without batching; under load each
// round trip carries every request that queued during the previous one,
// and those that the previous one's callers queue as soon as they are
// answered (see rejoin).
// A Batcher is safe for concurrent use.
type Batcher struct {
	send    Sender
	max     int           // most requests per call
	timeout time.Duration // bounds each call when > 0
	minTTL  time.Duration // see Builder.SetMinTTL
	yield   func()        // runtime.Gosched; see rejoin

	mu    sync.Mutex
	busy  bool // a call is in flight
	queue []*pending

	// Used by the member that sends a call, until it releases the batcher.
	bld   Builder
	calls []*Call
}

type pending struct {
	ctx      context.Context
	deadline time.Time // the end of its timeout; zero without one
	now      int64     // see NowArg
	call     *Call
	undo     bool // wants the call's undo values: ModeTakeUndo
	done     chan struct{}
	batch    []*pending // set for the waiter that must send the next call
	taken    bool       // in a call: the waiter must wait for its result
	at       time.Time
	vals     []string // the undo values, when undo
	err      error
}

// NewBatcher returns a Batcher that sends through send at most max requests
// per call, each call bounded by timeout when it is > 0, writing keys that
// live at least minTTL (see Builder.SetMinTTL).
func NewBatcher(send Sender, max int, timeout, minTTL time.Duration) *Batcher {
	return &Batcher{send: send, max: max, timeout: timeout, minTTL: minTTL, yield: runtime.Gosched}
}

// Do decides c at time now (NowArg; ServerClock for the server's) in a
// script call, with other requests or alone, fills c.States and returns
// the time the script used. If ctx ends while c is still queued, Do
// returns ctx's error and c is not sent; once c is in a call, Do waits for
// its answer.
func (b *Batcher) Do(ctx context.Context, now int64, c *Call) (time.Time, error) {
	t, lead := b.Start(ctx, now, c, false)
	if lead {
		b.run([]*pending{t.p}, true)
		return t.p.at, t.p.err
	}
	at, _, err := t.Wait()
	return at, err
}

// Ticket is a request queued by Start.
type Ticket struct {
	b *Batcher
	p *pending
}

// Start queues c (see Do), with undo when it must be given back later
// (ModeTakeUndo: Wait then returns its two undo strings per bucket), and
// returns its ticket, to Wait on. When the batcher is idle, Start claims it
// instead and reports lead: the caller then sends c by itself (alone or
// pipelined with other calls) and must call Release once it has the reply,
// so that requests queued meanwhile go out.
func (b *Batcher) Start(ctx context.Context, now int64, c *Call, undo bool) (t Ticket, lead bool) {
	// The Call holds its place in the queue: queueing allocates nothing
	// once the Call has been used.
	p := &c.p
	done := p.done
	if done == nil {
		done = make(chan struct{}, 1)
	}
	*p = pending{ctx: ctx, now: now, call: c, undo: undo, done: done}
	if b.timeout > 0 {
		p.deadline = time.Now().Add(b.timeout)
	}
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		return Ticket{b, p}, true
	}
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	return Ticket{b, p}, false
}

// Release hands a batcher claimed by Start on to the requests queued
// meanwhile, or makes it idle.
//
// The next call is sent by its first member's goroutine, waiting in Wait,
// unless that member asked for undo values: such a member is one slot of a
// take over several slots, whose caller waits on its tickets one after
// another, so it may be waiting on another batcher, itself handed to a
// caller waiting on this one. Leading from there would tie the batchers of
// different slots into a cycle that only timeouts break; that call is sent
// from a goroutine of its own instead.
func (b *Batcher) Release() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.busy = false
	} else {
		next := b.take()
		if next[0].undo {
			go b.run(next, false)
		} else {
			next[0].batch = next
			next[0].done <- struct{}{}
		}
	}
	b.mu.Unlock()
}

// Wait waits for the answer to a request queued by Start: the time the
// script used, its undo strings if it asked for them, and the error. If its
// ctx ends while it is still queued, it is not sent and Wait returns ctx's
// error; once in a call, Wait waits for the answer.
func (t Ticket) Wait() (time.Time, []string, error) {
	b, p := t.b, t.p
	select {
	case <-p.done:
	case <-p.ctx.Done():
		b.mu.Lock()
		if !p.taken {
			for i, q := range b.queue {
				if q == p {
					b.queue = append(b.queue[:i], b.queue[i+1:]...)
					break
				}
			}
			b.mu.Unlock()
			return time.Time{}, nil, p.ctx.Err()
		}
		b.mu.Unlock()
		<-p.done
	}
	if batch := p.batch; batch != nil {
		// This waiter leads the next call.
		p.batch = nil
		b.run(batch, true)
	}
	return p.at, p.vals, p.err
}

// run sends batch as one call, answers every member, lets them queue again
// (rejoin), then hands the next call, if any queued, on (Release). With
// lead, batch[0] is the caller, which reads its answer when run returns,
// and the others are signalled; without, every member is signalled. With
// a timeout, the call is bounded by its members' earliest deadline, so
// that no member waits longer than its timeout from when it arrived,
// queueing included: a member whose deadline passed while it was queued
// is answered with a timeout and not sent.
func (b *Batcher) run(batch []*pending, lead bool) {
	var leader *pending
	if lead {
		leader = batch[0]
	}
	answer := func(p *pending, at time.Time, vals []string, err error) {
		p.at, p.vals, p.err = at, vals, err
		if p != leader {
			p.done <- struct{}{}
		}
	}
	// Members whose caller gave up are not sent; those whose own timeout
	// ran out while queued are answered with a timeout.
	now := time.Now()
	live := batch[:0] // batch is this call's alone: filtered in place
	var deadline time.Time
	for _, p := range batch {
		switch {
		case p.ctx.Err() != nil:
			answer(p, time.Time{}, nil, p.ctx.Err())
			continue
		case b.timeout > 0 && !now.Before(p.deadline):
			answer(p, time.Time{}, nil, fmt.Errorf("ratelimit: redis: no answer within %v: %w", b.timeout, context.DeadlineExceeded))
			continue
		}
		if b.timeout > 0 && (deadline.IsZero() || p.deadline.Before(deadline)) {
			deadline = p.deadline
		}
		live = append(live, p)
	}
	// Nobody waits past the last of the callers' deadlines either.
	if dl, ok := latestDeadline(live); ok && len(live) > 0 && (deadline.IsZero() || dl.Before(deadline)) {
		deadline = dl
	}
	var (
		at   time.Time
		err  error
		vals [][]string // per member, its undo values, in ModeTakeUndo
	)
	if len(live) > 0 {
		mode, buckets := ModeTake, 0
		for _, p := range live {
			buckets += len(p.call.Buckets)
			if p.undo {
				mode = ModeTakeUndo
			}
		}
		if mode == ModeTake {
			buckets = 0
		}
		// b.bld and b.calls are this member's until it releases the
		// batcher below.
		bld := &b.bld
		bld.SetMinTTL(b.minTTL)
		bld.Reset(live[0].now, mode)
		calls := b.calls[:0]
		for _, p := range live {
			bld.Add(p.call)
			calls = append(calls, p.call)
		}
		ctx := context.WithoutCancel(live[0].ctx) // the others wait on this call too
		if !deadline.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		var (
			reply string
			undo  []string
		)
		reply, undo, err = b.send(ctx, bld.Keys, bld.Args(), buckets)
		switch {
		case err != nil:
		case mode == ModeTakeUndo:
			vals = make([][]string, len(calls))
			at, err = bld.DecodeUndo(reply, undo, calls, vals)
		default:
			at, err = bld.Decode(reply, calls)
		}
		clear(calls)
		b.calls = calls[:0]
	}
	for i, p := range live {
		var mine []string
		if err == nil && p.undo {
			mine = vals[i]
		}
		answer(p, at, mine, err)
	}
	b.rejoin(len(live))
	b.Release()
}

// maxRejoinYields bounds the yields of rejoin.
const maxRejoinYields = 4

// rejoin lets the n members of the call just answered queue their next
// requests before the next call leaves, so that they go in it. Handing
// over at once instead sends only what queued during the call (under
// steady load, the few callers that missed it), and the members answered
// then queue during that small call: the callers split into two groups
// whose calls alternate, one large and one small (at 64 goroutines on a
// hot key, calls of about 62 and 2 requests in turn), and Redis runs
// twice the calls, a call's fixed cost paid twice (on a hot key, whose
// identical requests the script decides as one run, nearly all of it).
// It waits on no timer: it yields the processor while the queue grows
// and holds fewer requests than were answered, at most maxRejoinYields
// times, and not at all after a call of one (an idle limiter's request).
// With nobody queueing, it yields once. The sender's own next request
// cannot rejoin (it is this goroutine): it queues for a later call. It
// leaves fewer calls, not one per round: commands per decision at 64
// goroutines on a hot key went from about 0.032 to 0.022, where one call
// for all 64 would be 0.016.
func (b *Batcher) rejoin(n int) {
	for i, seen := 0, -1; n > 1 && i < maxRejoinYields; i++ {
		b.mu.Lock()
		queued := len(b.queue)
		b.mu.Unlock()
		if queued >= n || queued == seen {
			return
		}
		seen = queued
		b.yield()
	}
}

// take removes the next call's members from the queue: the first waiter
// and those after it with the same time, up to max. The caller
// holds b.mu.
func (b *Batcher) take() []*pending {
	first := b.queue[0]
	next := make([]*pending, 1, max(1, min(len(b.queue), b.max)))
	next[0] = first
	rest := b.queue[:0]
	for _, q := range b.queue[1:] {
		if len(next) < b.max && q.now == first.now {
			next = append(next, q)
		} else {
			rest = append(rest, q)
		}
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	for _, q := range next {
		q.taken = true
	}
	return next
}

// latestDeadline returns the latest deadline of the members, if every one
// has one: no member waits longer than it agreed to, and none is cut short
// by another's shorter deadline.
func latestDeadline(batch []*pending) (time.Time, bool) {
	var latest time.Time
	for _, p := range batch {
		dl, ok := p.ctx.Deadline()
		if !ok {
			return time.Time{}, false
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	return latest, true
}
