// Package limits is what the example servers share: the policy, the key
// functions that read the user and plan, and the flags that choose the
// store (-redis, -redis-cluster, -redis-client, -redis-timeout), the rules
// (-rules), metrics (-metrics) and the load tests' baseline (-no-limit).
// Each example's main.go wires these into its framework; only that wiring
// differs between frameworks.
package limits

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/bucketry/ratelimit/adapters/goredis"
	promlimit "github.com/bucketry/ratelimit/adapters/prometheus"
	rlrueidis "github.com/bucketry/ratelimit/adapters/rueidis"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/keyfuncs"
	"github.com/bucketry/ratelimit/rules"
)

// SearchRoutes are the routes of the search tier, which makes search
// stricter than the other routes: the HTTP route and the gRPC method.
var SearchRoutes = []string{"GET /search", SearchMethod}

// SearchMethod is the gRPC example's search method.
const SearchMethod = "/example.Items/Search"

// Rules returns the tiers of every example. The numbers are small so that a
// few requests with curl reach each of them:
//
//	per-user  free plan   5 at once, then 1 every 6s (10 a minute)
//	per-user  pro plan    50 at once, then 10 a second
//	search    free plan   2 searches at once, then 1 every 10s (on top of per-user)
//	search    pro plan    10 searches at once, then 1 a second
//	global    everyone    100 at once, then 100 a second
//
// A request must pass every tier that applies to it, all decided at once:
// a search the search tier denies takes nothing from per-user. Anonymous
// requests (no user) have no per-user or search tier: only the global one
// limits them. A request of no plan, or of a plan no rule names, gets the
// free plan's tiers (Plans).
func Rules() []core.Rule {
	return []core.Rule{
		{Name: "per-user", Scope: core.ScopeUser, Plan: "free", Limit: core.TokenBucket(core.PerMinute(10), 5)},
		{Name: "per-user", Scope: core.ScopeUser, Plan: "pro", Limit: core.TokenBucket(core.PerSecond(10), 50)},
		{Name: "search", Scope: core.ScopeUser, Plan: "free", Routes: SearchRoutes, Limit: core.TokenBucket(core.PerMinute(6), 2)},
		{Name: "search", Scope: core.ScopeUser, Plan: "pro", Routes: SearchRoutes, Limit: core.TokenBucket(core.PerSecond(1), 10)},
		{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerSecond(100), 100)},
	}
}

// Plans gives requests of no plan or an unknown one the free plan.
var Plans = core.Plans{Default: "free"}

// NewLimiter returns a limiter with Rules and opts on store, or on a new
// in-memory store when store is nil.
func NewLimiter(store core.Store, opts ...core.Option) (*core.Limiter, error) {
	policy, err := core.NewPlanPolicy(Plans, Rules()...)
	if err != nil {
		return nil, err
	}
	if store != nil {
		opts = append(opts, core.WithStore(store))
	}
	return core.NewLimiter(policy, opts...)
}

// Keys returns the key functions of the examples, which read the same
// fields in every framework (HTTP header fields, or gRPC metadata):
//
//   - user: the X-User field, or else the SHA-256 of the bearer token
//     ("Authorization: Bearer <token>"); ErrNotApplicable for an anonymous
//     request. X-User stands for what an authenticating gateway sets: a
//     client can send any value, so a real service takes the user from its
//     authentication (keyfuncs.FromContext).
//   - plan: the X-Plan field; ErrNotApplicable when absent, and the policy
//     gives the request its default plan, as it does a plan no rule names.
//     Like X-User, a real service reads the plan from its own records, not
//     from the client.
func Keys() (user, plan keyfuncs.Func, err error) {
	userField, err := keyfuncs.Header("X-User")
	if err != nil {
		return nil, nil, err
	}
	planField, err := keyfuncs.Header("X-Plan")
	if err != nil {
		return nil, nil, err
	}
	token, err := keyfuncs.BearerToken()
	if err != nil {
		return nil, nil, err
	}
	user = func(r keyfuncs.Request) (string, error) {
		u, err := userField(r)
		if errors.Is(err, keyfuncs.ErrNotApplicable) {
			return token(r)
		}
		return u, err
	}
	return user, planField, nil
}

