package redisscript

import (
	"context"
	"sync"
	"time"
)

// Sender runs one script call (EVALSHA, reloading on NOSCRIPT) with keys
// and args, and returns the reply's integers.
type Sender func(ctx context.Context, keys []string, args []any) ([]int64, error)

// Batcher sends the requests for one hash slot so that requests arriving
// while a call is in flight go out together, as one script call, in arrival
// order. It never waits on a timer: an idle Batcher sends at once, so at low
// load a decision costs one round trip, as without batching; under load each
// round trip carries every request that queued during the previous one.
// A Batcher is safe for concurrent use.
type Batcher struct {
	send    Sender
	max     int           // most requests per call
	timeout time.Duration // bounds each call when > 0
	minTTL  time.Duration // see Builder.SetMinTTL

	mu    sync.Mutex
	busy  bool // a call is in flight
	queue []*pending
}

type pending struct {
	ctx   context.Context
	now   string
	call  *Call
	done  chan struct{}
	batch []*pending // set for the waiter that must send the next call
	taken bool       // in a call: the waiter must wait for its result
	at    time.Time
	err   error
}

// NewBatcher returns a Batcher that sends through send at most max requests
// per call, each call bounded by timeout when it is > 0, writing keys that
// live at least minTTL (see Builder.SetMinTTL).
func NewBatcher(send Sender, max int, timeout, minTTL time.Duration) *Batcher {
	return &Batcher{send: send, max: max, timeout: timeout, minTTL: minTTL}
}

// Do decides c at time now (NowArg; "" for the server's clock) in a script
// call, with other requests or alone, fills c.States and returns the time
// the script used. If ctx ends while c is still queued, Do returns ctx's
// error and c is not sent; once c is in a call, Do waits for its answer.
func (b *Batcher) Do(ctx context.Context, now string, c *Call) (time.Time, error) {
	// Not pooled: a round trip costs far more than this allocation.
	p := &pending{ctx: ctx, now: now, call: c, done: make(chan struct{}, 1)}
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		b.run([]*pending{p})
		return p.at, p.err
	}
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	select {
	case <-p.done:
	case <-ctx.Done():
		b.mu.Lock()
		if !p.taken {
			for i, q := range b.queue {
				if q == p {
					b.queue = append(b.queue[:i], b.queue[i+1:]...)
					break
				}
			}
			b.mu.Unlock()
			return time.Time{}, ctx.Err()
		}
		b.mu.Unlock()
		<-p.done
	}
	if p.batch != nil {
		// This waiter leads the next call.
		b.run(p.batch)
	}
	return p.at, p.err
}

// run sends batch as one call, answers every member, then hands the next
// call, if any queued, to its first waiter.
func (b *Batcher) run(batch []*pending) {
	var bld Builder
	bld.SetMinTTL(b.minTTL)
	bld.Reset(batch[0].now, ModeTake)
	calls := make([]*Call, len(batch))
	for i, p := range batch {
		bld.Add(p.call)
		calls[i] = p.call
	}
	ctx := context.WithoutCancel(batch[0].ctx) // the others wait on this call too
	if b.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.timeout)
		defer cancel()
	} else if dl, ok := latestDeadline(batch); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	vals, err := b.send(ctx, bld.Keys, bld.Args)
	var at time.Time
	if err == nil {
		at, err = Decode(vals, calls)
	}
	// Hand over before answering, so the next call leaves as soon as
	// possible.
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.busy = false
	} else {
		next := b.take()
		next[0].batch = next
		next[0].done <- struct{}{}
	}
	b.mu.Unlock()
	for i, p := range batch {
		p.at, p.err = at, err
		if i > 0 {
			p.done <- struct{}{}
		}
	}
}

// take removes the next call's members from the queue: the first waiter
// and those after it with the same time argument, up to max. The caller
// holds b.mu.
func (b *Batcher) take() []*pending {
	first := b.queue[0]
	next := []*pending{first}
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
