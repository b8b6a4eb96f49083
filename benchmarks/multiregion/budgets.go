package multiregion

import (
	"context"
	"errors"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// Budgets is strategy (b), per-region budgets: each region has a bucket of
// its own in its own Redis, with a share of the global rate and burst, and
// decides locally. Shares follow demand, epoch by epoch:
//
//   - At the start of epoch k, each region reports how many requests it was
//     offered in epoch k-1 to every other region.
//   - Half an epoch later, a region that has every report of k-1
//     acknowledges that to every other region.
//   - At the start of epoch k+1, each region computes the shares from the
//     reports of k-1 (split: a floor each, the rest in proportion to
//     demand; every region computes the same numbers from the same
//     reports) and applies its own: the new share if it has the reports and
//     every other region's acknowledgment; the lesser of the new share and
//     its current one if it has the reports only; its current share if it
//     lacks a report.
//
// The shares applied in any epoch sum to at most the global rate and burst,
// whatever messages are lost: a region grows only when every other region
// has acknowledged holding the reports, and so applies at most its new
// share; when no region grows, none exceeds its previous share. During a
// partition no report arrives, and every region keeps its share. This
// assumes the regions' clocks agree on the epoch boundaries; a skew of ε
// lets a growth overlap a shrink for ε.
//
// A bucket whose share changes keeps the fraction of its burst it held
// (core.Limit rescales), so a share moving to a region fuller than the one
// it leaves adds tokens; shares follow demand, which drains a bucket, so
// they usually move the other way and remove tokens instead. Budgets is
// safe for concurrent use.
type Budgets struct {
	g        Global
	floor    int64
	epoch    time.Duration
	regions  []*budgetRegion
	stop     chan struct{}
	wg       sync.WaitGroup
	errs     atomic.Int64
	closed   sync.Once
	closeErr error
}

// budgetRegion is one region's limiters and its side of the protocol.
type budgetRegion struct {
	b      *Budgets
	idx    int
	in     *instances
	inbox  *inbox
	out    []*outbox     // to each other region, nil for itself
	send   func(message) // to every other region: through out
	demand atomic.Int64  // requests offered in the current epoch

	mu          sync.Mutex
	reports     map[int64][]int64 // epoch → each region's demand, -1 when missing
	acks        map[int64][]bool  // epoch → which regions acknowledged it
	rate, burst int64             // the share applied
	history     map[int64][2]int64
}

// NewBudgets returns the budgets strategy for g over the regions whose
// Redis addresses are addrs, exchanging reports through n. It starts one
// goroutine per region, which Close stops. It fails as NewHome does, and
// for a floor the regions cannot all have.
func NewBudgets(addrs []string, n *Net, g Global, opts ...Option) (*Budgets, error) {
	cfg, err := newConfig("NewBudgets", len(addrs), g, opts)
	if err != nil {
		return nil, err
	}
	if err := cfg.checkFloor(len(addrs), g); err != nil {
		return nil, err
	}
	b := &Budgets{g: g, floor: cfg.floor, epoch: cfg.epoch, stop: make(chan struct{})}
	rates := split(g.Rate, cfg.floor, make([]int64, len(addrs)))
	for r, addr := range addrs {
		br := &budgetRegion{b: b, idx: r, reports: map[int64][]int64{}, acks: map[int64][]bool{}, history: map[int64][2]int64{}}
		br.rate, br.burst = rates[r], b.burstOf(rates[r])
		p, err := policy(br.rate, br.burst)
		if err == nil {
			br.in, err = newInstances(cfg, addr, p)
		}
		if err == nil {
			br.inbox, err = newInbox(br.receive)
		}
		if err != nil {
			if br.in != nil {
				br.in.close()
			}
			b.Close()
			return nil, err
		}
		b.regions = append(b.regions, br)
	}
	for _, br := range b.regions {
		br.out = make([]*outbox, len(addrs))
		for q, peer := range b.regions {
			if q == br.idx {
				continue
			}
			addr, err := n.Route(br.idx, q, peer.inbox.addr())
			if err != nil {
				b.Close()
				return nil, err
			}
			br.out[q] = newOutbox(addr)
		}
		br.send = br.broadcast
	}
	for _, br := range b.regions {
		b.wg.Add(1)
		go br.run()
	}
	return b, nil
}

// burstOf returns the burst that goes with a share of rate: the same
// fraction of the global burst, rounded down.
func (b *Budgets) burstOf(rate int64) int64 {
	hi, lo := bits.Mul64(uint64(b.g.Burst), uint64(rate))
	q, _ := bits.Div64(hi, lo, uint64(b.g.Rate))
	return int64(q)
}

// Name returns "budgets".
func (b *Budgets) Name() string { return "budgets" }

// Allow counts the request in region r's demand and decides it on r's own
// bucket.
func (b *Budgets) Allow(ctx context.Context, r int) (core.Decision, error) {
	if err := checkRegion(r, len(b.regions)); err != nil {
		return core.Decision{}, err
	}
	br := b.regions[r]
	br.demand.Add(1)
	return br.in.pick().Allow(ctx, core.Request{})
}

// EpochShares is the share every region applied in one epoch.
type EpochShares struct {
	Epoch  int64   // the epoch: Unix time divided by the epoch length
	Rates  []int64 // tokens per second, by region
	Bursts []int64 // tokens, by region
}

// Shares returns, for every epoch that every region has applied a share
// for, what each applied, in epoch order.
func (b *Budgets) Shares() []EpochShares {
	var out []EpochShares
	byEpoch := map[int64]*EpochShares{}
	for r, br := range b.regions {
		br.mu.Lock()
		for k, s := range br.history {
			e := byEpoch[k]
			if e == nil {
				e = &EpochShares{Epoch: k, Rates: make([]int64, len(b.regions)), Bursts: make([]int64, len(b.regions))}
				for i := range e.Rates {
					e.Rates[i], e.Bursts[i] = -1, -1
				}
				byEpoch[k] = e
			}
			e.Rates[r], e.Bursts[r] = s[0], s[1]
		}
		br.mu.Unlock()
	}
	for _, e := range byEpoch {
		if !slices.Contains(e.Rates, -1) {
			out = append(out, *e)
		}
	}
	slices.SortFunc(out, func(x, y EpochShares) int { return int(x.Epoch - y.Epoch) })
	return out
}

// Links returns how many messages the regions wrote to their links and how
// many were lost before that.
func (b *Budgets) Links() (sent, dropped int64) {
	for _, br := range b.regions {
		for _, o := range br.out {
			if o != nil {
				sent += o.sent.Load()
				dropped += o.dropped.Load()
			}
		}
	}
	return sent, dropped
}

// Errors returns how many share changes failed to apply (SetPolicy
// errors); 0 in a sound run.
func (b *Budgets) Errors() int64 { return b.errs.Load() }

// Warm warms every region's instances (see Strategy).
func (b *Budgets) Warm(ctx context.Context) error {
	for _, br := range b.regions {
		if err := br.in.warm(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the regions' goroutines and closes their links and clients.
// Later calls return the first call's result.
func (b *Budgets) Close() error {
	b.closed.Do(func() {
		close(b.stop)
		b.wg.Wait()
		var errs []error
		for _, br := range b.regions {
			for _, o := range br.out {
				if o != nil {
					o.close()
				}
			}
			if br.inbox != nil {
				br.inbox.close()
			}
			errs = append(errs, br.in.close())
		}
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}

// run acts at every half epoch: at a boundary it applies the epoch's share
// and reports the previous epoch's demand; in the middle it acknowledges
// the previous epoch's reports.
func (br *budgetRegion) run() {
	defer br.b.wg.Done()
	half := int64(br.b.epoch / 2)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	last := time.Now().UnixNano() / half // the last half-epoch event handled
	for {
		now := time.Now().UnixNano()
		timer.Reset(time.Duration((last+1)*half - now))
		select {
		case <-br.b.stop:
			return
		case <-timer.C:
		}
		// A late wake-up handles every event it missed, in order: a
		// skipped boundary would keep a share the others assume gone.
		for now := time.Now().UnixNano() / half; last < now; {
			last++
			k := last / 2
			if last%2 == 0 {
				br.apply(k)
				br.report(k - 1)
			} else {
				br.ack(k - 1)
			}
		}
	}
}

// entry returns epoch k's reports and acknowledgments, creating them. The
// caller holds mu.
func (br *budgetRegion) entry(k int64) ([]int64, []bool) {
	rep, ok := br.reports[k]
	if !ok {
		n := len(br.b.regions)
		rep = make([]int64, n)
		for i := range rep {
			rep[i] = -1
		}
		br.reports[k] = rep
		br.acks[k] = make([]bool, n)
	}
	return rep, br.acks[k]
}

// receive handles a message from another region.
func (br *budgetRegion) receive(m message) {
	if m.from >= len(br.b.regions) || m.from == br.idx || m.a < 0 {
		return
	}
	br.mu.Lock()
	defer br.mu.Unlock()
	switch m.kind {
	case kindReport:
		if m.b >= 0 {
			rep, _ := br.entry(m.a)
			rep[m.from] = m.b
		}
	case kindAck:
		_, acks := br.entry(m.a)
		acks[m.from] = true
	}
}

// report records and sends the demand of epoch k.
func (br *budgetRegion) report(k int64) {
	d := br.demand.Swap(0)
	br.mu.Lock()
	rep, _ := br.entry(k)
	rep[br.idx] = d
	br.mu.Unlock()
	br.send(message{kind: kindReport, from: br.idx, a: k, b: d})
}

// ack acknowledges epoch k if every report of it has arrived.
func (br *budgetRegion) ack(k int64) {
	br.mu.Lock()
	rep, acks := br.entry(k)
	complete := !slices.Contains(rep, -1)
	if complete {
		acks[br.idx] = true
	}
	br.mu.Unlock()
	if complete {
		br.send(message{kind: kindAck, from: br.idx, a: k})
	}
}

// broadcast queues m on every outbox.
func (br *budgetRegion) broadcast(m message) {
	for _, o := range br.out {
		if o != nil {
			o.send(m)
		}
	}
}

// apply sets the share of epoch k from the reports of k-2 and records it.
func (br *budgetRegion) apply(k int64) {
	br.mu.Lock()
	rate, burst := br.rate, br.burst
	rep, acks := br.entry(k - 2)
	if !slices.Contains(rep, -1) {
		nr := split(br.b.g.Rate, br.b.floor, rep)[br.idx]
		nb := br.b.burstOf(nr)
		grow := true
		for q, ok := range acks {
			if q != br.idx && !ok {
				grow = false
			}
		}
		if !grow {
			nr, nb = min(nr, rate), min(nb, burst)
		}
		rate, burst = nr, nb
	}
	for e := range br.reports {
		if e < k-3 {
			delete(br.reports, e)
			delete(br.acks, e)
		}
	}
	changed := rate != br.rate || burst != br.burst
	br.mu.Unlock()
	if changed {
		p, err := policy(rate, burst)
		if err == nil {
			err = br.in.setPolicy(p)
		}
		if err != nil {
			br.b.errs.Add(1)
			rate, burst = br.rate, br.burst
		}
	}
	br.mu.Lock()
	br.rate, br.burst = rate, burst
	br.history[k] = [2]int64{rate, burst}
	br.mu.Unlock()
}

// split divides total (tokens per second) between len(demand) regions:
// floor each, and the rest in proportion to demand, rounded down, with
// what rounding leaves given one token each to the largest remainders
// (ties to the lower index). With no demand anywhere the rest is split
// equally. The result sums to total exactly and is the same for the same
// arguments, which lets every region compute every share. total must be
// at least floor × len(demand) and every demand >= 0.
func split(total, floor int64, demand []int64) []int64 {
	n := int64(len(demand))
	out := make([]int64, n)
	if n == 0 {
		return out
	}
	rest := total - floor*n
	var sum uint64
	for _, d := range demand {
		sum += uint64(d)
	}
	weight := func(i int) uint64 {
		if sum == 0 {
			return 1
		}
		return uint64(demand[i])
	}
	denom := sum
	if sum == 0 {
		denom = uint64(n)
	}
	rems := make([]uint64, n)
	left := rest
	for i := range out {
		// rest × weight / denom in 128 bits: the quotient is at most rest.
		hi, lo := bits.Mul64(uint64(rest), weight(i))
		q, r := bits.Div64(hi, lo, denom)
		out[i] = floor + int64(q)
		rems[i] = r
		left -= int64(q)
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rems[a] > rems[b]:
			return -1
		case rems[a] < rems[b]:
			return 1
		}
		return 0
	})
	for i := int64(0); i < left; i++ {
		out[order[i]]++
	}
	return out
}
