package rueidis

import (
	"log/slog"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript/redisstore"
)

// WithLocalDenials lets the store deny a request without running the script
// when bucket state read through rueidis client-side caching proves that
// Redis would deny it: see the package documentation. The client must have
// client-side caching on (the rueidis default; not with DisableCache or
// RESP2), otherwise every such read is a round trip, counted in
// Stats.CacheMisses.
func WithLocalDenials() Option { return option(redisstore.LocalDenials) }

// WithLocalDenialKeys bounds how many bucket keys the local denial cache
// tracks (100,000 by default; each costs about 250 bytes plus the key). When
// it is full, the store forgets them all and learns again from Redis's
// answers. It implies nothing without WithLocalDenials; n must be >= 1.
func WithLocalDenialKeys(n int) Option { return option(redisstore.LocalDenialKeys(n)) }

// WithClientClock makes the store decide at clock's time instead of the
// Redis server's TIME. Every instance sharing the buckets must then share
// one clock; tests use it to control time. A nil clock makes New fail.
func WithClientClock(clock core.Clock) Option { return option(redisstore.ClientClock(clock)) }

// WithMinTTL keeps every key written for at least d (0, the default: each
// key lives exactly until its bucket is full again, which is right when
// decisions use the Redis server's clock, the clock Redis expires keys by).
// With WithClientClock the two clocks differ, and a key could expire, in
// Redis's time, while the client's clock says its bucket still owes tokens
// (a clock moved back, a fake clock in tests): a floor prevents that. A
// longer life never changes a decision, since the stored state itself says
// when the bucket is full; it only costs memory. d must be between 0 and
// core.MaxSpan.
func WithMinTTL(d time.Duration) Option { return option(redisstore.MinTTL(d)) }

// WithPrefix sets the prefix of every key. The default is "ratelimit". Use a
// hash tag such as "{ratelimit}" to keep every bucket in one Cluster slot,
// which makes multi-tier checks a single script call at the price of one
// hot slot. An empty prefix, or one with control characters, makes New fail.
func WithPrefix(p string) Option { return option(redisstore.Prefix(p)) }

// WithHashedIdentities replaces every identity in a key by
// HMAC-SHA-256(secret, identity), so raw user ids and addresses never reach
// Redis. secret must be at least 16 bytes and the same on every instance.
func WithHashedIdentities(secret []byte) Option { return option(redisstore.HashedIdentities(secret)) }

// WithTimeout bounds the whole wait of each Take, on top of the caller's
// context: queueing behind a batch in flight, reconnecting, redirects and
// the reply. A Take that runs out of it fails, and the limiter's failure
// mode decides. The default is 100ms (see the package documentation); d
// must be > 0. A Cluster take whose tiers span nodes and must give tokens
// back after a failure gets a second bound for that.
func WithTimeout(d time.Duration) Option { return option(redisstore.Timeout(d)) }

// WithBreaker gives each failure domain (each Cluster master; the server
// outside Cluster) a circuit breaker: after failures consecutive failed
// calls to it, its keys fail at once, without a call, for cooldown, with an
// error wrapping core.ErrBreakerOpen (a *core.BreakerOpenError, whose Until
// a limiter failing closed turns into Retry-After); then one call probes it
// and closes or reopens the breaker. Keys of other nodes are not affected. A
// request whose tiers span a refused node and a healthy one gets a
// core.PartialError: see core.FailureMode. failures must be between 1 and
// core.MaxBreakerFailures and cooldown > 0. The default is no breaker.
func WithBreaker(failures int, cooldown time.Duration) Option {
	return option(redisstore.Breaker(failures, cooldown))
}

// WithLogger logs the store's circuit breaker transitions (WithBreaker)
// through logger: a node's breaker opening, with the failure, as an error;
// its probe and its closing as information; at most one record per node and
// state every core.LogInterval. A nil logger is an error. The default logs
// nothing. Store failures themselves are logged by the limiter
// (core.WithLogger).
func WithLogger(logger *slog.Logger) Option { return option(redisstore.Logger(logger)) }

// WithRequireRedis makes New and Open fail, with an error wrapping
// core.ErrUnavailable, when Redis (every node, in Cluster) does not answer a
// PING within the timeout or 1s, whichever is longer. By default Open
// returns a store whatever the state of Redis, and the limiter's failure
// mode decides until Redis answers.
func WithRequireRedis() Option { return option(redisstore.RequireRedis) }

// WithoutBatching sends every request in a script call of its own. By
// default, requests for one hash slot that arrive while a call is in flight
// are sent together in the next call (see the package documentation).
func WithoutBatching() Option { return option(redisstore.NoBatching) }
