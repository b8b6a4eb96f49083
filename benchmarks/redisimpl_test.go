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
	"github.com/bucketry/ratelimit/internal/redistest"
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

// redisTarget is where the Redis implementations of a scenario connect:
// one standalone server, or a Cluster through the seed addresses of its
// masters. nodes are the servers whose statistics and data a run reads and
// resets: the server, or the masters.
type redisTarget struct {
	addrs   []string
	cluster bool
	nodes   []*redistest.Server
}

func standaloneTarget(srv *redistest.Server) redisTarget {
	return redisTarget{addrs: []string{srv.Addr}, nodes: []*redistest.Server{srv}}
}

func clusterTarget(c *redistest.ClusterServer) redisTarget {
	return redisTarget{addrs: c.Addrs(), cluster: true, nodes: c.Masters}
}

// newGoRedis returns a go-redis client of tgt, a *redis.Client or a
// *redis.ClusterClient, counting commands into n.
func newGoRedis(tb testing.TB, tgt redisTarget, n *sent) redis.UniversalClient {
	var c redis.UniversalClient
	if tgt.cluster {
		c = redis.NewClusterClient(&redis.ClusterOptions{ContextTimeoutEnabled: true, Addrs: tgt.addrs, PoolSize: goRedisPoolSize})
	} else {
		c = redis.NewClient(&redis.Options{ContextTimeoutEnabled: true, Addr: tgt.addrs[0], PoolSize: goRedisPoolSize})
	}
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

// newRueidis returns a rueidis client of tgt with its defaults (client-side
// caching on, concurrent calls pipelined; a Cluster is recognized from the
// seed addresses), counting commands into n.
func newRueidis(tb testing.TB, tgt redisTarget, n *sent) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: tgt.addrs})
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

// redisBuilder builds an implementation on tgt whose clients count their
// commands into n. deny tells the ceilings, which decide nothing, what to
// answer. standaloneOnly marks an implementation that cannot run on a
// Cluster: the ceilings, whose single multi-key call or bare PING would
// not be the same work there.
type redisBuilder struct {
	name           string
	build          func(tb testing.TB, tgt redisTarget, n *sent, q quota, tiers int, deny bool) impl
	standaloneOnly bool
}

