package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
)

// Store is a core.Store on Redis through a Client; the stores of
// adapters/goredis and adapters/rueidis wrap one. It is safe for concurrent
// use.
type Store struct {
	client   Client
	cluster  bool
	keys     *redisscript.Keys
	clock    core.Clock // nil: the Redis server's TIME
	timeout  time.Duration
	minTTL   time.Duration
	denials  *denials              // remembered denials: WithLocalDenials on a client without Cache
	cache    Cache                 // the client's, when local is set
	local    *local                // denials from cached state: WithLocalDenials on a Cache
	batchers *redisscript.Batchers // nil without batching
	domains  *domains              // failure domains and their breakers
	failedAt atomic.Int64          // the last failed call to any node, Unix ns; 0: none
	pipes    bool                  // merge each node's calls in pipes: Cluster, on a client that does not

	n struct {
		remote, local, fetched, hits, misses, reloads, refunds, refused atomic.Int64
		leases, returns                                                 atomic.Int64
	}
}

// Open returns the store of package name (the adapter's, first in every
// error) on client, configured by opts applied in order by apply. conn
// makes the Client of client, and may report a problem with cfg.Fail; it is
// not called for a nil client (IsNil). Open fails with an error joining
// every problem, each wrapping core.ErrInvalidOption: a nil client, a nil
// option (named by its position in opts, counted from 0), an invalid
// setting.
func Open[C any, O comparable](name string, client C, conn func(C, *Config) Client, opts []O, apply func(O, *Config)) (*Store, error) {
	cfg := configure(name, opts, apply)
	var c Client
	if !IsNil(client) {
		c = conn(client, &cfg)
	}
	return newStore(c, cfg)
}

// newStore returns a store on client configured by cfg. It fails with
// every problem of cfg, and for a nil client.
func newStore(client Client, cfg Config) (*Store, error) {
	if client == nil {
		cfg.Fail("nil client")
	}
	keys, err := cfg.check()
	if err != nil {
		return nil, err
	}
	s := &Store{client: client, cluster: client.Cluster(), keys: keys, clock: cfg.clock, timeout: cfg.timeout, minTTL: cfg.minTTL}
	s.domains = newDomains(client, cfg.failures, cfg.cooldown, core.NewLogThrottle(cfg.logger, core.LogInterval))
	if p, ok := client.(Pipelines); s.cluster && (!ok || !p.AutoPipelines()) {
		s.pipes = true
	}
	slots := 1
	if s.cluster {
		slots = 16384
	}
	if cfg.local {
		if c, ok := client.(Cache); ok {
			s.cache, s.local = c, newLocal(slots, cfg.localKeys)
		} else {
			s.denials = newDenials()
		}
	}
	if !cfg.noBatch {
		s.batchers = redisscript.NewBatchers(slots, s.send, s.timeout, s.minTTL)
	}
	if cfg.require {
		ctx, cancel := context.WithTimeout(context.Background(), max(s.timeout, startupTimeout))
		defer cancel()
		if err := client.Ping(ctx); err != nil {
			return nil, fmt.Errorf("%w: %s: WithRequireRedis: redis does not answer: %w", core.ErrUnavailable, cfg.name, err)
		}
	}
	if s.cluster {
		s.domains.refresh(false) // learn the slot map before the first decision needs it
	}
	return s, nil
}

// startupTimeout is the least time WithRequireRedis gives Redis to answer.
const startupTimeout = time.Second

