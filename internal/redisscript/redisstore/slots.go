package redisstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
)

// group is the buckets of one Cluster hash slot.
type group struct {
	slot  int
	dm    *domain // its node
	idx   []int
	call  redisscript.Call
	b     redisscript.Builder
	eval  Eval
	reply string   // the reply's binary string, in multi; "": no usable reply
	undo  []string // from the take (ModeTakeUndo): before and written, per bucket
	at    time.Time
	err   error // the take's failure, if it failed
	tk    redisscript.Ticket
	// the round trip the group's state was last read in
	sent, recv time.Time
	refunded   bool
}

// slotTake is what takeSlots works with, pooled: its groups keep their
// slices, builders and channels from one take to the next, so that a take
// over several slots allocates little beyond its calls' arguments. Nothing
// refers to a group once takeSlots returns: every call it queued has been
// answered or withdrawn, and calls still running after a failure run on
// copies (see Store.eval).
type slotTake struct {
	groups []*group    // the take's, in order of their first bucket
	made   []*group    // every group made so far, groups first
	admits []admission // the nodes whose breaker admitted the take
}

// admission is a node whose breaker admitted a take, and whether as its
// probe.
type admission struct {
	dm    *domain
	probe bool
}

var slotTakes = sync.Pool{New: func() any { return new(slotTake) }}

// group returns the take's group of slot, starting it if new. A take has
// few slots (one per tier at most): a scan finds them.
func (st *slotTake) group(slot int) *group {
	for _, g := range st.groups {
		if g.slot == slot {
			return g
		}
	}
	var g *group
	if n := len(st.groups); n < len(st.made) {
		g = st.made[n]
	} else {
		g = new(group)
		st.made = append(st.made, g)
	}
	g.reset(slot)
	st.groups = append(st.groups, g)
	return g
}

// admitted reports whether dm's breaker has admitted the take already.
func (st *slotTake) admitted(dm *domain) bool {
	for _, a := range st.admits {
		if a.dm == dm {
			return true
		}
	}
	return false
}

// release returns st to the pool, keeping nothing of the take alive.
func (st *slotTake) release() {
	for _, g := range st.groups {
		g.reset(0)
	}
	clear(st.admits)
	st.groups, st.admits = st.groups[:0], st.admits[:0]
	slotTakes.Put(st)
}

// reset makes g the empty group of slot, keeping its slices' room, its
// builder's buffers and its call's channel.
//
// Field by field: the call and the builder stay where they are, not copied
// out and back as a whole.
func (g *group) reset(slot int) {
	clear(g.call.Buckets) // the limits and strings they point to
	clear(g.call.Keys)
	buckets, keys, states := g.call.Buckets[:0], g.call.Keys[:0], g.call.States[:0]
	g.call.Reset()
	g.call.Buckets, g.call.Keys, g.call.States = buckets, keys, states
	g.b.Reset(redisscript.ServerClock, "")
	g.slot, g.dm, g.idx = slot, nil, g.idx[:0]
	g.eval, g.reply, g.undo, g.at, g.err = Eval{}, "", nil, time.Time{}, nil
	g.tk, g.sent, g.recv, g.refunded = redisscript.Ticket{}, time.Time{}, time.Time{}, false
}

