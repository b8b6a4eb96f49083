package multiregion

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketry/ratelimit/adapters/goredis"
	"github.com/bucketry/ratelimit/core"
)

// Reconciled is strategy (c), asynchronous reconciliation: each region
// decides on a bucket of its own in its own Redis with the whole global
// limit, and every sync interval S publishes to the others how many tokens
// it has admitted since it started. A region receiving a peer's total
// charges the increase to its own bucket, exactly, even past empty: the
// bucket then owes tokens and denies local requests until it has refilled
// them (see charge). Totals, not increments, travel, so a lost message
// loses nothing: the next one carries it.
//
// # Bound
//
// Let W be the longest time from a region's admission to its charge in
// every other region's bucket: S (until the next publication) plus the
// one-way latency plus the charge's own time, with the link up; plus the
// length of a partition across one. Let R be the number of regions. Then
// the regions together never admit more than
//
//	B + L×t + (R-1)×(B + L×W)
//
// tokens in the first t seconds, where L and B are the global rate and
// burst: an over-admission of at most ×(B + L×W). Proof: take the
// region r that admitted last, at t' <= t. Its bucket's consumption, its
// own admissions and the charges, is at most B + L×t' (a token bucket
// whose arrival time only moves forward: charges move it too, and the keys
// live long enough never to expire while they owe). Every admission of
// another region made before t'-W has been charged to it. So r's own
// admissions are at most B + L×t' less the other regions' admissions up
// to t'-W, and what the others admitted in (t'-W, t'] is at most B + L×W
// each, the most their own buckets allow in a window of W.
//
// After a partition the charges of the admissions made during it arrive
// at once and the buckets owe them: the regions deny until they have
// refilled them, so over a run long enough the over-admission is repaid.
// Reconciled is safe for concurrent use.
type Reconciled struct {
	g        Global
	sync     time.Duration
	regions  []*reconRegion
	start    time.Time
	stop     chan struct{}
	wg       sync.WaitGroup
	errs     atomic.Int64
	closed   sync.Once
	closeErr error
}

// reconRegion is one region's limiters, its admissions and what it has
// charged of each peer's.
type reconRegion struct {
	c        *Reconciled
	idx      int
	in       *instances
	charger  *core.Limiter // FailClosed: a failed charge is an error, retried
	inbox    *inbox
	out      []*outbox
	admitted atomic.Int64 // tokens admitted locally since the start
	incoming chan message

	mu      sync.Mutex
	seen    []int64     // each peer's total already charged
	since   []time.Time // the snapshot time of each peer's last charged total
	maxLag  time.Duration
	charged int64
	calls   int64
}

// minTTL keeps reconciliation's keys while they owe tokens: a charge is
// decided at an explicit time, which the store's TTL counts from (see
// goredis.WithMinTTL); the state itself says when the bucket is full.
const minTTL = time.Hour

// NewReconciled returns the reconciliation strategy for g over the regions
// whose Redis addresses are addrs, exchanging totals through n. It starts
// two goroutines per region, which Close stops. It fails as NewHome does.
func NewReconciled(addrs []string, n *Net, g Global, opts ...Option) (*Reconciled, error) {
	cfg, err := newConfig("NewReconciled", len(addrs), g, opts)
	if err != nil {
		return nil, err
	}
	p, err := policy(g.Rate, g.Burst)
	if err != nil {
		return nil, err
	}
	c := &Reconciled{g: g, sync: cfg.sync, start: time.Now(), stop: make(chan struct{})}
	for r, addr := range addrs {
		rr := &reconRegion{c: c, idx: r, incoming: make(chan message, 1024), seen: make([]int64, len(addrs)), since: make([]time.Time, len(addrs))}
		for q := range rr.since {
			rr.since[q] = c.start
		}
		rr.in, err = newInstances(cfg, addr, p, goredis.WithMinTTL(minTTL))
		if err == nil {
			chargeCfg := *cfg
			chargeCfg.instances, chargeCfg.failure = 1, core.FailClosed
			var ch *instances
			if ch, err = newInstances(&chargeCfg, addr, p, goredis.WithMinTTL(minTTL)); err == nil {
				rr.in.stores = append(rr.in.stores, ch.stores...)
				rr.charger = ch.limiters[0]
			}
		}
		if err == nil {
			rr.inbox, err = newInbox(rr.receive)
		}
		if err != nil {
			if rr.in != nil {
				rr.in.close()
			}
			c.Close()
			return nil, err
		}
		c.regions = append(c.regions, rr)
	}
	for _, rr := range c.regions {
		rr.out = make([]*outbox, len(addrs))
		for q, peer := range c.regions {
			if q == rr.idx {
				continue
			}
			addr, err := n.Route(rr.idx, q, peer.inbox.addr())
			if err != nil {
				c.Close()
				return nil, err
			}
			rr.out[q] = newOutbox(addr)
		}
	}
	for _, rr := range c.regions {
		c.wg.Add(2)
		go rr.publish()
		go rr.charges()
	}
	return c, nil
}

// Name returns "reconcile".
func (c *Reconciled) Name() string { return "reconcile" }

// Allow decides a request of region r on r's own bucket, and counts it in
// r's total if allowed.
func (c *Reconciled) Allow(ctx context.Context, r int) (core.Decision, error) {
	if err := checkRegion(r, len(c.regions)); err != nil {
		return core.Decision{}, err
	}
	rr := c.regions[r]
	d, err := rr.in.pick().Allow(ctx, core.Request{})
	if err == nil && d.Allowed {
		rr.admitted.Add(1)
	}
	return d, err
}

