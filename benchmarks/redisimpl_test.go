package benchmarks

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/throttled/throttled/v2"
	throttledredis "github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/bucketry/ratelimit/adapters/goredis"
	rlrueidis "github.com/bucketry/ratelimit/adapters/rueidis"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
)

// goRedisPoolSize is the connection pool of every go-redis client here. The
// default (10 per CPU, 20 on 2 CPUs) would make 64 goroutines queue for
// connections; each go-redis based implementation, ours and the peers',
// gets the same larger pool.
const goRedisPoolSize = 128

// sent counts the commands an implementation's clients send to Redis, as
// its code asks for them: a script call is one command, a pipeline of n is
// n, a read served from rueidis's client-side cache is none. Redis's own
// INFO commandstats cannot tell these apart from the commands a script runs
// inside Redis, which it counts too.
type sent struct{ atomic.Int64 }

func newGoRedis(tb testing.TB, addr string, n *sent) *redis.Client {
	c := redis.NewClient(&redis.Options{ContextTimeoutEnabled: true, Addr: addr, PoolSize: goRedisPoolSize})
	c.AddHook(goRedisCounter{n})
	tb.Cleanup(func() { c.Close() })
	return c
}

// goRedisCounter is a go-redis hook that counts commands.
type goRedisCounter struct{ n *sent }

func (h goRedisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h goRedisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h goRedisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// newRueidis returns a rueidis client with its defaults (client-side
// caching on, concurrent calls pipelined), counting commands into n.
func newRueidis(tb testing.TB, addr string, n *sent) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		tb.Fatalf("rueidis.NewClient: %v", err)
	}
	tb.Cleanup(c.Close)
	return rueidisCounter{Client: c, n: n}
}

// rueidisCounter is a rueidis client that counts the commands it sends.
type rueidisCounter struct {
	rueidis.Client
	n *sent
}

func (c rueidisCounter) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c rueidisCounter) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(int64(len(multi)))
	return c.Client.DoMulti(ctx, multi...)
}

func (c rueidisCounter) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	r := c.Client.DoCache(ctx, cmd, ttl)
	if !r.IsCacheHit() {
		c.n.Add(1)
	}
	return r
}

func (c rueidisCounter) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	rs := c.Client.DoMultiCache(ctx, multi...)
	for _, r := range rs {
		if !r.IsCacheHit() {
			c.n.Add(1)
		}
	}
	return rs
}

// redisBuilder builds an implementation on the Redis server at addr whose
// clients count their commands into n. deny tells the ceilings, which
// decide nothing, what to answer.
type redisBuilder struct {
	name  string
	build func(tb testing.TB, addr string, n *sent, q quota, tiers int, deny bool) impl
}

// redisBuilders are the Redis implementations: ours, the peers, then the
// ceilings.
var redisBuilders = []redisBuilder{
	{"ours_goredis", func(tb testing.TB, addr string, n *sent, q quota, tiers int, _ bool) impl {
		// As the package documentation recommends for a service that sees
		// abusive clients: local denials on.
		st, err := goredis.New(newGoRedis(tb, addr, n), goredis.WithLocalDenials())
		if err != nil {
			tb.Fatal(err)
		}
		o := newOurs(tb, q, tiers, core.WithStore(st))
		o.stats = func() (int64, int64) {
			s := st.Stats()
			return s.Local, s.Local + s.Remote
		}
		return o
	}},
	{"ours_rueidis", func(tb testing.TB, addr string, n *sent, q quota, tiers int, _ bool) impl {
		st, err := rlrueidis.New(newRueidis(tb, addr, n), rlrueidis.WithLocalDenials())
		if err != nil {
			tb.Fatal(err)
		}
		o := newOurs(tb, q, tiers, core.WithStore(st))
		o.stats = func() (int64, int64) {
			s := st.Stats()
			return s.Local, s.Local + s.Remote + s.Fetched
		}
		return o
	}},
	{"redis_rate", func(tb testing.TB, addr string, n *sent, q quota, tiers int, _ bool) impl {
		return &redisRate{l: redis_rate.NewLimiter(newGoRedis(tb, addr, n)), limit: redisRateLimit(q), tiers: tiers}
	}},
	{"redis_rate_autopipeline", func(tb testing.TB, addr string, n *sent, q quota, tiers int, _ bool) impl {
		// go-redis's AutoPipeliner (EXPERIMENTAL in go-redis v9.23): the
		// same commands, batched across concurrent callers.
		ap, err := newGoRedis(tb, addr, n).AutoPipeline()
		if err != nil {
			tb.Fatalf("AutoPipeline: %v", err)
		}
		tb.Cleanup(func() { ap.Close() })
		return &redisRate{l: redis_rate.NewLimiter(ap), limit: redisRateLimit(q), tiers: tiers}
	}},
	{"ulule_redis", func(tb testing.TB, addr string, n *sent, q quota, tiers int, _ bool) impl {
		// As the README's example: NewStoreWithOptions with a prefix.
		st, err := ulredis.NewStoreWithOptions(newGoRedis(tb, addr, n), ulule.StoreOptions{Prefix: "ulule", MaxRetry: 3})
		if err != nil {
			tb.Fatal(err)
		}
		return &ululeImpl{l: ulule.New(st, ulule.Rate{Period: q.period, Limit: q.n}), tiers: tiers}
	}},
	{"throttled_goredis", func(tb testing.TB, addr string, n *sent, q quota, tiers int, _ bool) impl {
		st, err := throttledredis.NewCtx(newGoRedis(tb, addr, n), "throttled:")
		if err != nil {
			tb.Fatal(err)
		}
		rl, err := throttled.NewGCRARateLimiterCtx(st, throttledQuota(q))
		if err != nil {
			tb.Fatal(err)
		}
		return &throttledImpl{rl: rl, tiers: tiers}
	}},
	{"ceiling_evalsha", newCeilingEvalsha},
	{"ceiling_ping", func(tb testing.TB, addr string, n *sent, _ quota, _ int, deny bool) impl {
		return &ceilingPing{c: newRueidis(tb, addr, n), answer: !deny}
	}},
}