// Stats counts how a Store's decisions were made. Every Take that passes
// validation counts once in Remote, Local or Fetched.
type Stats struct {
	Remote      int64 // takes decided by the script in Redis
	Local       int64 // takes denied locally, without a round trip
	Fetched     int64 // takes denied from bucket state read from Redis (a cache miss): one GET, no script
	CacheHits   int64 // bucket states read from the client-side cache
	CacheMisses int64 // bucket states read from Redis
	Reloads     int64 // scripts sent in full after NOSCRIPT
	Refunds     int64 // Cluster slot groups given back after another group denied
	Refused     int64 // takes refused at once by an open circuit breaker (wholly or in part)
	Leases      int64 // TakeLease calls sent to Redis
	Returns     int64 // ReturnLease calls sent to Redis
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Remote:      s.n.remote.Load(),
		Local:       s.n.local.Load(),
		Fetched:     s.n.fetched.Load(),
		CacheHits:   s.n.hits.Load(),
		CacheMisses: s.n.misses.Load(),
		Reloads:     s.n.reloads.Load(),
		Refunds:     s.n.refunds.Load(),
		Refused:     s.n.refused.Load(),
		Leases:      s.n.leases.Load(),
		Returns:     s.n.returns.Load(),
	}
}

// BreakerStates reports the state of each failure domain's circuit
// breaker, by domain: a Cluster node's address, or "redis" for the whole
// server (outside Cluster, and in Cluster until the slot map is known).
// Empty without WithBreaker. It is meant for health checks and metrics.
func (s *Store) BreakerStates() map[string]core.BreakerState { return s.domains.states() }

// Key returns the Redis key of bucket (rule, id).
func (s *Store) Key(rule, id string) string { return s.keys.Key(rule, id) }

// Reset deletes bucket (rule, id), which is then full, and stops trusting
// what local denials knew of it. Like a take, it is bounded by the store's
// timeout and goes through the circuit breaker of the key's node.
func (s *Store) Reset(ctx context.Context, rule, id string) error {
	if err := core.CheckKey(id); err != nil {
		return err
	}
	key := s.keys.Key(rule, id)
	dm := s.domains.of(s.slot(key))
	probe, open := dm.br.Admit()
	if open != nil {
		s.n.refused.Add(1)
		return open
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	sent := time.Now()
	err := s.del(cctx, dm, key)
	cancel()
	err = ctxErr(ctx, err)
	s.settle(ctx, dm, probe, true, err)
	switch {
	case s.local != nil:
		// A delete makes the bucket full: tokens rise, which a copy cached
		// before it does not show.
		if err != nil {
			s.local.forget([]string{key}, sent, time.Now())
		} else {
			s.local.observe(key, obs{lo: 0, hi: 0, sent: sent, recv: time.Now()}, true, 0, false)
		}
	case s.denials != nil && err == nil:
		s.denials.forget(key)
	}
	if err != nil {
		return fmt.Errorf("ratelimit: redis: %w", err)
	}
	return nil
}

// del runs Client.Del on key, of dm's node, as eval runs a call: for
// suspectFor after a call to that node failed, in a goroutine given up at
// ctx's end, which the client may not honour while it reconnects.
func (s *Store) del(ctx context.Context, dm *domain, key string) error {
	if !recent(dm.failedAt.Load()) {
		return s.client.Del(ctx, key)
	}
	done := make(chan error, 1)
	go func() { done <- s.client.Del(ctx, key) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done:
			return err
		default:
		}
		return fmt.Errorf("the client did not return within the bound: %w", ctx.Err())
	}
}

// Take implements core.Store.
func (s *Store) Take(ctx context.Context, t *core.Take) error {
	if err := core.CheckTake(t); err != nil {
		return err
	}
	t.At = time.Time{}
	now := redisscript.NowArg(t.Now)
	if now == redisscript.ServerClock && s.clock != nil {
		now = redisscript.NowArg(s.clock.Now())
	}
	r := takeReqs.Get().(*takeReq)
	defer r.release()
	keys, joined := r.buildKeys(s.keys, t.Buckets)
	slot := 0
	if s.cluster {
		slots := r.slotsOf(keys)
		slot = slots[0]
		for _, sl := range slots[1:] {
			if sl != slot {
				return ctxErr(ctx, s.takeSlots(ctx, now, keys, slots, t))
			}
		}
	}
	dm := s.domains.of(slot)
	probe, open := dm.br.Admit()
	if open != nil {
		s.n.refused.Add(1)
		return open
	}
	remote, err := s.takeSlot(ctx, now, slot, keys, joined, t, &r.call)
	err = ctxErr(ctx, err)
	s.settle(ctx, dm, probe, remote, err)
	return err
}