// takeSlots decides a take whose buckets lie in several hash slots, slots[i]
// holding keys[i]: one script call per slot, all in one round trip. If a
// slot denies or fails while others consumed, those are given back in a
// second round trip: each bucket that still holds what the take wrote gets
// its earlier value back exactly, others the cost. Until then the tokens
// are held, so this can under-admit for a moment; it never over-admits.
func (s *Store) takeSlots(caller context.Context, now int64, keys []string, slots []int, t *core.Take) error {
	st := slotTakes.Get().(*slotTake)
	defer st.release()
	for i, k := range keys {
		g := st.group(slots[i])
		g.idx = append(g.idx, i)
		g.call.Buckets = append(g.call.Buckets, t.Buckets[i])
		g.call.Keys = append(g.call.Keys, k)
	}
	groups := st.groups
	// Each node's breaker first: the buckets of nodes it refuses are not
	// sent, nor the others, which the limiter may then decide alone.
	var (
		refused []int
		open    error
	)
	for _, g := range groups {
		g.dm = s.domains.of(g.slot)
		if st.admitted(g.dm) {
			continue
		}
		probe, o := g.dm.br.Admit()
		if o != nil {
			open = o
			refused = append(refused, g.idx...)
			continue
		}
		st.admits = append(st.admits, admission{g.dm, probe})
	}
	if open != nil {
		s.n.refused.Add(1)
		for _, a := range st.admits {
			if a.probe {
				a.dm.br.Abandon()
			}
		}
		if len(refused) == len(keys) {
			return open
		}
		slices.Sort(refused)
		return &core.PartialError{Failed: refused, Err: open}
	}
	for _, g := range groups {
		g.call.Cost = t.Cost
		g.call.States = slices.Grow(g.call.States[:0], len(g.idx))[:len(g.idx)]
		clear(g.call.States)
	}
	sent := time.Now()
	err := s.sendGroups(caller, now, sent.Add(s.timeout), groups)
	recv := time.Now()
	s.settleGroups(caller, groups, st.admits)
	all := err == nil
	for _, g := range groups {
		g.sent, g.recv = sent, recv
		if g.err != nil {
			all = false
			continue
		}
		if now == redisscript.ServerClock && s.local != nil {
			s.local.setClock(g.slot, g.at, sent, recv)
		}
		all = all && g.call.Allowed()
	}
	if !all && t.Cost > 0 {
		// Give back what the allowing groups took: a denial elsewhere, or a
		// failure, means the request as a whole consumed nothing.
		var back []*group
		for _, g := range groups {
			if g.err == nil && g.call.Allowed() {
				g.b.Reset(redisscript.NowArg(g.at), redisscript.ModeRefund)
				g.b.AddRefund(&g.call, g.undo)
				g.reply = ""
				g.refunded = true
				back = append(back, g)
			}
		}
		if len(back) > 0 {
			s.n.refunds.Add(int64(len(back)))
			// A bound of its own, whatever the caller's context says: the
			// take's may be spent by a node that did not answer, and the
			// caller may have gone (its deadline made a node's answer
			// late, or it was cancelled), but the tokens must go back.
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(caller), s.timeout)
			defer rcancel()
			rsent := time.Now()
			rerr := s.multi(rctx, back)
			rrecv := time.Now()
			for _, g := range back {
				g.sent, g.recv = rsent, rrecv
				if g.reply == "" {
					continue
				}
				if _, derr := redisscript.Decode(g.reply, []*redisscript.Call{&g.call}); derr != nil {
					g.reply = ""
					if rerr == nil {
						rerr = derr
					}
				}
			}
			if err == nil {
				err = rerr
			} else if rerr == nil && !callerEnded(caller) {
				err = partial(groups, len(keys), err)
			}
		} else if err != nil && !callerEnded(caller) {
			err = partial(groups, len(keys), err)
		}
	}
	if s.local != nil {
		s.recordSlots(groups, t, err)
	}
	if err != nil {
		return err
	}
	for _, g := range groups {
		for k, i := range g.idx {
			t.States[i] = g.call.States[k]
		}
		if g.at.After(t.At) {
			t.At = g.at
		}
	}
	return nil
}