// redisRate is github.com/go-redis/redis_rate/v10 (GCRA in a script) on a
// go-redis client or AutoPipeliner.
type redisRate struct {
	l     *redis_rate.Limiter
	limit redis_rate.Limit
	tiers int
}

func redisRateLimit(q quota) redis_rate.Limit {
	return redis_rate.Limit{Rate: int(q.n), Burst: int(q.n), Period: q.period}
}

func (r *redisRate) allow(ctx context.Context, s *subject) (bool, error) {
	for _, k := range s.keys[:r.tiers] {
		res, err := r.l.Allow(ctx, k, r.limit)
		if err != nil || res.Allowed == 0 {
			return false, err
		}
	}
	return true, nil
}

// ceilingEvalsha sends our decision script through rueidis, one EVALSHA per
// decision with the arguments encoded once before the run: no batching, no
// local denials, no limiter around it. It is the most one script call per
// decision can do on this client and server.
type ceilingEvalsha struct {
	c      rueidis.Client
	script *rueidis.Lua
	calls  sync.Map // *subject -> *ceilingCall, built on first use
	limits []core.Limit
	tiers  int
}

type ceilingCall struct{ keys, args []string }

func newCeilingEvalsha(tb testing.TB, addr string, n *sent, q quota, tiers int, _ bool) impl {
	c := &ceilingEvalsha{c: newRueidis(tb, addr, n), script: rueidis.NewLuaScript(redisscript.Source()), tiers: tiers}
	for range tiers {
		c.limits = append(c.limits, q.coreLimit())
	}
	return c
}

var ceilingKeys = func() *redisscript.Keys {
	k, err := redisscript.NewKeys("ceiling", false, nil)
	if err != nil {
		panic(err)
	}
	return k
}()

func (c *ceilingEvalsha) call(s *subject) *ceilingCall {
	if v, ok := c.calls.Load(s); ok {
		return v.(*ceilingCall)
	}
	ids := []string{s.user, s.endpoint, "*"}
	rules := []string{"per-user", "per-endpoint", "global"}
	call := &redisscript.Call{Cost: 1, States: make([]core.BucketState, c.tiers)}
	for i := range c.tiers {
		call.Buckets = append(call.Buckets, core.Bucket{Rule: rules[i], Key: ids[i], Limit: &c.limits[i]})
		call.Keys = append(call.Keys, ceilingKeys.Key(rules[i], ids[i]))
	}
	var b redisscript.Builder
	b.Reset(redisscript.NowArg(time.Time{}), redisscript.ModeTake)
	b.Add(call)
	cc := &ceilingCall{keys: append([]string(nil), b.Keys...)}
	for _, a := range b.Args {
		cc.args = append(cc.args, fmt.Sprint(a))
	}
	v, _ := c.calls.LoadOrStore(s, cc)
	return v.(*ceilingCall)
}

func (c *ceilingEvalsha) allow(ctx context.Context, s *subject) (bool, error) {
	cc := c.call(s)
	vals, err := c.script.Exec(ctx, c.c, cc.keys, cc.args).AsIntSlice()
	if err != nil {
		return false, err
	}
	if len(vals) != c.tiers*redisscript.FieldsPerBucket+2 {
		return false, fmt.Errorf("ceiling: %d integers in the reply, want %d", len(vals), c.tiers*redisscript.FieldsPerBucket+2)
	}
	for i := range c.tiers {
		if vals[i*redisscript.FieldsPerBucket] != 1 {
			return false, nil
		}
	}
	return true, nil
}

// ceilingPing is one PING per decision through rueidis: the cost of a round
// trip and nothing else. It answers what the scenario expects.
type ceilingPing struct {
	c      rueidis.Client
	answer bool
}

func (p *ceilingPing) allow(ctx context.Context, _ *subject) (bool, error) {
	err := p.c.Do(ctx, p.c.B().Ping().Build()).Error()
	return p.answer && err == nil, err
}
