package goredis

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
)

// Store is a core.Store on Redis through go-redis v9; see the package
// documentation for its guarantees. It is safe for concurrent use.
type Store struct {
	client   redis.UniversalClient
	cluster  bool
	keys     *redisscript.Keys
	clock    core.Clock // nil: the Redis server's TIME
	timeout  time.Duration
	minTTL   time.Duration
	denials  *denials              // nil unless WithLocalDenials
	batchers *redisscript.Batchers // nil without batching

	remote  atomic.Int64
	local   atomic.Int64
	reloads atomic.Int64
	refunds atomic.Int64
}

// Option configures a Store.
type Option interface{ apply(*config) }

type config struct {
	redisscript.Settings
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
// one clock; tests use it to control time.
func WithClientClock(clock core.Clock) Option {
	return optionFunc(func(c *config) { c.Clock = clock })
}

// WithTimeout bounds each Take, on top of the caller's context. Zero (the
// default) leaves only the caller's context and the client's own timeouts.
// go-redis honours context deadlines only when the client's options have
// ContextTimeoutEnabled set; New rejects a timeout on a *redis.Client or
// *redis.ClusterClient without it, rather than ignore it.
func WithTimeout(d time.Duration) Option { return optionFunc(func(c *config) { c.Timeout = d }) }

// WithMinTTL keeps every key written for at least d. By default a key lives
// exactly until its bucket is full again, and that is right when decisions
// use the Redis server's clock, which is also the clock Redis expires keys
// by. With WithClientClock the two clocks differ, and a key could expire, in
// Redis's time, while the client's clock says its bucket still owes tokens
// (a clock moved back, a fake clock in tests): a floor prevents that. A
// longer life never changes a decision, since the stored state itself says
// when the bucket is full; it only costs memory.
func WithMinTTL(d time.Duration) Option { return optionFunc(func(c *config) { c.MinTTL = d }) }

// WithLocalDenials lets the store answer a repeated denial without a round
// trip: see the package documentation for when that is provably right.
func WithLocalDenials() Option { return optionFunc(func(c *config) { c.Local = true }) }

// WithoutBatching sends every request in a script call of its own. By
// default, requests for one hash slot that arrive while a call is in flight
// are sent together in the next call (see the package documentation).
func WithoutBatching() Option { return optionFunc(func(c *config) { c.NoBatch = true }) }

// New returns a store on client: a *redis.Client, a failover client
// (Sentinel) or a *redis.ClusterClient. It fails with core.ErrInvalidOption
// for a nil client, an empty prefix, a short secret or a negative timeout.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	cfg := config{Settings: redisscript.DefaultSettings()}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", core.ErrInvalidOption)
	}
	keys, err := cfg.Check()
	if err != nil {
		return nil, err
	}
	if cfg.Timeout > 0 && !contextTimeouts(client) {
		return nil, fmt.Errorf("%w: WithTimeout(%v) needs the client's ContextTimeoutEnabled option, or go-redis ignores it", core.ErrInvalidOption, cfg.Timeout)
	}
	_, cluster := client.(*redis.ClusterClient)
	s := &Store{client: client, cluster: cluster, keys: keys, clock: cfg.Clock, timeout: cfg.Timeout, minTTL: cfg.MinTTL}
	if cfg.Local {
		s.denials = newDenials()
	}
	if !cfg.NoBatch {
		slots := 1
		if cluster {
			slots = 16384
		}
		s.batchers = redisscript.NewBatchers(slots, s.send, s.timeout, s.minTTL)
	}
	return s, nil
}

// contextTimeouts reports whether client honours context deadlines, as far
// as its type tells (other clients are assumed to).
func contextTimeouts(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// Stats counts how the store's decisions were made.
type Stats struct {
	Remote  int64 // takes sent to Redis
	Local   int64 // takes denied from the local denial cache, without a round trip
	Reloads int64 // scripts sent in full after NOSCRIPT
	Refunds int64 // Cluster slot groups given back after another group denied
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{Remote: s.remote.Load(), Local: s.local.Load(), Reloads: s.reloads.Load(), Refunds: s.refunds.Load()}
}

// Reset deletes bucket (rule, id), which is then full, and drops the local
// denials that involve it. It is meant for operators (unblocking a client),
// not for the request path.
func (s *Store) Reset(ctx context.Context, rule, id string) error {
	if err := core.CheckKey(id); err != nil {
		return err
	}
	key := s.keys.Key(rule, id)
	if err := s.client.Del(ctx, key).Err(); err != nil {
		return fmt.Errorf("ratelimit: redis: %w", err)
	}
	if s.denials != nil {
		s.denials.forget(key)
	}
	return nil
}

// Key returns the Redis key of bucket (rule, id), for inspection.
func (s *Store) Key(rule, id string) string { return s.keys.Key(rule, id) }

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
	var sent time.Time
	if s.denials != nil {
		sent = s.localNow(t)
		if s.denials.answer(keys, t, sent) {
			s.local.Add(1)
			return nil
		}
	}
	s.remote.Add(1)
	slot, one := s.oneSlot(keys)
	var err error
	if one {
		c := &redisscript.Call{Cost: t.Cost, Buckets: t.Buckets, Keys: keys, States: t.States}
		if s.batchers != nil {
			t.At, err = s.batchers.For(slot).Do(ctx, now, c)
		} else {
			t.At, err = s.direct(ctx, now, c)
		}
	} else {
		err = s.takeSlots(ctx, now, keys, t)
	}
	if err != nil {
		// The caller's context ended: say so, whatever the client reports
		// (go-redis turns a deadline into an i/o timeout), so that the
		// limiter does not count it as the store failing. The socket
		// deadline can fire before the context's timer: check the deadline
		// too.
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("%w: %w", cerr, err)
		}
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		return err
	}
	if s.denials != nil {
		s.denials.record(keys, t, sent, s.localNow(t))
	}
	return nil
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
// does not have it (NOSCRIPT: a restart, SCRIPT FLUSH or failover).
func (s *Store) send(ctx context.Context, keys []string, args []any) ([]int64, error) {
	cmd := s.client.EvalSha(ctx, redisscript.SHA(), keys, args...)
	if isNoScript(cmd.Err()) {
		s.reloads.Add(1)
		cmd = s.client.Eval(ctx, redisscript.Source(), keys, args...)
	}
	return ints(cmd)
}

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// ints checks a reply: an array of integers, as the script returns.
func ints(cmd *redis.Cmd) ([]int64, error) {
	vals, undo, err := reply(cmd, 0)
	if err == nil && undo != nil {
		err = fmt.Errorf("%w: unexpected nested array", redisscript.ErrReply)
	}
	return vals, err
}

