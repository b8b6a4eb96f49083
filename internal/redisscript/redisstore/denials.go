package redisstore

import (
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/bucketry/ratelimit/core"
)

// maxDenials bounds the local denial cache.
const maxDenials = 100_000

// denials remembers denied takes so that a repeat (the same buckets, the
// same rules, the same cost) is denied without a round trip while the
// denial provably still holds: the local denials of a store whose client
// has no Cache (go-redis). It is safe for concurrent use.
//
// Why that is right: the request was sent at local time sent, and Redis
// decided it at some later instant d. Each denying bucket then held fewer
// than cost tokens and needed RetryAfter to refill enough. Takes under the
// same limit only take tokens away, so no denying bucket can admit the cost
// before d + RetryAfter > sent + RetryAfter. Until sent + the smallest
// RetryAfter, the repeat would be denied. Measuring from sent, the earliest
// instant Redis could have decided, means latency and clock skew only
// shorten the window.
//
// Two things add tokens early, by any instance: a give-back (a Cluster
// refund, a lease returned), and a take under a limit of another fill time,
// which rescales the bucket and from then on refills it at its own pace
// (instances whose rules differ while a change rolls out, a Lookup that
// gives a tenant another limit for a while). A denial is only answered for
// takes under the limits it was decided under, and a take of the same
// buckets sent from this instance replaces or forgets it; what other
// instances do, it cannot see. So a local denial can outlast the real one,
// which under-admits for at most that RetryAfter and never over-admits.
type denials struct {
	mu sync.Mutex
	m  map[string]*denial
}

type denial struct {
	// limits are the limits it was decided under: a rule change, which
	// brings new limits, drops it. They are weak pointers: a denial must not
	// keep the limits of a policy replaced since, and so that policy, alive.
	// A dead limit's pointer yields nil, which no take's limit equals.
	limits    []weak.Pointer[core.Limit]
	cost      int64
	until     time.Time // sent + the smallest RetryAfter of the denying buckets
	recv      time.Time // when the reply came: reported times count down from here
	at        time.Time // the time Redis decided at
	permanent bool      // a cost above a limit: no refill makes it pass
	states    []core.BucketState
}

func newDenials() *denials { return &denials{m: make(map[string]*denial)} }

func joinKeys(keys []string) string {
	if len(keys) == 1 {
		return keys[0]
	}
	return strings.Join(keys, "\x00")
}

// answer fills t.States from a denial that still holds at now, and reports
// whether it did. k is joinKeys of the take's keys.
func (c *denials) answer(k string, t *core.Take, now time.Time) bool {
	c.mu.Lock()
	d := c.m[k]
	c.mu.Unlock()
	if d == nil || d.cost != t.Cost || len(d.limits) != len(t.Buckets) {
		return false
	}
	for i := range t.Buckets {
		if d.limits[i].Value() != t.Buckets[i].Limit {
			return false
		}
	}
	if !d.permanent && !now.Before(d.until) {
		return false
	}
	elapsed := max(now.Sub(d.recv), 0)
	for i, st := range d.states {
		// Counted from when the reply came, which is no earlier than when
		// Redis decided: the reported wait is never shorter than the real.
		// A limit at microsecond resolution counts from the microsecond.
		el := elapsed
		if l := d.limits[i].Value(); l != nil && l.Resolution() == time.Microsecond {
			el = max(now.Truncate(time.Microsecond).Sub(d.recv.Truncate(time.Microsecond)), 0)
		}
		if st.RetryAfter > 0 {
			st.RetryAfter = max(st.RetryAfter-el, time.Nanosecond)
		}
		st.ResetAfter = max(st.ResetAfter-el, 0)
		t.States[i] = st
	}
	t.At = d.at.Add(elapsed)
	return true
}

// record remembers a denied take and forgets an allowed one. k is joinKeys
// of the take's keys.
func (c *denials) record(k string, t *core.Take, sent, recv time.Time) {
	var until time.Duration = -1
	permanent := false
	for _, st := range t.States {
		switch {
		case st.Allowed:
		case st.Reason == core.ReasonCostExceedsLimit:
			permanent = true
		case until < 0 || st.RetryAfter < until:
			until = st.RetryAfter
		}
	}
	if until < 0 && !permanent {
		c.mu.Lock()
		if len(c.m) > 0 {
			delete(c.m, k)
		}
		c.mu.Unlock()
		return
	}
	// Built before locking: weak.Make looks the limit up in the runtime.
	// A limit at microsecond resolution counts its waits from the
	// microsecond: so does the denial.
	from := sent
	for i := range t.Buckets {
		if t.Buckets[i].Limit.Resolution() == time.Microsecond {
			from = sent.Truncate(time.Microsecond)
		}
	}
	d := &denial{cost: t.Cost, until: from.Add(until), recv: recv, at: t.At, permanent: permanent && until < 0}
	d.limits = make([]weak.Pointer[core.Limit], len(t.Buckets))
	for i := range t.Buckets {
		d.limits[i] = weak.Make(t.Buckets[i].Limit)
	}
	d.states = append([]core.BucketState(nil), t.States...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= maxDenials {
		c.evict(recv)
	}
	c.m[k] = d
}

// evict makes room: expired denials first, else any one.
func (c *denials) evict(now time.Time) {
	n := 0
	for k, d := range c.m {
		if !d.permanent && !now.Before(d.until) {
			delete(c.m, k)
		}
		if n++; n >= 64 {
			break
		}
	}
	if len(c.m) < maxDenials {
		return
	}
	for k := range c.m {
		delete(c.m, k)
		return
	}
}

// forget drops every local denial that involves key, as a reset must.
func (c *denials) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if k == key || strings.HasPrefix(k, key+"\x00") || strings.HasSuffix(k, "\x00"+key) || strings.Contains(k, "\x00"+key+"\x00") {
			delete(c.m, k)
		}
	}
}
