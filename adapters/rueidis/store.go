package rueidis

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
)

// Store is a core.Store on Redis through rueidis: standalone, Sentinel and
// Cluster. It is safe for concurrent use.
type Store struct {
	client   rueidis.Client
	cluster  bool
	keys     *redisscript.Keys
	clock    core.Clock // nil: the Redis server's TIME
	timeout  time.Duration
	minTTL   time.Duration
	local    *local                // nil unless WithLocalDenials
	batchers *redisscript.Batchers // nil without batching

	remote  atomic.Int64
	denied  atomic.Int64 // local denials from cache hits
	fetched atomic.Int64
	hits    atomic.Int64
	misses  atomic.Int64
	reloads atomic.Int64
	refunds atomic.Int64
}

// Option configures a Store.
type Option interface{ apply(*config) }

type config struct {
	redisscript.Settings
	maxKeys int
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithPrefix sets the prefix of every key. The default is "ratelimit". Use a
// hash tag such as "{ratelimit}" to keep every bucket in one Cluster slot,
// which makes multi-tier checks a single script call at the price of one
// hot slot.
func WithPrefix(p string) Option { return optionFunc(func(c *config) { c.Prefix = p }) }

// WithHashedIdentities replaces every identity in a key by
// HMAC-SHA-256(secret, identity), so raw user ids and addresses never reach
// Redis. secret must be at least 16 bytes and the same on every instance.
func WithHashedIdentities(secret []byte) Option {
	return optionFunc(func(c *config) { c.HashAll, c.Secret = true, secret })
}

// WithClientClock makes the store decide at clock's time instead of the
// Redis server's TIME. Every instance sharing the buckets must then share
// one clock; tests use it to control time. A nil clock keeps the server's.
func WithClientClock(clock core.Clock) Option {
	return optionFunc(func(c *config) { c.Clock = clock })
}

// WithTimeout bounds each Take, on top of the caller's context. Zero (the
// default) leaves only the caller's context and the client's own timeouts.
func WithTimeout(d time.Duration) Option { return optionFunc(func(c *config) { c.Timeout = d }) }

// WithMinTTL keeps every key written for at least d (0, the default: each
// key lives exactly until its bucket is full again, which is right when
// decisions use the Redis server's clock, the clock Redis expires keys by).
// With WithClientClock the two clocks differ, and a key could expire, in
// Redis's time, while the client's clock says its bucket still owes tokens
// (a clock moved back, a fake clock in tests): a floor prevents that. A
// longer life never changes a decision, since the stored state itself says
// when the bucket is full; it only costs memory. d must be between 0 and
// core.MaxSpan.
func WithMinTTL(d time.Duration) Option { return optionFunc(func(c *config) { c.MinTTL = d }) }

// WithLocalDenials lets the store deny a request without running the script
// when bucket state read through rueidis client-side caching proves that
// Redis would deny it: see the package documentation. The client must have
// client-side caching on (the rueidis default; not with DisableCache or
// RESP2), otherwise every such read is a round trip, counted in
// Stats.CacheMisses.
func WithLocalDenials() Option { return optionFunc(func(c *config) { c.Local = true }) }

// WithLocalDenialKeys bounds how many bucket keys the local denial cache
// tracks (100,000 by default; each costs about 250 bytes plus the key). When
// it is full, the store forgets them all and learns again from Redis's
// answers. It implies nothing without WithLocalDenials; n must be >= 1.
func WithLocalDenialKeys(n int) Option { return optionFunc(func(c *config) { c.maxKeys = n }) }

// WithoutBatching sends every request in a script call of its own. By
// default, requests for one hash slot that arrive while a call is in flight
// are sent together in the next call (see the package documentation).
func WithoutBatching() Option { return optionFunc(func(c *config) { c.NoBatch = true }) }

// defaultLocalKeys bounds the local denial cache by default.
const defaultLocalKeys = 100_000

// New returns a store on client, a rueidis client for a standalone server,
// a Sentinel master set or a Cluster (Client.Mode tells which). It fails
// with core.ErrInvalidOption for a nil client, an empty prefix, a short
// secret, a negative timeout, a minimum TTL out of range or a local denial
// bound below 1.
func New(client rueidis.Client, opts ...Option) (*Store, error) {
	cfg := config{Settings: redisscript.DefaultSettings(), maxKeys: defaultLocalKeys}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if client == nil {
		return nil, fmt.Errorf("%w: nil rueidis client", core.ErrInvalidOption)
	}
	keys, err := cfg.Check()
	if err != nil {
		return nil, err
	}
	if cfg.maxKeys < 1 {
		return nil, fmt.Errorf("%w: local denial keys must be >= 1, got %d", core.ErrInvalidOption, cfg.maxKeys)
	}
	cluster := client.Mode() == rueidis.ClientModeCluster
	s := &Store{client: client, cluster: cluster, keys: keys, clock: cfg.Clock, timeout: cfg.Timeout, minTTL: cfg.MinTTL}
	slots := 1
	if cluster {
		slots = 16384
	}
	if cfg.Local {
		s.local = newLocal(slots, cfg.maxKeys)
	}
	if !cfg.NoBatch {
		s.batchers = redisscript.NewBatchers(slots, s.send, s.timeout, s.minTTL)
	}
	return s, nil
}

// Stats counts how the store's decisions were made. Every Take that passes
// validation counts once in Remote, Local or Fetched.
type Stats struct {
	Remote  int64 // takes decided by the script in Redis
	Local   int64 // takes denied from client-side cached state, without a round trip
	Fetched int64 // takes denied from bucket state read from Redis (a cache miss): one GET, no script
	// CacheHits and CacheMisses count the bucket states the local denial
	// path read: served from the client-side cache, or fetched from Redis.
	CacheHits   int64
	CacheMisses int64
	Reloads     int64 // scripts sent in full after NOSCRIPT
	Refunds     int64 // Cluster slot groups given back after another group denied
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Remote:      s.remote.Load(),
		Local:       s.denied.Load(),
		Fetched:     s.fetched.Load(),
		CacheHits:   s.hits.Load(),
		CacheMisses: s.misses.Load(),
		Reloads:     s.reloads.Load(),
		Refunds:     s.refunds.Load(),
	}
}