// group is the buckets of one Cluster hash slot.
type group struct {
	idx  []int
	call redisscript.Call
	b    redisscript.Builder
	cmd  *redis.Cmd
	vals []int64
	undo []string // from a ModeTakeUndo reply: before and written, per bucket
	at   time.Time
}

// takeSlots decides a take whose buckets lie in several hash slots: one
// script call per slot, all in one pipelined round trip. If a slot denies
// while others consumed, those are given back in a second round trip. Until
// then the tokens are held, so this can under-admit for a moment; it never
// over-admits.
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
			g = &group{}
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
	err := s.pipeline(ctx, groups)
	all := err == nil
	for _, g := range groups {
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
				back = append(back, g)
			}
		}
		if len(back) > 0 {
			s.refunds.Add(int64(len(back)))
			rerr := s.pipeline(ctx, back)
			for _, g := range back {
				if g.vals != nil {
					if _, derr := redisscript.Decode(g.vals, []*redisscript.Call{&g.call}); derr != nil && rerr == nil {
						rerr = derr
					}
				}
			}
			if err == nil {
				err = rerr
			}
		}
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

// pipeline sends every group's call in one round trip and reads the
// replies into g.vals; a group whose node lacks the script is sent again in
// full. It returns the first error.
func (s *Store) pipeline(ctx context.Context, groups []*group) error {
	pipe := s.client.Pipeline()
	for _, g := range groups {
		g.cmd = pipe.EvalSha(ctx, redisscript.SHA(), g.b.Keys, g.b.Args...)
	}
	_, _ = pipe.Exec(ctx) // each command's error is read below
	var again []*group
	for _, g := range groups {
		if isNoScript(g.cmd.Err()) {
			again = append(again, g)
		}
	}
	if len(again) > 0 {
		s.reloads.Add(int64(len(again)))
		pipe := s.client.Pipeline()
		for _, g := range again {
			g.cmd = pipe.Eval(ctx, redisscript.Source(), g.b.Keys, g.b.Args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	var first error
	for _, g := range groups {
		vals, undo, err := reply(g.cmd, len(g.call.Buckets))
		if err == nil && g.b.Args[1] == redisscript.ModeTakeUndo && undo == nil {
			err = fmt.Errorf("%w: no undo values in a take with undo", redisscript.ErrReply)
		}
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		g.vals, g.undo = vals, undo
	}
	return first
}

// reply checks the reply of a take with undo (an array of integers then an
// array of 2*buckets strings) or of a refund (integers only).
func reply(cmd *redis.Cmd, buckets int) ([]int64, []string, error) {
	v, err := cmd.Result()
	if err == redis.Nil {
		return nil, nil, fmt.Errorf("%w: %w", redisscript.ErrReply, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("ratelimit: redis: %w", err)
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %T, want an array", redisscript.ErrReply, v)
	}
	var undo []string
	if n := len(arr); n > 0 {
		if u, ok := arr[n-1].([]any); ok {
			if len(u) != 2*buckets {
				return nil, nil, fmt.Errorf("%w: %d undo values for %d buckets", redisscript.ErrReply, len(u), buckets)
			}
			undo = make([]string, len(u))
			for i, x := range u {
				if undo[i], ok = x.(string); !ok {
					return nil, nil, fmt.Errorf("%w: undo value %d is %T, want a string", redisscript.ErrReply, i, x)
				}
			}
			arr = arr[:n-1]
		}
	}
	vals := make([]int64, len(arr))
	for i, x := range arr {
		n, ok := x.(int64)
		if !ok {
			return nil, nil, fmt.Errorf("%w: element %d is %T, want an integer", redisscript.ErrReply, i, x)
		}
		vals[i] = n
	}
	return vals, undo, nil
}

// localNow is the time local denials are measured with: the take's explicit
// time or the client clock when set, else the monotonic clock.
func (s *Store) localNow(t *core.Take) time.Time {
	switch {
	case !t.Now.IsZero():
		return t.Now
	case s.clock != nil:
		return s.clock.Now()
	}
	return time.Now()
}
