package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
)

// Local denials from client-side cached state (WithLocalDenials on a Cache,
// the rueidis store). The rueidis package documentation states the argument;
// the comments here say which step each piece serves.
//
// A token bucket's stored value holds its theoretical arrival time (TAT),
// in Unix ns in the script's time base (the server's TIME or the client
// clock), and the fill time it was written under (see
// redisscript.DecodeTokenBucket). Takes
// under that fill time only raise the TAT; a refund, a reset (DEL), the
// key's expiry and a take under another fill time (a changed limit, which
// rescales it) may lower it, so a value written under another fill time
// than the request's limit is never decided locally. With a larger TAT and an earlier time a bucket holds
// fewer tokens, so core's Decide, run on a TAT no larger than the real one at
// a time no earlier than the real one, denies only when Redis would.

const (
	// clockMaxAge is how long a server time reported by a script stays the
	// reference for the current server time. Past it, the next request runs
	// the script, which refreshes it: drift, a stepped clock or a failover
	// to a server with another clock can only mislead for that long.
	clockMaxAge = time.Second
	// clockDrift bounds how much faster than the local monotonic clock the
	// server's clock may run (1000 ppm, twice what NTP slews at most).
	clockDrift = 1000
	// permanentLife is how long a denial whose cost exceeds a bucket's
	// burst is tried locally when the bucket is full: no refill ends it.
	permanentLife = time.Second
	// clockRefresh is how long a server time reference is kept before a
	// newer one replaces it.
	clockRefresh = time.Millisecond
	// minCacheTTL is the shortest client-side cache TTL asked for: rueidis
	// keeps expiry times in milliseconds.
	minCacheTTL = time.Millisecond
)

// local is what the store knows of the buckets it denied. It is safe for
// concurrent use.
type local struct {
	clocks []atomic.Pointer[clockRef] // by slot (one outside Cluster)

	mu    sync.Mutex
	m     map[string]*entry
	max   int
	floor time.Time // observations sent before it are ignored: see clear
}

// clockRef is a server time reported by a script (Unix ns) and the local
// round trip it came in: the script ran between sent and recv.
type clockRef struct {
	at         int64
	sent, recv time.Time
}

// obs is what one Redis reply says about one bucket: its stored TAT was in
// [lo, hi] (0: absent) at some instant between sent and recv (local
// monotonic times). lo > hi says nothing is known (a lost reply).
type obs struct {
	lo, hi     int64
	sent, recv time.Time
}

// entry is what the store knows of one bucket key.
type entry struct {
	// known: the key's value, at the latest write this instance has heard
	// of, was in [lo, hi]. Observations that overlap in time and disagree
	// with a possible lowering leave it unknown until a later one.
	known  bool
	lo, hi int64
	// sent and recv span the observations merged into lo and hi.
	sent, recv time.Time
	// lowered: this instance lowered the value itself (a refund or a
	// reset), between lowSent and lowRecv at the latest; a copy cached
	// before that may still be served for a moment, so from then on a
	// cached value must also be at most hi.
	lowered          bool
	lowSent, lowRecv time.Time
	// until: local denials are worth trying until then (the longest wait
	// of the last denial); it also caps the client-side cache TTL.
	until time.Time
}

func newLocal(slots, max int) *local {
	return &local{clocks: make([]atomic.Pointer[clockRef], slots), m: make(map[string]*entry), max: max}
}

// setClock records the server time at reported by a script call on slot
// that was sent at sent and answered at recv. Every reference gives valid
// bounds (see serverNow), so one sent less than clockRefresh after the
// current one is dropped: the many requests of one batch allocate one.
func (c *local) setClock(slot int, at time.Time, sent, recv time.Time) {
	p := &c.clocks[slot]
	if old := p.Load(); old != nil {
		if d := sent.Sub(old.sent); d >= 0 && d < clockRefresh {
			return
		}
	}
	p.Store(&clockRef{at: at.UnixNano(), sent: sent, recv: recv})
}

// serverNow returns bounds on the current server time of slot's node at
// local time now: lo <= server time <= hi, from the last script reply. The
// script ran after the request was sent and before the reply came, so the
// server's clock then read ref.at at some local instant in [sent, recv]:
// counting from sent gives an upper bound, from recv a lower one, each
// widened by the drift allowance. ok is false without a fresh reference.
func (c *local) serverNow(slot int, now time.Time) (lo, hi int64, ok bool) {
	ref := c.clocks[slot].Load()
	if ref == nil {
		return 0, 0, false
	}
	up := now.Sub(ref.sent)
	if up < 0 || up > clockMaxAge {
		return 0, 0, false
	}
	down := max(now.Sub(ref.recv), 0)
	return ref.at + int64(down) - int64(down)/clockDrift, ref.at + int64(up) + int64(up)/clockDrift, true
}