// takeReq is what a Take needs besides the take itself: its keys and its
// script call. Takes reuse them from a pool, so that a decision allocates
// only its keys, all in one string.
type takeReq struct {
	call  redisscript.Call
	keys  [4]string
	ends  [4]int
	slots [4]int
	buf   []byte
}

var takeReqs = sync.Pool{New: func() any { return new(takeReq) }}

// release returns r to the pool, keeping nothing of its take alive.
func (r *takeReq) release() {
	r.call.Reset()
	clear(r.keys[:])
	if cap(r.buf) > 4096 {
		r.buf = nil
	}
	takeReqs.Put(r)
}

// slotsOf returns the hash slot of each key, in r's room when it has
// enough: a take over several slots computes each once.
func (r *takeReq) slotsOf(keys []string) []int {
	slots := r.slots[:0]
	if len(keys) > len(r.slots) {
		slots = make([]int, 0, len(keys))
	}
	for _, k := range keys {
		slots = append(slots, redisscript.Slot(k))
	}
	return slots
}

// buildKeys returns the keys of buckets and, as one string that the keys
// are parts of, the keys joined by NUL bytes (joinKeys).
func (r *takeReq) buildKeys(k *redisscript.Keys, buckets []core.Bucket) ([]string, string) {
	n := len(buckets)
	keys, ends := r.keys[:0], r.ends[:0]
	if n > len(r.keys) {
		keys, ends = make([]string, 0, n), make([]int, 0, n)
	}
	buf := r.buf[:0]
	for i := range buckets {
		if i > 0 {
			buf = append(buf, 0)
		}
		buf = k.Append(buf, buckets[i].Rule, buckets[i].Key)
		ends = append(ends, len(buf))
	}
	r.buf = buf
	joined := string(buf)
	start := 0
	for _, end := range ends {
		keys = append(keys, joined[start:end])
		start = end + 1
	}
	return keys, joined
}

// takeSlot decides a take whose buckets lie in one hash slot, locally when
// it can, and reports whether it called Redis. joined is joinKeys(keys); c
// is the call to use.
func (s *Store) takeSlot(ctx context.Context, now int64, slot int, keys []string, joined string, t *core.Take, c *redisscript.Call) (bool, error) {
	var sent time.Time
	switch {
	case s.denials != nil:
		sent = s.localNow(t)
		if s.denials.answer(joined, t, sent) {
			s.n.local.Add(1)
			return false, nil
		}
	case s.local != nil:
		done, err := s.denyLocally(ctx, now, keys, t)
		if err != nil || done {
			return err != nil, err
		}
	}
	s.n.remote.Add(1)
	err := s.takeOne(ctx, now, slot, keys, t, c)
	if err == nil && s.denials != nil {
		s.denials.record(joined, t, sent, s.localNow(t))
	}
	return true, err
}

// settle tells dm's breaker how an admitted call went: nothing when the
// caller gave up (a probe hands its turn on) or when Redis was not called
// after all, else its success or failure. A failure also asks for a fresh
// slot map: it may be a failover.
func (s *Store) settle(ctx context.Context, dm *domain, probe, remote bool, err error) {
	if err != nil && callerEnded(ctx) || !remote {
		if probe {
			dm.br.Abandon()
		}
		return
	}
	dm.br.Record(probe, err)
	if err != nil {
		now := time.Now().UnixNano()
		s.failedAt.Store(now)
		dm.failedAt.Store(now)
		s.domains.failed()
	}
}