// Key returns the Redis key of bucket (rule, id), for inspection.
func (s *Store) Key(rule, id string) string { return s.keys.Key(rule, id) }

// Reset deletes bucket (rule, id), which is then full. Redis tells every
// instance's client-side cache; this instance also stops trusting what it
// knew of the bucket. It is meant for operators (unblocking a client), not
// for the request path.
func (s *Store) Reset(ctx context.Context, rule, id string) error {
	if err := core.CheckKey(id); err != nil {
		return err
	}
	key := s.keys.Key(rule, id)
	sent := time.Now()
	err := s.client.Do(ctx, s.client.B().Del().Key(key).Build()).Error()
	if s.local != nil {
		// A delete makes the bucket full: tokens rise, which a copy cached
		// before it does not show.
		if err != nil {
			s.local.forget([]string{key}, sent, time.Now())
		} else {
			s.local.observe(key, obs{lo: 0, hi: 0, sent: sent, recv: time.Now()}, true, 0, false)
		}
	}
	if err != nil {
		return fmt.Errorf("ratelimit: redis: %w", err)
	}
	return nil
}

// Take implements core.Store.
func (s *Store) Take(ctx context.Context, t *core.Take) error {
	if err := core.CheckTake(t); err != nil {
		return err
	}
	t.At = time.Time{}
	now := redisscript.NowArg(t.Now)
	if now == "" && s.clock != nil {
		now = redisscript.NowArg(s.clock.Now())
	}
	keys := make([]string, len(t.Buckets))
	for i := range t.Buckets {
		keys[i] = s.keys.Key(t.Buckets[i].Rule, t.Buckets[i].Key)
	}
	if s.local != nil {
		done, err := s.denyLocally(ctx, now, keys, t)
		if err != nil || done {
			return ctxErr(ctx, err)
		}
	}
	s.remote.Add(1)
	slot, one := s.oneSlot(keys)
	if !one {
		return ctxErr(ctx, s.takeSlots(ctx, now, keys, t))
	}
	sent := time.Now()
	c := &redisscript.Call{Cost: t.Cost, Buckets: t.Buckets, Keys: keys, States: t.States}
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
			if now == "" {
				s.local.setClock(slot, t.At, sent, recv)
			}
			s.local.record(keys, t, sent, recv)
		}
	}
	return ctxErr(ctx, err)
}

