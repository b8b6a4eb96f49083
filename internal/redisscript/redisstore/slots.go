package redisstore

import (
	"context"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
)

// group is the buckets of one Cluster hash slot.
type group struct {
	slot int
	idx  []int
	call redisscript.Call
	b    redisscript.Builder
	eval Eval
	vals []int64  // the reply's integers; nil: no usable reply
	undo []string // from the take (ModeTakeUndo): before and written, per bucket
	at   time.Time
	// the round trip the group's state was last read in
	sent, recv time.Time
	refunded   bool
}

// takeSlots decides a take whose buckets lie in several hash slots: one
// script call per slot, all in one round trip. If a slot denies or fails
// while others consumed, those are given back in a second round trip: each
// bucket that still holds what the take wrote gets its earlier value back
// exactly, others the cost. Until then the tokens are held, so this can
// under-admit for a moment; it never over-admits.
func (s *Store) takeSlots(ctx context.Context, now string, keys []string, t *core.Take) error {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	var groups []*group
	bySlot := map[int]*group{}
	for i, k := range keys {
		slot := redisscript.Slot(k)
		g := bySlot[slot]
		if g == nil {
			g = &group{slot: slot}
			bySlot[slot] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		g.call.Buckets = append(g.call.Buckets, t.Buckets[i])
		g.call.Keys = append(g.call.Keys, k)
	}
	for _, g := range groups {
		g.call.Cost = t.Cost
		g.call.States = make([]core.BucketState, len(g.idx))
		g.b.SetMinTTL(s.minTTL)
		g.b.Reset(now, redisscript.ModeTakeUndo)
		g.b.Add(&g.call)
	}
	sent := time.Now()
	err := s.multi(ctx, groups)
	recv := time.Now()
	all := err == nil
	for _, g := range groups {
		g.sent, g.recv = sent, recv
		if g.vals == nil {
			continue
		}
		at, derr := redisscript.Decode(g.vals, []*redisscript.Call{&g.call})
		if derr != nil {
			g.vals = nil
			if err == nil {
				err = derr
			}
			all = false
			continue
		}
		g.at = at
		if now == "" && s.local != nil {
			s.local.setClock(g.slot, at, sent, recv)
		}
		all = all && g.call.Allowed()
	}
	if !all && t.Cost > 0 {
		// Give back what the allowing groups took: a denial elsewhere, or a
		// failure, means the request as a whole consumed nothing.
		var back []*group
		for _, g := range groups {
			if g.vals != nil && g.call.Allowed() {
				g.b.Reset(redisscript.NowArg(g.at), redisscript.ModeRefund)
				g.b.AddRefund(&g.call, g.undo)
				g.vals = nil
				g.refunded = true
				back = append(back, g)
			}
		}
		if len(back) > 0 {
			s.n.refunds.Add(int64(len(back)))
			rsent := time.Now()
			rerr := s.multi(ctx, back)
			rrecv := time.Now()
			for _, g := range back {
				g.sent, g.recv = rsent, rrecv
				if g.vals == nil {
					continue
				}
				if _, derr := redisscript.Decode(g.vals, []*redisscript.Call{&g.call}); derr != nil {
					g.vals = nil
					if rerr == nil {
						rerr = derr
					}
				}
			}
			if err == nil {
				err = rerr
			}
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

// multi sends every group's call in one round trip and reads the replies
// into g.vals and g.undo; a group whose node lacks the script is sent again
// in full. It returns the first error.
func (s *Store) multi(ctx context.Context, groups []*group) error {
	evals := make([]*Eval, len(groups))
	for i, g := range groups {
		g.eval = Eval{Keys: g.b.Keys, Args: g.b.Args}
		evals[i] = &g.eval
	}
	s.run(ctx, evals)
	var first error
	for _, g := range groups {
		undo := 0
		if g.b.Args[1] == redisscript.ModeTakeUndo {
			undo = len(g.call.Buckets)
		}
		if err := check(&g.eval, undo); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		g.vals, g.undo = g.eval.Ints, g.eval.Undo
	}
	return first
}

// recordSlots tells the local denial cache what a multi-slot take saw: the
// state of each group, read at the take or, for refunded groups, at the
// refund, which lowers what the take raised.
func (s *Store) recordSlots(groups []*group, t *core.Take, err error) {
	if err != nil {
		// Takes only raise values, which a stale copy cannot hide; a
		// refund whose answer is lost may have lowered them.
		for _, g := range groups {
			if g.refunded {
				s.local.forget(g.call.Keys, g.sent, g.recv)
			}
		}
		return
	}
	var seen []sighting
	for _, g := range groups {
		for k := range g.idx {
			if isBucket(g.call.Buckets[k].Limit) {
				o := observed(g.call.States[k], g.at, g.sent, g.recv)
				seen = append(seen, sighting{key: g.call.Keys[k], o: o, lowered: g.refunded})
			}
		}
	}
	s.local.recordAll(seen, t.Cost, groupStates(groups))
}

func groupStates(groups []*group) func(yield func(core.BucketState) bool) {
	return func(yield func(core.BucketState) bool) {
		for _, g := range groups {
			for _, st := range g.call.States {
				if !yield(st) {
					return
				}
			}
		}
	}
}