// observed is what a script's state for a token bucket says about its
// stored TAT, the script having decided at at: ResetAfter is TAT - at when
// positive, exactly (integer nanoseconds); zero means TAT <= at or absent.
func observed(st core.BucketState, res time.Duration, at time.Time, sent, recv time.Time) obs {
	a := at.UnixNano()
	// At microsecond resolution the script decided at the microsecond, on
	// the TAT rounded up to it.
	a -= a % int64(res)
	if st.ResetAfter > 0 {
		v := a + int64(st.ResetAfter)
		return obs{lo: v - int64(res) + 1, hi: v, sent: sent, recv: recv}
	}
	return obs{lo: 0, hi: a, sent: sent, recv: recv}
}

func isBucket(l *core.Limit) bool {
	a := l.Algorithm()
	return a == core.AlgTokenBucket || a == core.AlgShaping
}

// denialLife returns how long a denial with these states is worth trying
// locally, and whether the request was denied: the longest RetryAfter (the
// request passes only once every denying bucket has refilled), or for a
// cost above a burst, the time until that bucket is full, at least
// permanentLife.
func denialLife(cost int64, states []core.BucketState) (time.Duration, bool) {
	var life time.Duration
	denied, permanent := false, false
	for _, st := range states {
		switch {
		case st.Allowed:
		case st.Reason == core.ReasonCostExceedsLimit:
			denied, permanent = true, true
			life = max(life, st.ResetAfter)
		default:
			denied = true
			life = max(life, st.RetryAfter)
		}
	}
	if permanent {
		life = max(life, permanentLife)
	}
	return life, denied && cost > 0
}

// sighting is what one script reply said about one bucket key.
type sighting struct {
	key     string
	o       obs
	lowered bool // the call may have lowered the value (a refund, a reset)
}

// record tells the cache what a single-slot script call, sent at sent and
// answered at recv, said about t's buckets.
func (c *local) record(keys []string, t *core.Take, sent, recv time.Time) {
	var arr [4]sighting
	seen := arr[:0]
	for i := range t.Buckets {
		if isBucket(t.Buckets[i].Limit) {
			seen = append(seen, sighting{key: keys[i], o: observed(t.States[i], t.Buckets[i].Limit.Resolution(), t.At, sent, recv)})
		}
	}
	c.recordAll(seen, t.Cost, t.States)
}

