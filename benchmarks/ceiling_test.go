package benchmarks

import (
	"context"
	"errors"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memoryCeiling is a reference point of the memory scenarios with one
// subject (see memoryCeilings): not a peer, never a verdict's yardstick,
// but what the machine allows, measured in the same run as the rest.
type memoryCeiling struct {
	name  string
	build func(tb testing.TB, q quota, s *subject, tiers int, deny bool) impl
}

// memoryCeilings are the memory scenarios' ceilings, run where a scenario
// has one subject.
var memoryCeilings = []memoryCeiling{
	{name: "ceiling_clock", build: func(_ testing.TB, _ quota, _ *subject, _ int, deny bool) impl {
		return &ceilingClock{mono0: time.Now(), answer: !deny}
	}},
	{name: "ceiling_gcra", build: newCeilingGCRA},
}

// ceilingBuilders returns the ceilings of sc, whose subjects are subs, as
// builders of one key.
func ceilingBuilders(sc scenario, subs []subject) []builder {
	if len(subs) != 1 {
		return nil
	}
	var out []builder
	for _, c := range memoryCeilings {
		out = append(out, builder{name: c.name, oneKey: true, build: func(tb testing.TB, q quota, tiers, _ int) impl {
			return c.build(tb, q, &subs[0], tiers, sc.deny)
		}})
	}
	return out
}

// ceilingClock reads the monotonic clock once per decision, as our memory
// store does, and answers what the scenario expects: it decides nothing.
// It is what any limiter that reads a clock per decision pays at least.
type ceilingClock struct {
	mono0  time.Time
	answer bool
	sink   atomic.Int64
}

func (c *ceilingClock) allow(context.Context, *subject) (bool, error) {
	if time.Since(c.mono0) < 0 {
		// Never true: the reading is used, so that it is not optimized
		// away, without a store per decision.
		c.sink.Add(1)
	}
	return c.answer, nil
}

// ceilingGCRA is the least an exact decision costs here: per tier one slot
// of a table found by hashing the key, holding the bucket's theoretical
// arrival time (GCRA) in one integer, and per decision one read of the
// monotonic clock. One tier is decided by one compare-and-swap; several
// are locked by compare-and-swap in tier order (all deciders lock in the
// same order: no deadlock), decided, and written only if all allow. Each
// tier's remaining whole tokens are computed, as a limiter reports them.
// It holds the buckets of one subject only, made when it is built: none of
// the work of creating, finding among many or reclaiming buckets, nor of
// the identities, rule names, reset times or tier details of a decision.
type ceilingGCRA struct {
	seed          maphash.Seed
	slots         []*gcraSlot
	mask          uint64
	mono0         time.Time
	interval, tau int64 // ns per token; tau = burst * interval
	tiers         int
}

// gcraSlot is one bucket, alone on its cache line.
type gcraSlot struct {
	key string
	tat atomic.Int64 // ns since mono0; gcraLocked while a multi-tier decision holds it
	_   [40]byte
}

const gcraLocked = -1

var errCeilingKey = errors.New("ceiling_gcra: a key it was not built with")

func newCeilingGCRA(tb testing.TB, q quota, s *subject, tiers int, _ bool) impl {
	c := &ceilingGCRA{
		seed:     maphash.MakeSeed(),
		slots:    make([]*gcraSlot, 64),
		mask:     63,
		mono0:    time.Now(),
		interval: int64(q.period) / q.n,
		tiers:    tiers,
	}
	if c.interval < 1 {
		tb.Fatalf("ceiling_gcra: a quota of %d per %v is below 1 ns a token", q.n, q.period)
	}
	c.tau = c.interval * q.n
	for _, k := range s.keys[:tiers] {
		h := maphash.String(c.seed, k)
		i := h & c.mask
		for c.slots[i] != nil {
			i = (i + 1) & c.mask
		}
		c.slots[i] = &gcraSlot{key: k}
	}
	return c
}

// find returns the slot of key, or nil.
func (c *ceilingGCRA) find(key string) *gcraSlot {
	for i := maphash.String(c.seed, key) & c.mask; ; i = (i + 1) & c.mask {
		e := c.slots[i]
		if e == nil || e.key == key {
			return e
		}
	}
}

func (c *ceilingGCRA) allow(_ context.Context, s *subject) (bool, error) {
	now := int64(time.Since(c.mono0))
	if c.tiers == 1 {
		e := c.find(s.keys[0])
		if e == nil {
			return false, errCeilingKey
		}
		for {
			tat := e.tat.Load()
			next := max(tat, now) + c.interval
			if next-now > c.tau {
				return false, checkLeft((c.tau - (tat - now)) / c.interval)
			}
			if e.tat.CompareAndSwap(tat, next) {
				return true, checkLeft((c.tau - (next - now)) / c.interval)
			}
		}
	}
	var (
		ents [maxTiers]*gcraSlot
		tats [maxTiers]int64
	)
	n := c.tiers
	for i, k := range s.keys[:n] {
		if ents[i] = c.find(k); ents[i] == nil {
			for j := range i {
				ents[j].tat.Store(tats[j])
			}
			return false, errCeilingKey
		}
		tats[i] = ents[i].lock()
	}
	allowed, least := true, int64(1<<62)
	for i := range n {
		next := max(tats[i], now) + c.interval
		if next-now > c.tau {
			allowed = false
		}
		least = min(least, (c.tau-(next-now))/c.interval)
	}
	for i := range n {
		tat := tats[i]
		if allowed {
			tat = max(tat, now) + c.interval
		}
		ents[i].tat.Store(tat)
	}
	return allowed, checkLeft(least)
}

// lock takes e's TAT for a multi-tier decision and returns it.
func (e *gcraSlot) lock() int64 {
	for {
		tat := e.tat.Load()
		if tat != gcraLocked && e.tat.CompareAndSwap(tat, gcraLocked) {
			return tat
		}
		runtime.Gosched()
	}
}

var errNegativeLeft = errors.New("ceiling_gcra: negative remaining tokens")

// checkLeft uses a remaining count, so that computing it is not optimized
// away: it is never negative for an allowed decision.
func checkLeft(left int64) error {
	if left < -1<<62 {
		return errNegativeLeft
	}
	return nil
}

// TestCeilingGCRAExact checks that ceiling_gcra is the exact limiter its
// figures stand for: under 64 goroutines at once it admits its limit and
// no more, on one tier and on three (all or nothing: each tier's bucket
// holds exactly what the admitted requests took).
func TestCeilingGCRAExact(t *testing.T) {
	for _, tiers := range []int{1, 3} {
		s := newSubject("admission", tiers)
		c := newCeilingGCRA(t, admissionQuota, &s, tiers, false).(*ceilingGCRA)
		var admitted, errs atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range admissionGoroutines {
			wg.Go(func() {
				<-start
				for range admissionAttempts {
					ok, err := c.allow(context.Background(), &s)
					if err != nil {
						errs.Add(1)
					} else if ok {
						admitted.Add(1)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if admitted.Load() != admissionQuota.n || errs.Load() != 0 {
			t.Errorf("%d tiers: %d admitted, %d errors; want %d and none", tiers, admitted.Load(), errs.Load(), admissionQuota.n)
		}
		// Every bucket is ahead of the start by what the admitted took.
		for _, k := range s.keys[:tiers] {
			e := c.find(k)
			if lead := e.tat.Load() - int64(time.Since(c.mono0)); lead <= c.tau-2*c.interval || lead > c.tau {
				t.Errorf("%d tiers: bucket %q is %d ns ahead, want about tau %d", tiers, k, lead, c.tau)
			}
		}
		if _, err := c.allow(context.Background(), &subject{keys: []string{"elsewhere", "x", "y"}}); !errors.Is(err, errCeilingKey) {
			t.Errorf("%d tiers: a key it was not built with: %v, want errCeilingKey", tiers, err)
		}
	}
}
