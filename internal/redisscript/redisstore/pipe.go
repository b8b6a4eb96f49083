package redisstore

import (
	"context"
	"sync"
	"time"
)

// Pipelines is implemented by a Client that merges concurrent calls to one
// node into one round trip by itself (rueidis pipelines automatically). A
// Store on any other Cluster client merges them with a pipe per node.
type Pipelines interface {
	// AutoPipelines reports whether concurrent calls share round trips.
	AutoPipelines() bool
}

// pipe merges the script calls bound for one Cluster node: the batches of
// its many slots, each a call of its own. Like a Batcher it never waits on a
// timer: an idle pipe sends a call at once; calls that arrive while a round
// trip is in flight go out together, pipelined, in the next. It is safe for
// concurrent use.
type pipe struct {
	mu    sync.Mutex
	busy  bool
	queue []*piped
}

// piped is a call waiting in a pipe.
type piped struct {
	ctx   context.Context
	e     *Eval
	done  chan struct{}
	next  []*piped // set for the waiter that must send the next round trip
	taken bool     // in a round trip: the waiter must wait for its answer
}

// do sends e through the pipe with s.run and returns once its reply fields
// are set. A queued call waits for the round trip in flight, then goes out
// in the next; if its ctx ends while it is still queued, it is not sent
// and fails with ctx's error. A round trip is bounded by the earliest
// deadline of its calls, so no call waits past its own.
func (p *pipe) do(s *Store, ctx context.Context, e *Eval) {
	me := &piped{ctx: ctx, e: e, done: make(chan struct{}, 1)}
	p.mu.Lock()
	if !p.busy {
		p.busy = true
		p.mu.Unlock()
		p.flush(s, []*piped{me})
		return
	}
	p.queue = append(p.queue, me)
	p.mu.Unlock()
	select {
	case <-me.done:
	case <-ctx.Done():
		p.mu.Lock()
		if !me.taken {
			for i, q := range p.queue {
				if q == me {
					p.queue = append(p.queue[:i], p.queue[i+1:]...)
					break
				}
			}
			p.mu.Unlock()
			e.Reply, e.Undo, e.NoScript, e.Err = "", nil, false, ctx.Err()
			return
		}
		p.mu.Unlock()
		<-me.done
	}
	if me.next != nil {
		p.flush(s, me.next)
	}
}

// flush sends batch in one pipelined round trip, hands the pipe to the
// first of the calls queued meanwhile, then wakes the batch. batch[0] is the
// caller.
func (p *pipe) flush(s *Store, batch []*piped) {
	evals := make([]*Eval, len(batch))
	var deadline time.Time
	for i, q := range batch {
		evals[i] = q.e
		if dl, ok := q.ctx.Deadline(); ok && (deadline.IsZero() || dl.Before(deadline)) {
			deadline = dl
		}
	}
	ctx := context.WithoutCancel(batch[0].ctx)
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	s.run(ctx, evals)
	p.mu.Lock()
	if len(p.queue) == 0 {
		p.busy = false
	} else {
		next := p.queue
		p.queue = nil
		for _, q := range next {
			q.taken = true
		}
		next[0].next = next
		next[0].done <- struct{}{}
	}
	p.mu.Unlock()
	for _, q := range batch[1:] {
		q.done <- struct{}{}
	}
}
