package redisstore

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// Failure domains. A Redis node that fails makes the calls to it fail, and
// only those: each node has its own circuit breaker, so that a dead master's
// keys stop costing a timeout each while every other key goes on. Outside
// Cluster there is one domain, the server (for Sentinel, whichever node is
// master). In Cluster a key's domain is the master that owns its hash slot,
// as CLUSTER SLOTS last said: when a replica is promoted or a slot moves,
// the next refresh moves its keys to the new owner's breaker.

const (
	// topologyMaxAge is how long a Cluster slot map is used before a
	// decision refreshes it in the background.
	topologyMaxAge = 5 * time.Second
	// topologyRetry is the least time between refreshes after a failure:
	// a failover shows in CLUSTER SLOTS as soon as a node has seen it.
	topologyRetry = 100 * time.Millisecond
	// topologyTimeout bounds a refresh.
	topologyTimeout = time.Second
)

// SlotRange is a range of hash slots and the address of the master that
// serves it, as CLUSTER SLOTS reports.
type SlotRange struct {
	First, Last int    // inclusive, within [0, 16383]
	Master      string // "host:port"
}

// domain is one failure domain: a node, or the whole server outside
// Cluster (and in Cluster while no slot map is known).
type domain struct {
	name string        // the node's address, or "redis"
	br   *core.Breaker // nil: no breaker
	pipe pipe          // its calls, merged (see Store.pipes)
	// failedAt is when a call to it last failed, Unix ns (0: never): see
	// Store.eval.
	failedAt atomic.Int64
}

// domains maps hash slots to failure domains. It is safe for concurrent use.
type domains struct {
	client   Client
	failures int               // breaker threshold; 0: no breakers
	cooldown time.Duration     // breaker cooldown
	log      *core.LogThrottle // breaker transitions; nil: none
	whole    *domain           // outside Cluster, and for slots no map covers

	mu     sync.Mutex
	byName map[string]*domain // every node seen, so a breaker outlives a refresh

	owners     atomic.Pointer[[]*domain] // by slot; nil until the first map
	refreshing atomic.Bool
	last       atomic.Int64 // when the last refresh started, Unix ns
}

func newDomains(client Client, failures int, cooldown time.Duration, log *core.LogThrottle) *domains {
	d := &domains{client: client, failures: failures, cooldown: cooldown, log: log, byName: map[string]*domain{}}
	d.whole = d.named("redis")
	return d
}

// named returns the domain called name, made on first use. The caller
// must not hold d.mu.
func (d *domains) named(name string) *domain {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dm, ok := d.byName[name]; ok {
		return dm
	}
	dm := &domain{name: name}
	if d.failures > 0 {
		// The options were checked: NewBreaker cannot fail.
		dm.br, _ = core.NewBreaker(d.failures, d.cooldown)
		if d.log != nil {
			dm.br.OnTransition(func(to core.BreakerState, err error) { d.logTransition(name, to, err) })
		}
	}
	d.byName[name] = dm
	return dm
}

// logTransition logs a change of the breaker of the domain called name:
// openings as errors, the rest as information; throttled per node and
// state, so that a flapping node cannot flood the log.
func (d *domains) logTransition(name string, to core.BreakerState, err error) {
	level, msg := slog.LevelInfo, "ratelimit: redis: circuit breaker "+to.String()
	attrs := []slog.Attr{slog.String("node", name), slog.String("state", to.String())}
	if to == core.BreakerOpen {
		level = slog.LevelError
		attrs = append(attrs, slog.Duration("cooldown", d.cooldown), slog.String("error", err.Error()))
	}
	d.log.Log(context.Background(), level, "breaker:"+name+":"+to.String(), msg, attrs...)
}

// of returns the domain of slot (any slot outside Cluster), refreshing the
// slot map in the background when it is old.
func (d *domains) of(slot int) *domain {
	if !d.client.Cluster() {
		return d.whole
	}
	d.refresh(false)
	if o := d.owners.Load(); o != nil {
		if dm := (*o)[slot]; dm != nil {
			return dm
		}
	}
	return d.whole
}

// failed asks for a refresh soon: the failure may be a failover or a moved
// slot.
func (d *domains) failed() {
	if d.client.Cluster() {
		d.refresh(true)
	}
}

// refresh reads the slot map in a goroutine of its own, unless one is under
// way or the map is recent: younger than topologyMaxAge, or than
// topologyRetry when soon is set. The goroutine ends with the read, bounded
// by topologyTimeout.
func (d *domains) refresh(soon bool) {
	age := time.Duration(time.Now().UnixNano() - d.last.Load())
	if age < topologyRetry || (!soon && age < topologyMaxAge && d.owners.Load() != nil) {
		return
	}
	if !d.refreshing.CompareAndSwap(false, true) {
		return
	}
	d.last.Store(time.Now().UnixNano())
	go func() {
		defer d.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), topologyTimeout)
		defer cancel()
		ranges, err := d.client.Slots(ctx)
		if err != nil || len(ranges) == 0 {
			return // the old map stands; the next failure asks again
		}
		owners := make([]*domain, 16384)
		for _, r := range ranges {
			if r.First < 0 || r.Last >= len(owners) || r.First > r.Last || r.Master == "" {
				continue
			}
			dm := d.named(r.Master)
			for s := r.First; s <= r.Last; s++ {
				owners[s] = dm
			}
		}
		d.owners.Store(&owners)
	}()
}

// BreakerStates reports the state of each failure domain's breaker, by
// domain: a node's address, or "redis" for the whole server (outside
// Cluster, and in Cluster for slots no known map covers). Empty without
// breakers.
func (d *domains) states() map[string]core.BreakerState {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]core.BreakerState, len(d.byName))
	for name, dm := range d.byName {
		if dm.br != nil {
			out[name] = dm.br.State()
		}
	}
	return out
}