// callerEnded reports whether the caller's ctx is done or past its
// deadline: its failures say nothing about Redis.
func callerEnded(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// ctxErr makes an error that comes with the end of the caller's context say
// so, whatever the client reported (go-redis turns a deadline into an i/o
// timeout), so that the limiter does not count it as the store failing. A
// deadline can pass before the context's own timer fires (the socket
// deadline does): the deadline is checked too.
func ctxErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cerr := ctx.Err()
	if cerr == nil {
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			cerr = context.DeadlineExceeded
		}
	}
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w: %w", cerr, err)
}

// localNow is the time remembered denials are measured with: the take's
// explicit time or the client clock when set, else the monotonic clock.
func (s *Store) localNow(t *core.Take) time.Time {
	switch {
	case !t.Now.IsZero():
		return t.Now
	case s.clock != nil:
		return s.clock.Now()
	}
	return time.Now()
}

// slot returns the index of key's slot in per-slot tables.
func (s *Store) slot(key string) int {
	if !s.cluster {
		return 0
	}
	return redisscript.Slot(key)
}

// takeOne decides a take whose buckets lie in one hash slot, through c: in
// a batch, or alone without batching.
func (s *Store) takeOne(ctx context.Context, now int64, slot int, keys []string, t *core.Take, c *redisscript.Call) error {
	var sent time.Time
	if s.local != nil {
		sent = time.Now()
	}
	c.Cost, c.Buckets, c.Keys, c.States = t.Cost, t.Buckets, keys, t.States
	var err error
	if s.batchers != nil {
		t.At, err = s.batchers.For(slot).Do(ctx, now, c)
	} else {
		t.At, err = s.direct(ctx, now, c)
	}
	if s.local != nil {
		recv := time.Now()
		if err != nil {
			// The script may have run and taken: what this instance knew
			// of these buckets may be out of date (never too low).
			s.local.unknown(keys, sent, recv)
		} else {
			if now == redisscript.ServerClock {
				s.local.setClock(slot, t.At, sent, recv)
			}
			s.local.record(keys, t, sent, recv)
		}
	}
	return err
}

// direct sends one call alone.
func (s *Store) direct(ctx context.Context, now int64, c *redisscript.Call) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var b redisscript.Builder
	b.SetMinTTL(s.minTTL)
	b.Reset(now, redisscript.ModeTake)
	b.Add(c)
	reply, _, err := s.send(ctx, b.Keys, b.Args(), 0)
	if err != nil {
		return time.Time{}, err
	}
	return redisscript.Decode(reply, []*redisscript.Call{c})
}

// single is one script call as Client.Eval takes it, pooled: a call costs
// a round trip, but its bookkeeping need not allocate.
type single struct {
	eval  Eval
	evals [1]*Eval
}

var singles = sync.Pool{New: func() any {
	s := new(single)
	s.evals[0] = &s.eval
	return s
}}

// send runs one script call and returns the reply's binary string and its
// undo values (for undo buckets; 0: none). It is the Batchers' Sender.
func (s *Store) send(ctx context.Context, keys []string, args []any, undo int) (string, []string, error) {
	one := singles.Get().(*single)
	defer singles.Put(one)
	e := &one.eval
	*e = Eval{Keys: keys, Args: args}
	if s.pipes {
		s.domains.of(redisscript.Slot(keys[0])).pipe.do(s, ctx, e)
	} else {
		s.run(ctx, one.evals[:])
	}
	reply, vundo, err := e.Reply, e.Undo, check(e, undo)
	*e = Eval{} // keep nothing of the call alive in the pool
	if err != nil {
		return "", nil, err
	}
	return reply, vundo, nil
}

// run sends evals in one round trip, then again in full, in a second one,
// those whose node lacked the script (NOSCRIPT: a restart, SCRIPT FLUSH or
// failover). A script that is still missing is not sent a third time.
func (s *Store) run(ctx context.Context, evals []*Eval) {
	s.eval(ctx, evals, false)
	var again []*Eval
	for _, e := range evals {
		if e.NoScript {
			again = append(again, e)
		}
	}
	if len(again) > 0 {
		s.n.reloads.Add(int64(len(again)))
		s.eval(ctx, again, true)
	}
}