// ReconStats is what reconciliation did.
type ReconStats struct {
	// MaxLag is the longest time, over every charge, from the snapshot
	// before the charged one (the earliest an admission it carries can
	// have been counted) to the charge's end: W of the bound, less the
	// time an admission takes to be counted once Redis has decided it.
	MaxLag time.Duration
	// Charged is the tokens charged, over every region.
	Charged int64
	// Calls is the store calls the charges made.
	Calls int64
	// Sent and Dropped count the messages written to links and lost
	// before that.
	Sent, Dropped int64
	// Errors counts charges that failed (and were retried with the next
	// total); 0 in a sound run.
	Errors int64
}

// Stats returns what reconciliation did so far.
func (c *Reconciled) Stats() ReconStats {
	var s ReconStats
	for _, rr := range c.regions {
		rr.mu.Lock()
		s.MaxLag = max(s.MaxLag, rr.maxLag)
		s.Charged += rr.charged
		s.Calls += rr.calls
		rr.mu.Unlock()
		for _, o := range rr.out {
			if o != nil {
				s.Sent += o.sent.Load()
				s.Dropped += o.dropped.Load()
			}
		}
	}
	s.Errors = c.errs.Load()
	return s
}

// Bound returns the most the regions may over-admit, in tokens, when
// admissions reach every other region's bucket within w (see Reconciled).
func (c *Reconciled) Bound(w time.Duration) float64 {
	return float64(len(c.regions)-1) * c.g.allowance(w)
}

// Warm warms every region's instances and charger (see Strategy).
func (c *Reconciled) Warm(ctx context.Context) error {
	for _, rr := range c.regions {
		if err := rr.in.warm(ctx); err != nil {
			return err
		}
		if err := (&instances{limiters: []*core.Limiter{rr.charger}}).warm(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the regions' goroutines and closes their links and clients.
// Later calls return the first call's result.
func (c *Reconciled) Close() error {
	c.closed.Do(func() {
		close(c.stop)
		c.wg.Wait()
		var errs []error
		for _, rr := range c.regions {
			for _, o := range rr.out {
				if o != nil {
					o.close()
				}
			}
			rr.inbox.close()
			errs = append(errs, rr.in.close())
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// receive queues a peer's total for the charging goroutine.
func (rr *reconRegion) receive(m message) {
	if m.kind != kindConsumption || m.from >= len(rr.c.regions) || m.from == rr.idx {
		return
	}
	select {
	case rr.incoming <- m:
	default: // the next total carries it
	}
}

// publish sends the region's total to every peer every sync interval.
func (rr *reconRegion) publish() {
	defer rr.c.wg.Done()
	t := time.NewTicker(rr.c.sync)
	defer t.Stop()
	for {
		select {
		case <-rr.c.stop:
			return
		case <-t.C:
		}
		m := message{kind: kindConsumption, from: rr.idx, a: rr.admitted.Load(), b: time.Now().UnixNano()}
		for _, o := range rr.out {
			if o != nil {
				o.send(m)
			}
		}
	}
}

// charges charges the increase of every peer's total to the region's
// bucket, one at a time.
func (rr *reconRegion) charges() {
	defer rr.c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-rr.c.stop
		cancel()
	}()
	for {
		var m message
		select {
		case <-rr.c.stop:
			return
		case m = <-rr.incoming:
		}
		rr.mu.Lock()
		n := m.a - rr.seen[m.from]
		since := rr.since[m.from]
		if n == 0 {
			// Nothing new up to this snapshot: what comes next was
			// counted after it.
			rr.since[m.from] = time.Unix(0, max(m.b, since.UnixNano()))
		}
		rr.mu.Unlock()
		if n <= 0 {
			continue // nothing new, or an older total
		}
		calls, err := charge(ctx, rr.charger, rr.c.g, n)
		done := time.Now()
		rr.mu.Lock()
		rr.calls += calls
		if err == nil {
			rr.seen[m.from], rr.since[m.from] = m.a, time.Unix(0, m.b)
			rr.charged += n
			rr.maxLag = max(rr.maxLag, done.Sub(since))
		}
		rr.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			rr.c.errs.Add(1)
		}
	}
}

// charge takes n tokens from the bucket of l's one global rule, as many as
// the bucket holds and the rest as debt, and returns the store calls it
// made. A token bucket admits a cost c at time f when its theoretical
// arrival time TAT, after the take, is at most f + B×T (T the interval
// between tokens, B×T the fill time); the take moves TAT to max(TAT, f) +
// c×T. So when the bucket has no room for c now, deciding at
// f = TAT + c×T - B×T, which is after now and, for c <= B, at most TAT,
// admits exactly c and moves TAT by exactly c×T, past the point where the
// bucket is empty: the bucket owes those tokens, and denies every request
// until time has refilled them. A denial tells TAT: the time it was
// decided at plus its ResetAfter. If another take moved TAT between the
// denial and the charge, the charge is denied in turn, changing nothing,
// and charge tries again. Costs above B go in pieces of B.
func charge(ctx context.Context, l *core.Limiter, g Global, n int64) (calls int64, err error) {
	interval := g.interval()
	fill := time.Duration(g.Burst) * interval
	for n > 0 {
		c := min(n, g.Burst)
		for {
			calls++
			d, err := l.AllowN(ctx, core.Request{}, c)
			if err != nil {
				return calls, err
			}
			if d.Allowed {
				break
			}
			if d.At.IsZero() {
				return calls, fmt.Errorf("multiregion: charge: a denial without its time")
			}
			f := d.At.Add(d.ResetAfter + time.Duration(c)*interval - fill)
			calls++
			if d, err = l.AllowAt(ctx, f, core.Request{}, c); err != nil {
				return calls, err
			}
			if d.Allowed {
				break
			}
		}
		n -= c
	}
	return calls, nil
}