// Flags are the command-line flags that choose the store, the rules and
// what else a server runs. The zero value chooses the in-memory store and
// the rules of Rules.
type Flags struct {
	Redis        string // -redis: a standalone Redis server's address
	RedisCluster string // -redis-cluster: comma-separated Redis Cluster node addresses
	RedisClient  string // -redis-client: "go-redis" (when empty) or "rueidis"
	// RedisTimeout (-redis-timeout) bounds each decision on Redis: one that
	// takes longer counts as a store failure, and the limiter fails open
	// (its default), so a slow Redis never slows the API down; it only
	// stops limiting it for a while. Zero: no bound but the clients' own.
	// It is the stores' bound on each call too. The Redis stores also stop
	// asking a node that failed 3 times in a row for a second (WithBreaker(3, time.Second)), so an outage costs
	// no wait at all, and answer repeated denials without a round trip
	// (WithLocalDenials).
	RedisTimeout time.Duration
	// Rules (-rules) is a YAML or JSON rules file (package rules) that
	// replaces Rules and Plans; read once, at start.
	Rules string
	// Metrics (-metrics) is an address to serve Prometheus metrics on, at
	// /metrics: the limiter's decisions and the Redis store's counters
	// (takes by how they were decided, breaker states). Empty: none.
	Metrics string
	// NoLimit (-no-limit) serves the API without the rate limiter: the
	// baseline a load test compares the limited server with.
	NoLimit bool
}

// Register defines -redis, -redis-cluster, -redis-client, -redis-timeout,
// -rules, -metrics and -no-limit on fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Redis, "redis", "", "keep the limits in the standalone Redis server at this `address` (default: in memory)")
	fs.StringVar(&f.RedisCluster, "redis-cluster", "", "keep the limits in the Redis Cluster with these comma-separated node `addresses`")
	fs.StringVar(&f.RedisClient, "redis-client", "go-redis", "the Redis `client`: go-redis or rueidis")
	fs.DurationVar(&f.RedisTimeout, "redis-timeout", 100*time.Millisecond, "stop limiting, rather than wait, when Redis takes longer than this to decide (0: no bound)")
	fs.StringVar(&f.Rules, "rules", "", "read the rules from this YAML or JSON `file` instead of the built-in ones")
	fs.StringVar(&f.Metrics, "metrics", "", "serve Prometheus metrics at /metrics on this `address`")
	fs.BoolVar(&f.NoLimit, "no-limit", false, "serve without the rate limiter (a load test's baseline)")
}

// NewLimiter returns a limiter with Rules (or those of the -rules file) on
// the store f chooses, and a function that closes the Redis client and
// stops the metrics server, which the caller runs when the server has
// stopped. Every instance started with the same Redis shares the same
// limits. It checks that Redis answers before returning. With NoLimit it
// returns a nil limiter and starts nothing: the caller serves without the
// middleware.
func (f Flags) NewLimiter() (limiter *core.Limiter, stop func() error, err error) {
	if f.NoLimit {
		if f.Redis != "" || f.RedisCluster != "" || f.Rules != "" || f.Metrics != "" {
			return nil, nil, errors.New("examples: -no-limit serves without a limiter: -redis, -redis-cluster, -rules and -metrics do not apply")
		}
		return nil, func() error { return nil }, nil
	}
	policy, err := f.policy()
	if err != nil {
		return nil, nil, err
	}
	var addrs []string
	switch {
	case f.Redis != "" && f.RedisCluster != "":
		return nil, nil, errors.New("examples: -redis and -redis-cluster are exclusive")
	case f.Redis != "":
		addrs = []string{f.Redis}
	case f.RedisCluster != "":
		addrs = strings.Split(f.RedisCluster, ",")
	}
	closeStore := func() error { return nil }
	var opts []core.Option
	var store core.Store
	if addrs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		switch f.RedisClient {
		case "", "go-redis":
			store, closeStore, err = goRedisStore(ctx, addrs, f.RedisCluster != "", f.RedisTimeout)
		case "rueidis":
			store, closeStore, err = rueidisStore(ctx, addrs, f.RedisTimeout)
		default:
			return nil, nil, fmt.Errorf("examples: -redis-client %q: want go-redis or rueidis", f.RedisClient)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("examples: redis: %w", err)
		}
		opts = append(opts, core.WithStore(store), core.WithTimeout(f.RedisTimeout))
	}
	stopMetrics := func() error { return nil }
	if f.Metrics != "" {
		var ln net.Listener
		if ln, err = net.Listen("tcp", f.Metrics); err != nil {
			closeStore()
			return nil, nil, fmt.Errorf("examples: -metrics: %w", err)
		}
		log.Printf("metrics on %s", ln.Addr())
		var opt core.Option
		opt, stopMetrics, err = serveMetrics(ln, store)
		if err != nil {
			ln.Close()
			closeStore()
			return nil, nil, err
		}
		opts = append(opts, opt)
	}
	if limiter, err = core.NewLimiter(policy, opts...); err != nil {
		stopMetrics()
		closeStore()
		return nil, nil, err
	}
	return limiter, func() error { return errors.Join(stopMetrics(), closeStore()) }, nil
}