// suspectFor is how long after a failed call the store stops trusting the
// client to honour deadlines: see eval.
const suspectFor = 10 * time.Second

// eval runs Client.Eval. Calls to a node that answered its last call run
// directly. For suspectFor after a call to a node failed, when a client may
// be reconnecting to it and some block while they do whatever their context
// says (rueidis waits for a connection's close for up to a second), the
// calls to that node run in a goroutine of their own, on copies, and are
// given up at ctx's end: they then fail with ctx's error, and the
// goroutine, which no caller waits for, ends with the client's own
// timeouts. One goroutine per node, so that a healthy node's answer is kept
// when another node's call hangs (its tokens may need giving back), and the
// calls to one node stay in one round trip, in order.
func (s *Store) eval(ctx context.Context, evals []*Eval, full bool) {
	if !recent(s.failedAt.Load()) {
		s.client.Eval(ctx, evals, full) // the common case: no node failed lately
		return
	}
	type guard struct {
		idx    []int
		copies []*Eval
		done   chan struct{}
	}
	var (
		direct []*Eval
		guards []*guard
		byNode = map[*domain]*guard{}
	)
	for i, e := range evals {
		var dm *domain
		if len(e.Keys) > 0 {
			dm = s.domains.of(redisscript.Slot(e.Keys[0]))
		}
		if dm != nil && !recent(dm.failedAt.Load()) {
			direct = append(direct, e)
			continue
		}
		g := byNode[dm]
		if g == nil {
			g = &guard{done: make(chan struct{})}
			byNode[dm] = g
			guards = append(guards, g)
		}
		g.idx = append(g.idx, i)
		g.copies = append(g.copies, &Eval{Keys: slices.Clone(e.Keys), Args: slices.Clone(e.Args)})
	}
	for _, g := range guards {
		go func() {
			defer close(g.done)
			s.client.Eval(ctx, g.copies, full)
		}()
	}
	if len(direct) > 0 {
		s.client.Eval(ctx, direct, full)
	}
	for _, g := range guards {
		answered := false
		select {
		case <-g.done:
			answered = true
		case <-ctx.Done():
			select {
			case <-g.done:
				answered = true
			default:
			}
		}
		for j, i := range g.idx {
			e := evals[i]
			if !answered {
				e.Reply, e.Undo, e.NoScript = "", nil, false
				e.Err = fmt.Errorf("ratelimit: redis: the client did not return within the bound: %w", ctx.Err())
				continue
			}
			keys, args := e.Keys, e.Args
			*e = *g.copies[j]
			e.Keys, e.Args = keys, args
		}
	}
}

// recent reports whether the failure at Unix ns at (0: none) lies within
// suspectFor.
func recent(at int64) bool {
	return at != 0 && time.Since(time.Unix(0, at)) <= suspectFor
}

// check returns the error of e's reply: the client's, a malformed reply,
// or undo values other than what a take with undo on buckets buckets
// returns (0: a reply without undo values): two strings per record of the
// reply, at most two per bucket (runs answered at once have fewer records;
// Builder.DecodeUndo checks the count against the reply).
func check(e *Eval, buckets int) error {
	switch {
	case e.Err != nil && errors.Is(e.Err, redisscript.ErrReply):
		return e.Err
	case e.Err != nil:
		return fmt.Errorf("ratelimit: redis: %w", e.Err)
	case buckets == 0 && e.Undo != nil:
		return fmt.Errorf("%w: unexpected nested array", redisscript.ErrReply)
	case buckets > 0 && e.Undo == nil:
		return fmt.Errorf("%w: no undo values in a take with undo", redisscript.ErrReply)
	case len(e.Undo) > 2*buckets || len(e.Undo)%2 != 0:
		return fmt.Errorf("%w: %d undo values for %d buckets", redisscript.ErrReply, len(e.Undo), buckets)
	}
	return nil
}