// ctxErr makes an error that comes with the end of the caller's context say
// so, whatever the client reported, so that the limiter does not count it
// as the store failing. A deadline can pass before the context's own timer
// fires: the deadline is checked too.
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

// oneSlot reports whether every key is in one hash slot (always outside
// Cluster), and which.
func (s *Store) oneSlot(keys []string) (int, bool) {
	if !s.cluster {
		return 0, true
	}
	slot := redisscript.Slot(keys[0])
	for _, k := range keys[1:] {
		if redisscript.Slot(k) != slot {
			return 0, false
		}
	}
	return slot, true
}

// slot returns the index of key's slot in per-slot tables.
func (s *Store) slot(key string) int {
	if !s.cluster {
		return 0
	}
	return redisscript.Slot(key)
}

// direct sends one call alone.
func (s *Store) direct(ctx context.Context, now string, c *redisscript.Call) (time.Time, error) {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	var b redisscript.Builder
	b.SetMinTTL(s.minTTL)
	b.Reset(now, redisscript.ModeTake)
	b.Add(c)
	vals, err := s.send(ctx, b.Keys, b.Args)
	if err != nil {
		return time.Time{}, err
	}
	return redisscript.Decode(vals, []*redisscript.Call{c})
}

// send runs one script call, sending the script in full if the server
// does not have it (NOSCRIPT: a restart, SCRIPT FLUSH or failover). It is
// the Batcher's Sender.
func (s *Store) send(ctx context.Context, keys []string, args []any) ([]int64, error) {
	cmd, err := s.evalsha(keys, args)
	if err != nil {
		return nil, err
	}
	res := s.client.Do(ctx, cmd)
	if isNoScript(res.Error()) {
		s.reloads.Add(1)
		if cmd, err = s.eval(keys, args); err != nil {
			return nil, err
		}
		res = s.client.Do(ctx, cmd)
	}
	return ints(res)
}

// evalsha builds EVALSHA sha numkeys keys... args...; eval builds EVAL with
// the full source. In Cluster, every key must be in one slot (rueidis
// checks); callers group keys by slot.
func (s *Store) evalsha(keys []string, args []any) (rueidis.Completed, error) {
	b := s.client.B().Evalsha().Sha1(redisscript.SHA()).Numkeys(int64(len(keys))).Key(keys...).Arg()
	return withArgs(b, args)
}

func (s *Store) eval(keys []string, args []any) (rueidis.Completed, error) {
	b := s.client.B().Eval().Script(redisscript.Source()).Numkeys(int64(len(keys))).Key(keys...).Arg()
	return withArgs(b, args)
}

// withArgs appends args, strings in interfaces as redisscript.Builder makes
// them, one by one: rueidis copies each into its command, so no []string is
// built.
func withArgs[B interface {
	Arg(...string) B
	Build() rueidis.Completed
}](b B, args []any) (rueidis.Completed, error) {
	for i, a := range args {
		str, ok := a.(string)
		if !ok {
			return rueidis.Completed{}, fmt.Errorf("ratelimit: script argument %d is %T, want a string", i, a)
		}
		b = b.Arg(str)
	}
	return b.Build(), nil
}

func isNoScript(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && re.IsNoScript()
}

// ints checks a reply: an array of integers, as the script returns. Any
// other shape is an error wrapping redisscript.ErrReply.
func ints(res rueidis.RedisResult) ([]int64, error) {
	vals, _, err := reply(res, 0)
	return vals, err
}