// sendGroups takes every group's call (ModeTakeUndo) and sets its States,
// at, undo and err. With batching, each group joins its slot's batch: the
// groups whose batcher was idle go out together in one pipelined round
// trip, the others with the requests queued on theirs. It returns the first
// error.
//
// Every call is bounded by the store's timeout, which ends at deadline: the
// groups sent here by a context that ends then, made only when some are;
// the queued ones by their batchers, which answer a request whose timeout
// ran out while it waited without sending it, and bound each call by its
// members' earliest deadline. A take whose groups all queue (the common
// case under load) so costs no context and no timer of its own.
func (s *Store) sendGroups(ctx context.Context, now int64, deadline time.Time, groups []*group) error {
	var leadArr, queuedArr [4]*group
	lead, queued := leadArr[:0], queuedArr[:0]
	for _, g := range groups {
		if s.batchers == nil {
			lead = append(lead, g)
			continue
		}
		var ok bool
		if g.tk, ok = s.batchers.For(g.slot).Start(ctx, now, &g.call, true); ok {
			lead = append(lead, g)
		} else {
			queued = append(queued, g)
		}
	}
	var first error
	if len(lead) > 0 {
		for _, g := range lead {
			g.b.SetMinTTL(s.minTTL)
			g.b.Reset(now, redisscript.ModeTakeUndo)
			g.b.Add(&g.call)
		}
		// As a batcher bounds its calls: by the store's timeout and the
		// caller's deadline, but not ended by a cancellation, after which a
		// script that ran would not be known, nor given back if another
		// slot failed.
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		lctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		first = s.multi(lctx, lead)
		cancel()
		for _, g := range lead {
			if s.batchers != nil {
				s.batchers.For(g.slot).Release()
			}
			if g.reply == "" {
				g.err = first
				if g.eval.Err != nil {
					g.err = g.eval.Err
				}
				continue
			}
			var vals [1][]string
			g.at, g.err = g.b.DecodeUndo(g.reply, g.undo, []*redisscript.Call{&g.call}, vals[:])
			if g.undo = vals[0]; g.err != nil && first == nil {
				first = g.err
			}
		}
	}
	for _, g := range queued {
		if g.at, g.undo, g.err = g.tk.Wait(); g.err != nil && first == nil {
			first = g.err
		}
	}
	return first
}

// settleGroups tells each node's breaker how its groups' calls went: a
// failure if any failed. Nothing when the caller gave up.
func (s *Store) settleGroups(ctx context.Context, groups []*group, admitted []admission) {
	for _, a := range admitted {
		var failed error // the first failure of a call to the node
		for _, g := range groups {
			if g.dm == a.dm && g.err != nil {
				failed = g.err
				break
			}
		}
		s.settle(ctx, a.dm, a.probe, true, failed)
	}
}

// partial returns err as a core.PartialError naming the buckets of the
// groups whose call failed, when some groups' calls succeeded (and were
// given back): the limiter may then decide those alone. Otherwise err.
func partial(groups []*group, n int, err error) error {
	var failed []int
	for _, g := range groups {
		if g.err != nil {
			failed = append(failed, g.idx...)
		}
	}
	if len(failed) == 0 || len(failed) == n {
		return err
	}
	slices.Sort(failed)
	return &core.PartialError{Failed: failed, Err: err}
}

// multi sends every group's call in one round trip and reads the replies
// into g.reply and g.undo; a group whose node lacks the script is sent again
// in full. It returns the first error.
func (s *Store) multi(ctx context.Context, groups []*group) error {
	evals := make([]*Eval, len(groups))
	for i, g := range groups {
		g.eval = Eval{Keys: g.b.Keys, Args: g.b.Args()}
		evals[i] = &g.eval
	}
	s.run(ctx, evals)
	var first error
	for _, g := range groups {
		undo := 0
		if g.b.Mode() == redisscript.ModeTakeUndo {
			undo = len(g.call.Buckets)
		}
		if err := check(&g.eval, undo); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		g.reply, g.undo = g.eval.Reply, g.eval.Undo
	}
	return first
}

// recordSlots tells the local denial cache what a multi-slot take saw: the
// state of each group, read at the take or, for refunded groups, at the
// refund, which lowers what the take raised.
func (s *Store) recordSlots(groups []*group, t *core.Take, err error) {
	if err != nil {
		// Takes under an unchanged limit only raise values, which a
		// stale copy cannot hide (a copy of another limit is never
		// decided locally); a refund whose answer is lost may have
		// lowered them.
		for _, g := range groups {
			if g.refunded {
				s.local.forget(g.call.Keys, g.sent, g.recv)
			}
		}
		return
	}
	// On the stack for the tiers of a common policy, as record's.
	var (
		seenArr   [4]sighting
		statesArr [4]core.BucketState
	)
	seen, states := seenArr[:0], statesArr[:0]
	for _, g := range groups {
		for k := range g.idx {
			if isBucket(g.call.Buckets[k].Limit) {
				o := observed(g.call.States[k], g.call.Buckets[k].Limit.Resolution(), g.at, g.sent, g.recv)
				seen = append(seen, sighting{key: g.call.Keys[k], o: o, lowered: g.refunded})
			}
		}
		states = append(states, g.call.States...)
	}
	s.local.recordAll(seen, t.Cost, states)
}