// policy returns the policy of the -rules file, or that of Rules and Plans.
func (f Flags) policy() (*core.Policy, error) {
	if f.Rules != "" {
		return rules.Load(f.Rules)
	}
	return core.NewPlanPolicy(Plans, Rules()...)
}

// serveMetrics serves the limiter's metrics, and the store's when it is a
// core.MetricSource, on ln in the background. It returns the option that
// feeds the limiter's decisions to them and a function that stops the
// server.
func serveMetrics(ln net.Listener, store core.Store) (core.Option, func() error, error) {
	var opts []promlimit.Option
	if src, ok := store.(core.MetricSource); ok {
		opts = append(opts, promlimit.WithSources(src))
	}
	metrics, err := promlimit.New(opts...)
	if err != nil {
		return nil, nil, err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(metrics); err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return metrics.Option(), srv.Close, nil
}

// The examples' circuit breaker: a node that failed this many times in a
// row is not asked again for the cooldown.
const (
	breakerFailures = 3
	breakerCooldown = time.Second
)

// goRedisStore returns a store on a go-redis client of addrs. A timeout >
// 0 bounds each call (the store's own bound, 100ms, otherwise).
func goRedisStore(ctx context.Context, addrs []string, cluster bool, timeout time.Duration) (core.Store, func() error, error) {
	var client redis.UniversalClient
	// ContextTimeoutEnabled makes go-redis honour the limiter's bound.
	if cluster {
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	} else {
		client = redis.NewClient(&redis.Options{Addr: addrs[0], ContextTimeoutEnabled: true})
	}
	err := client.Ping(ctx).Err()
	var store *goredis.Store
	if err == nil {
		opts := []goredis.Option{goredis.WithBreaker(breakerFailures, breakerCooldown), goredis.WithLocalDenials()}
		if timeout > 0 {
			opts = append(opts, goredis.WithTimeout(timeout))
		}
		store, err = goredis.New(client, opts...)
	}
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return store, client.Close, nil
}

// rueidisStore returns a store on a rueidis client of addrs, which finds
// out by itself whether they are a Cluster. A timeout > 0 bounds each call
// (the store's own bound, 100ms, otherwise).
func rueidisStore(ctx context.Context, addrs []string, timeout time.Duration) (core.Store, func() error, error) {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
	if err != nil {
		return nil, nil, err
	}
	err = client.Do(ctx, client.B().Ping().Build()).Error()
	var store *rlrueidis.Store
	if err == nil {
		opts := []rlrueidis.Option{rlrueidis.WithBreaker(breakerFailures, breakerCooldown), rlrueidis.WithLocalDenials()}
		if timeout > 0 {
			opts = append(opts, rlrueidis.WithTimeout(timeout))
		}
		store, err = rlrueidis.New(client, opts...)
	}
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return store, func() error { client.Close(); return nil }, nil
}