// redisBuilders are the Redis implementations: ours, the peers, then the
// ceilings.
var redisBuilders = []redisBuilder{
	{name: "ours_goredis", build: func(tb testing.TB, tgt redisTarget, n *sent, q quota, tiers int, _ bool) impl {
		// As the package documentation recommends for a service that sees
		// abusive clients: local denials on.
		st, err := goredis.New(newGoRedis(tb, tgt, n), goredis.WithLocalDenials())
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
	{name: "ours_rueidis", build: func(tb testing.TB, tgt redisTarget, n *sent, q quota, tiers int, _ bool) impl {
		st, err := rlrueidis.New(newRueidis(tb, tgt, n), rlrueidis.WithLocalDenials())
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
	{name: "redis_rate", build: func(tb testing.TB, tgt redisTarget, n *sent, q quota, tiers int, _ bool) impl {
		return &redisRate{l: redis_rate.NewLimiter(newGoRedis(tb, tgt, n)), limit: redisRateLimit(q), tiers: tiers}
	}},
	{name: "redis_rate_autopipeline", build: func(tb testing.TB, tgt redisTarget, n *sent, q quota, tiers int, _ bool) impl {
		// go-redis's AutoPipeliner (EXPERIMENTAL in go-redis v9.23): the
		// same commands, batched across concurrent callers.
		c, ok := newGoRedis(tb, tgt, n).(interface {
			AutoPipeline() (*redis.AutoPipeliner, error)
		})
		if !ok {
			tb.Fatal("the go-redis client has no AutoPipeline")
		}
		ap, err := c.AutoPipeline()
		if err != nil {
			tb.Fatalf("AutoPipeline: %v", err)
		}
		tb.Cleanup(func() { ap.Close() })
		return &redisRate{l: redis_rate.NewLimiter(ap), limit: redisRateLimit(q), tiers: tiers}
	}},
	{name: "ulule_redis", build: func(tb testing.TB, tgt redisTarget, n *sent, q quota, tiers int, _ bool) impl {
		// As the README's example: NewStoreWithOptions with a prefix.
		st, err := ulredis.NewStoreWithOptions(newGoRedis(tb, tgt, n), ulule.StoreOptions{Prefix: "ulule", MaxRetry: 3})
		if err != nil {
			tb.Fatal(err)
		}
		return &ululeImpl{l: ulule.New(st, ulule.Rate{Period: q.period, Limit: q.n}), tiers: tiers}
	}},
	{name: "throttled_goredis", build: func(tb testing.TB, tgt redisTarget, n *sent, q quota, tiers int, _ bool) impl {
		st, err := throttledredis.NewCtx(newGoRedis(tb, tgt, n), "throttled:")
		if err != nil {
			tb.Fatal(err)
		}
		rl, err := throttled.NewGCRARateLimiterCtx(st, throttledQuota(q))
		if err != nil {
			tb.Fatal(err)
		}
		return &throttledImpl{rl: rl, tiers: tiers}
	}},
	{name: "ceiling_evalsha", build: newCeilingEvalsha, standaloneOnly: true},
	{name: "ceiling_ping", build: func(tb testing.TB, tgt redisTarget, n *sent, _ quota, _ int, deny bool) impl {
		return &ceilingPing{c: newRueidis(tb, tgt, n), answer: !deny}
	}, standaloneOnly: true},
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

// ceilingCall is the encoded script call of one subject, and the decoded
// requests its replies are read into, one per concurrent caller.
type ceilingCall struct {
	keys, args []string
	decoders   sync.Pool // *redisscript.Call, each added to a Builder as the call was
}

func newCeilingEvalsha(tb testing.TB, tgt redisTarget, n *sent, q quota, tiers int, _ bool) impl {
	c := &ceilingEvalsha{c: newRueidis(tb, tgt, n), script: rueidis.NewLuaScript(redisscript.Source()), tiers: tiers}
	for range tiers {
		// NewLimit fills in the derived fields the script's arguments
		// carry, as a policy does for its rules.
		l, err := core.NewLimit(q.coreLimit())
		if err != nil {
			tb.Fatal(err)
		}
		c.limits = append(c.limits, *l)
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

// request builds the script request of s and adds it to b, which
// encodes it.
func (c *ceilingEvalsha) request(b *redisscript.Builder, s *subject) *redisscript.Call {
	ids := []string{s.user, s.endpoint, "*"} // the identities of the first three tiers
	call := &redisscript.Call{Cost: 1, States: make([]core.BucketState, c.tiers)}
	for i := range c.tiers {
		rule := tierDefs[i].rule
		call.Buckets = append(call.Buckets, core.Bucket{Rule: rule, Key: ids[i], Limit: &c.limits[i]})
		call.Keys = append(call.Keys, ceilingKeys.Key(rule, ids[i]))
	}
	b.Reset(redisscript.NowArg(time.Time{}), redisscript.ModeTake)
	b.Add(call)
	return call
}

func (c *ceilingEvalsha) call(s *subject) *ceilingCall {
	if v, ok := c.calls.Load(s); ok {
		return v.(*ceilingCall)
	}
	var b redisscript.Builder
	c.request(&b, s)
	cc := &ceilingCall{keys: append([]string(nil), b.Keys...)}
	for _, a := range b.Args() {
		cc.args = append(cc.args, fmt.Sprint(a))
	}
	cc.decoders.New = func() any {
		var b redisscript.Builder
		return c.request(&b, s)
	}
	v, _ := c.calls.LoadOrStore(s, cc)
	return v.(*ceilingCall)
}

func (c *ceilingEvalsha) allow(ctx context.Context, s *subject) (bool, error) {
	cc := c.call(s)
	reply, err := c.script.Exec(ctx, c.c, cc.keys, cc.args).ToString()
	if err != nil {
		return false, err
	}
	d := cc.decoders.Get().(*redisscript.Call)
	defer cc.decoders.Put(d)
	if _, err := redisscript.Decode(reply, []*redisscript.Call{d}); err != nil {
		return false, err
	}
	return d.Allowed(), nil
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
