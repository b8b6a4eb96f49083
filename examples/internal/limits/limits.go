// Package limits is what the example servers share: the policy, the key
// functions that read the user and plan, and the flags that choose the
// store (-redis, -redis-cluster, -redis-client, -redis-timeout). Each
// example's main.go wires these into its framework; only that wiring
// differs between frameworks.
package limits

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/bucketry/ratelimit/adapters/goredis"
	rlrueidis "github.com/bucketry/ratelimit/adapters/rueidis"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/keyfuncs"
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

// Flags are the command-line flags that choose the store. The zero value
// chooses the in-memory store.
type Flags struct {
	Redis        string // -redis: a standalone Redis server's address
	RedisCluster string // -redis-cluster: comma-separated Redis Cluster node addresses
	RedisClient  string // -redis-client: "go-redis" (when empty) or "rueidis"
	// RedisTimeout (-redis-timeout) bounds each decision on Redis: one that
	// takes longer counts as a store failure, and the limiter fails open
	// (its default), so a slow Redis never slows the API down; it only
	// stops limiting it for a while. Zero: no bound but the clients' own.
	RedisTimeout time.Duration
}

// Register defines -redis, -redis-cluster, -redis-client and -redis-timeout
// on fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Redis, "redis", "", "keep the limits in the standalone Redis server at this `address` (default: in memory)")
	fs.StringVar(&f.RedisCluster, "redis-cluster", "", "keep the limits in the Redis Cluster with these comma-separated node `addresses`")
	fs.StringVar(&f.RedisClient, "redis-client", "go-redis", "the Redis `client`: go-redis or rueidis")
	fs.DurationVar(&f.RedisTimeout, "redis-timeout", 100*time.Millisecond, "stop limiting, rather than wait, when Redis takes longer than this to decide (0: no bound)")
}

// NewLimiter returns a limiter with Rules on the store f chooses, and a
// function that closes the Redis client, which the caller runs when the
// server has stopped. Every instance started with the same Redis shares the
// same limits. It checks that Redis answers before returning.
func (f Flags) NewLimiter() (limiter *core.Limiter, closeStore func() error, err error) {
	var addrs []string
	switch {
	case f.Redis != "" && f.RedisCluster != "":
		return nil, nil, errors.New("examples: -redis and -redis-cluster are exclusive")
	case f.Redis != "":
		addrs = []string{f.Redis}
	case f.RedisCluster != "":
		addrs = strings.Split(f.RedisCluster, ",")
	default:
		limiter, err := NewLimiter(nil)
		return limiter, func() error { return nil }, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var store core.Store
	switch f.RedisClient {
	case "", "go-redis":
		store, closeStore, err = goRedisStore(ctx, addrs, f.RedisCluster != "")
	case "rueidis":
		store, closeStore, err = rueidisStore(ctx, addrs)
	default:
		return nil, nil, fmt.Errorf("examples: -redis-client %q: want go-redis or rueidis", f.RedisClient)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("examples: redis: %w", err)
	}
	if limiter, err = NewLimiter(store, core.WithTimeout(f.RedisTimeout)); err != nil {
		closeStore()
		return nil, nil, err
	}
	return limiter, closeStore, nil
}

// goRedisStore returns a store on a go-redis client of addrs.
func goRedisStore(ctx context.Context, addrs []string, cluster bool) (core.Store, func() error, error) {
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
		store, err = goredis.New(client)
	}
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return store, client.Close, nil
}

// rueidisStore returns a store on a rueidis client of addrs, which finds
// out by itself whether they are a Cluster.
func rueidisStore(ctx context.Context, addrs []string) (core.Store, func() error, error) {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
	if err != nil {
		return nil, nil, err
	}
	err = client.Do(ctx, client.B().Ping().Build()).Error()
	var store *rlrueidis.Store
	if err == nil {
		store, err = rlrueidis.New(client)
	}
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return store, func() error { client.Close(); return nil }, nil
}