// recordAll merges what one request's replies said about its token bucket
// keys. A denied request's keys are tracked, and local denials are worth
// trying for them for the longest wait; an allowed one's are tracked only
// if one of them already is, so that a later local denial by that one can
// report the others. Keys that never meet a denial are not tracked.
func (c *local) recordAll(seen []sighting, cost int64, states []core.BucketState) {
	life, denied := denialLife(cost, states)
	if !denied {
		life = 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	create := denied
	for _, s := range seen {
		create = create || c.m[s.key] != nil
	}
	for _, s := range seen {
		c.observeLocked(s.key, s.o, s.lowered, life, create)
	}
}

// observe merges o into key's entry: see observeLocked.
func (c *local) observe(key string, o obs, lowered bool, life time.Duration, create bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.observeLocked(key, o, lowered, life, create)
}

// observeLocked merges o into key's entry. lowered says the call may have
// lowered the value; life > 0 says local denials are worth trying for that
// long after o.recv. A key with no entry gets one only if create or
// lowered. The caller holds c.mu.
func (c *local) observeLocked(key string, o obs, lowered bool, life time.Duration, create bool) {
	if o.sent.Before(c.floor) {
		return
	}
	e := c.m[key]
	if e == nil {
		if !create && !lowered {
			return
		}
		if len(c.m) >= c.max {
			c.clear()
			return // o may be older than what was just forgotten
		}
		e = &entry{known: o.lo <= o.hi, lo: o.lo, hi: o.hi, sent: o.sent, recv: o.recv}
		// A key may be part of a longer string (the take's keys, joined):
		// keep only its own bytes.
		c.m[strings.Clone(key)] = e
	} else {
		e.merge(o, lowered)
	}
	if lowered {
		if !e.lowered || o.sent.Before(e.lowSent) {
			e.lowSent = o.sent
		}
		if !e.lowered || o.recv.After(e.lowRecv) {
			e.lowRecv = o.recv
		}
		e.lowered = true
	}
	if life > 0 {
		if u := o.recv.Add(life); u.After(e.until) {
			e.until = u
		}
	}
}

// merge folds a later, earlier or concurrent observation into e. Two
// observations are ordered only when one was sent after the other's reply
// came; otherwise Redis may have run them in either order.
func (e *entry) merge(o obs, lowered bool) {
	switch {
	case o.sent.After(e.recv):
		// After everything e holds: o is the latest word. If o only bounds
		// the value (a full bucket: at most its time) and that bound admits
		// what e knew, keep e's lower bound too: a take since can only
		// have raised the value, and a copy cached before e's observation
		// must not pass for a newer one. (A bucket full at some time is
		// full at every later time whatever its value, but with a client
		// clock a later request can be decided at an earlier time.)
		lo := o.lo
		if !lowered && e.known && o.lo <= o.hi && o.lo < e.lo && e.lo <= o.hi {
			lo = e.lo
		}
		e.known, e.lo, e.hi, e.sent, e.recv = o.lo <= o.hi, lo, o.hi, o.sent, o.recv
		return
	case o.recv.Before(e.sent):
		// Before everything e holds: old news.
		return
	case !lowered && e.lowered && o.recv.Before(e.lowSent):
		// Before this instance's last lowering, which e already reflects.
		return
	case !e.known || o.lo > o.hi || lowered || (e.lowered && !o.sent.After(e.lowRecv)):
		// Concurrent with a lowering: either order is possible, and the
		// value went down in one of them. Wait for a later observation.
		e.known = false
	default:
		// Concurrent takes only: the value only rose, so the larger of the
		// two is the later.
		e.lo, e.hi = max(e.lo, o.lo), max(e.hi, o.hi)
	}
	if o.sent.Before(e.sent) {
		e.sent = o.sent
	}
	if o.recv.After(e.recv) {
		e.recv = o.recv
	}
}

// unknown makes tracked keys unknown after a call that may have raised
// them and whose answer is lost (a failed take).
func (c *local) unknown(keys []string, sent, recv time.Time) {
	for _, k := range keys {
		c.observe(k, obs{lo: 1, hi: 0, sent: sent, recv: recv}, false, 0, false)
	}
}

// forget makes keys unknown after a call that may have lowered them and
// whose answer is lost (a failed refund), tracking them if they were not.
func (c *local) forget(keys []string, sent, recv time.Time) {
	for _, k := range keys {
		c.observe(k, obs{lo: 1, hi: 0, sent: sent, recv: recv}, true, 0, true)
	}
}

// clear forgets every entry, making room. Observations of calls sent before
// now might be older than what is forgotten, so they are ignored from now
// on. The caller holds c.mu.
func (c *local) clear() {
	clear(c.m)
	c.floor = time.Now()
}

// view is what a local decision needs of one entry.
type view struct {
	known   bool
	lo, hi  int64
	lowered bool
	prover  bool // known, and denied recently enough to be worth trying
}

// accepts reports whether a cached value v agrees with what the entry
// knows. A value below what this instance last saw Redis hold is a copy
// cached before a write whose invalidation is still on its way: it would
// show tokens that are gone, so Remaining and RetryAfter would be too
// generous. After a lowering of our own, a value above what it left may be
// a copy from before the lowering: it would deny wrongly. An unknown entry
// accepts any value, for reporting only (it is no prover).
func (w view) accepts(v int64) bool {
	return !w.known || (v >= w.lo && (!w.lowered || v <= w.hi))
}

// lookup fills views for keys and returns the client-side cache TTL to ask
// for: the shortest time any prover is still worth trying. It returns false
// unless every key has an entry and one at least is a prover.
func (c *local) lookup(keys []string, now time.Time, views []view) (time.Duration, bool) {
	ttl := time.Duration(-1)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, k := range keys {
		e := c.m[k]
		if e == nil {
			return 0, false
		}
		views[i] = view{known: e.known, lo: e.lo, hi: e.hi, lowered: e.lowered, prover: e.known && now.Before(e.until)}
		if d := e.until.Sub(now); views[i].prover && (ttl < 0 || d < ttl) {
			ttl = d
		}
	}
	if ttl < 0 {
		return 0, false
	}
	return max(ttl, minCacheTTL), true
}

// cachedArrays holds the values read for a take of up to cachedLen
// buckets: a local denial need not allocate them.
const cachedLen = 4

var cachedArrays = sync.Pool{New: func() any { return new([cachedLen]Cached) }}

// denyLocally decides t without the script when the buckets' state, read
// through the client-side cache, proves that Redis would deny it. It
// reports whether it did; on false the caller asks Redis. now is the time
// the script would be given (redisscript.NowArg; ServerClock for the
// server's TIME).
func (s *Store) denyLocally(ctx context.Context, now int64, keys []string, t *core.Take) (bool, error) {
	if t.Cost == 0 {
		return false, nil // a read is never denied
	}
	for i := range t.Buckets {
		if t.Buckets[i].Limit.Algorithm() != core.AlgTokenBucket {
			// Window algorithms always go to Redis, and so does shaping,
			// whose queue may hold a bucket past its fill time.
			return false, nil
		}
		if t.Buckets[i].Limit.Resolution() != time.Nanosecond {
			// Limits longer than 100 days decide in microseconds, from
			// times rounded to them: Redis decides those, rare as their
			// floods are.
			return false, nil
		}
	}
	var arr [4]view
	views := arr[:0]
	if len(keys) > len(arr) {
		views = make([]view, 0, len(keys))
	}
	views = views[:len(keys)]
	mono := time.Now()
	ttl, ok := s.local.lookup(keys, mono, views)
	if !ok {
		return false, nil
	}
	// Bounds on the script's time: exact with an explicit time or the
	// client clock, else derived from the last reply of each key's slot.
	var lbArr, ubArr [4]int64
	lb, ub := lbArr[:0], ubArr[:0]
	if len(keys) > len(lbArr) {
		lb, ub = make([]int64, 0, len(keys)), make([]int64, 0, len(keys))
	}
	lb, ub = lb[:len(keys)], ub[:len(keys)]
	if now != redisscript.ServerClock {
		for i := range keys {
			lb[i], ub[i] = now, now
		}
	} else {
		for i, k := range keys {
			if lb[i], ub[i], ok = s.local.serverNow(s.slot(k), mono); !ok {
				return false, nil
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var vals []Cached
	if len(keys) <= cachedLen {
		arr := cachedArrays.Get().(*[cachedLen]Cached)
		defer func() { *arr = [cachedLen]Cached{}; cachedArrays.Put(arr) }()
		vals = arr[:len(keys)]
	} else {
		vals = make([]Cached, len(keys))
	}
	s.cache.Get(ctx, keys, ttl, vals)
	var tatArr [4]int64
	tats := tatArr[:0]
	if len(keys) > len(tatArr) {
		tats = make([]int64, 0, len(keys))
	}
	tats = tats[:len(keys)]
	var spanArr [4]int64
	spans := spanArr[:0]
	if len(keys) > len(spanArr) {
		spans = make([]int64, 0, len(keys))
	}
	spans = spans[:len(keys)]
	hits := true
	usable := true
	for i := range vals {
		if vals[i].Hit {
			s.n.hits.Add(1)
		} else {
			s.n.misses.Add(1)
			hits = false
		}
		v, span, ok, err := cachedTAT(&vals[i])
		if err != nil {
			return false, err
		}
		if !ok || !views[i].accepts(v) {
			usable = false
		}
		if span != 0 && span != int64(t.Buckets[i].Limit.Window()) {
			// Written under another limit (a rule or tenant whose limit
			// changed): the take rescales it, which may give tokens back.
			// Only Redis decides such a take.
			usable = false
		}
		tats[i], spans[i] = v, span
	}
	if !usable {
		return false, nil
	}
	denied := false
	for i := range t.Buckets {
		if !views[i].prover {
			continue // reported, but proves nothing
		}
		// The latest time Redis could decide at, on a TAT no larger than
		// Redis holds: if this denies, Redis denies.
		st, _ := t.Buckets[i].Limit.Decide(&core.State{A: tats[i], Span: spans[i]}, ub[i], t.Cost)
		if !st.Allowed {
			denied = true
			break
		}
	}
	if !denied {
		return false, nil
	}
	// Report at the earliest time Redis could decide at: fewer tokens, a
	// longer RetryAfter and ResetAfter than at the real time. As the script
	// does for a denied request, buckets that would allow report their
	// balance as it stands, read with cost 0.
	var at int64
	for i := range t.Buckets {
		l, state := t.Buckets[i].Limit, core.State{A: tats[i], Span: spans[i]}
		st, _ := l.Decide(&state, lb[i], t.Cost)
		if st.Allowed {
			st, _ = l.Decide(&state, lb[i], 0)
		}
		t.States[i] = st
		at = max(at, lb[i])
	}
	t.At = time.Unix(0, at)
	if hits {
		s.n.local.Add(1)
	} else {
		s.n.fetched.Add(1)
	}
	return true, nil
}

// cachedTAT decodes a bucket's stored value as read through the cache: its
// TAT in Unix ns and the fill time in ns it was written under (span), or
// absent (0, 0). ok is false for a value that is not a token bucket's (the
// rule changed algorithm): Redis decides then. A value that is not a string
// is an error wrapping redisscript.ErrReply.
func cachedTAT(c *Cached) (v, span int64, ok bool, err error) {
	switch {
	case c.Err != nil && errors.Is(c.Err, redisscript.ErrReply):
		return 0, 0, false, c.Err
	case c.Err != nil:
		return 0, 0, false, fmt.Errorf("ratelimit: redis: %w", c.Err)
	case c.Absent:
		return 0, 0, true, nil
	}
	v, span, ok = redisscript.DecodeTokenBucket(c.Value)
	return v, span, ok, nil
}