// reply checks a script reply: integers, then, for a take with undo
// (buckets > 0), an array of two strings per bucket, returned as undo. Any
// other shape is an error wrapping redisscript.ErrReply.
func reply(res rueidis.RedisResult, buckets int) (vals []int64, undo []string, err error) {
	msg, err := res.ToMessage()
	if err != nil {
		if rueidis.IsRedisNil(err) {
			return nil, nil, fmt.Errorf("%w: nil, want an array", redisscript.ErrReply)
		}
		return nil, nil, fmt.Errorf("ratelimit: redis: %w", err)
	}
	arr, err := msg.ToArray()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", redisscript.ErrReply, err)
	}
	if buckets > 0 {
		n := len(arr)
		if n == 0 || !arr[n-1].IsArray() {
			return nil, nil, fmt.Errorf("%w: no undo values in a take with undo", redisscript.ErrReply)
		}
		u, _ := arr[n-1].ToArray()
		if len(u) != 2*buckets {
			return nil, nil, fmt.Errorf("%w: %d undo values for %d buckets", redisscript.ErrReply, len(u), buckets)
		}
		undo = make([]string, len(u))
		for i := range u {
			if !u[i].IsString() {
				return nil, nil, fmt.Errorf("%w: undo value %d is not a string", redisscript.ErrReply, i)
			}
			undo[i], _ = u[i].ToString()
		}
		arr = arr[:n-1]
	}
	vals = make([]int64, len(arr))
	for i := range arr {
		if !arr[i].IsInt64() {
			return nil, nil, fmt.Errorf("%w: element %d is not an integer", redisscript.ErrReply, i)
		}
		if vals[i], err = arr[i].ToInt64(); err != nil {
			return nil, nil, fmt.Errorf("%w: element %d: %v", redisscript.ErrReply, i, err)
		}
	}
	return vals, undo, nil
}

// group is the buckets of one Cluster hash slot.
type group struct {
	slot int
	idx  []int
	call redisscript.Call
	b    redisscript.Builder
	res  rueidis.RedisResult
	vals []int64
	undo []string // from the take (ModeTakeUndo): before and written, per bucket
	at   time.Time
	// the round trip the group's state was last read in
	sent, recv time.Time
	refunded   bool
}

// takeSlots decides a take whose buckets lie in several hash slots: one
// script call per slot, all in one round trip (DoMulti). If a slot denies
// or fails while others consumed, those are given back in a second round
// trip: each bucket that still holds what the take wrote gets its earlier
// value back exactly, others the cost. Until then the tokens are held, so
// this can under-admit for a moment; it never over-admits.
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
			s.refunds.Add(int64(len(back)))
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

// multi sends every group's call in one round trip and reads the replies
// into g.vals; a group whose node lacks the script is sent again in full.
// It returns the first error.
func (s *Store) multi(ctx context.Context, groups []*group) error {
	cmds := make([]rueidis.Completed, 0, len(groups))
	var first error
	for _, g := range groups {
		cmd, err := s.evalsha(g.b.Keys, g.b.Args)
		if err != nil {
			return err
		}
		cmds = append(cmds, cmd)
	}
	for i, res := range s.client.DoMulti(ctx, cmds...) {
		groups[i].res = res
	}
	var again []*group
	for _, g := range groups {
		if isNoScript(g.res.Error()) {
			again = append(again, g)
		}
	}
	if len(again) > 0 {
		s.reloads.Add(int64(len(again)))
		cmds = cmds[:0]
		for _, g := range again {
			cmd, err := s.eval(g.b.Keys, g.b.Args)
			if err != nil {
				return err
			}
			cmds = append(cmds, cmd)
		}
		for i, res := range s.client.DoMulti(ctx, cmds...) {
			again[i].res = res
		}
	}
	for _, g := range groups {
		undo := 0
		if g.b.Args[1] == redisscript.ModeTakeUndo {
			undo = len(g.call.Buckets)
		}
		vals, u, err := reply(g.res, undo)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		g.vals, g.undo = vals, u
	}
	return first
}
