// Package rueidis is a core.Store on Redis through rueidis
// (github.com/redis/rueidis): standalone, Sentinel and Cluster. Several
// instances of a service share their limits through it, exactly.
//
//	import (
//		"github.com/redis/rueidis"
//		rlrueidis "github.com/bucketry/ratelimit/adapters/rueidis"
//	)
//
//	store, err := rlrueidis.Open(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}}, rlrueidis.WithLocalDenials())
//	...
//	limiter, err := core.NewLimiter(policy, core.WithStore(store))
//
// The client decides the topology: one address of a standalone server, the
// sentinels with ClientOption.Sentinel.MasterSet, or the nodes of a Cluster
// (Client.Mode reports "cluster"). Open builds the client, owns it and
// closes it on Close; New takes a client of your own, which the store never
// closes.
//
// # One script, one round trip
//
// Every decision runs one Lua script (internal/redisscript, shared with the
// go-redis store) that reads, decides and writes all the buckets of a
// request in one call, all or nothing, exactly as core's in-memory math
// does: the same integer nanoseconds, the same decisions, the same
// Remaining, ResetAfter and RetryAfter. The script is sent by SHA (EVALSHA)
// and sent in full when Redis answers NOSCRIPT (after a restart, SCRIPT
// FLUSH or failover), in multi-slot round trips too. A denied request
// writes nothing. A bucket's key expires when the bucket is full again,
// rounded up to the millisecond Redis can express. A reply that is not the
// script's (its binary string, or with undo values an array of the string
// and the values) is an error wrapping redisscript.ErrReply.
//
// A key holds its bucket's state as a short binary value: a tag byte for the
// algorithm, then little-endian integers, for a token bucket its
// theoretical arrival time as Unix seconds and nanoseconds and the fill time
// it was written under (21 bytes). Times are kept as (seconds, nanoseconds)
// pairs because Lua's numbers are doubles, which cannot hold a Unix time in
// nanoseconds: that keeps decisions exact to the nanosecond. The package
// documentation of internal/redisscript gives every algorithm's layout and
// why; local denials read the token bucket's value directly.
//
// Time is the Redis server's TIME, one clock for every instance; no client
// clock skew enters a decision. WithClientClock passes a client clock
// instead, which tests use; Redis still expires keys by its own clock, so
// WithMinTTL then keeps keys long enough for the client clock's timeline.
//
// # Batching
//
// Requests for one hash slot (all requests, outside Cluster) that arrive
// while a script call is in flight are sent together in the next call and
// decided in arrival order, each caller getting its own decision. Nothing
// waits on a timer: an idle store sends at once, so at low load a decision
// costs one round trip, and under load one round trip carries every request
// that queued during the previous one, and the next requests of the callers
// it answered: before the next call leaves, those callers get the processor
// for a moment (a few yields, no timer) to queue them, so that under steady
// load the calls are fewer and larger (at 64 goroutines on a hot key, about
// 30% fewer in the project's benchmarks) than if each left with only what
// queued during the last. Within a call, each key is read and written once,
// however many requests it serves, and each limit is sent once. Identical
// requests in a call (a hot key's, or a hot set of tiers') are sent once
// with a count and decided one after the other at the first's place; on
// token buckets and shaping limits the script decides such a run at once,
// so a hot key's call costs Redis about what one request costs.
// WithoutBatching turns this off; rueidis still pipelines concurrent calls
// on its connections.
//
// # Redis Cluster
//
// Keys are grouped by hash slot: one script call per slot, all of them in
// one round trip (DoMulti). When one slot's buckets deny a request while
// another slot's buckets took its cost, a second round trip gives those
// tokens back (Stats.Refunds): a bucket that no other request wrote in
// between gets its earlier value back exactly, any other the cost. In
// between, the tokens are held: the store may under-admit for a moment,
// the length of a round trip, after which the refund restores them; it
// never over-admits. A prefix with a hash tag
// ("{ratelimit}") keeps every bucket in one slot and every check in one
// call, at the price of one hot slot.
//
// Identities in keys are escaped so that user text cannot pick a Cluster
// slot ({ and }) nor forge another key; identities longer than 128 bytes are
// hashed, and WithHashedIdentities hashes them all with a secret so that raw
// user ids and addresses never reach Redis.
//
// # Failures
//
// Every wait of a Take is bounded, 100ms by default (WithTimeout): queueing
// behind a batch in flight, reconnecting, redirects and the reply. A Take that
// runs out of it fails, and the limiter's failure mode decides. With
// WithBreaker, each failure domain has a circuit breaker: a Cluster master
// (the owner of a key's slot, from CLUSTER SLOTS, refreshed every 5s and
// within 100ms of a failure, so that a promoted replica or a moved slot
// takes its keys to the new owner's breaker), or the server outside
// Cluster. A dead master then costs its own keys a failure at once, without
// a call, and no other key anything. A request whose buckets span a failed
// node and a healthy one gets a core.PartialError, having changed nothing
// on the healthy node, and the failure mode decides the failed tiers only
// (see core.FailureMode). rueidis.NewClient fails while Redis is down: Open builds the client
// itself and, if Redis cannot be reached, returns a store whose decisions
// fail (the failure mode decides) while it tries again every 250ms in the
// background, as a go-redis store starts whatever the state of Redis.
// WithRequireRedis makes New and Open fail instead.
//
// The README's "Production set-up" section gives the recommended options,
// each exercised by a test.
//
// # Local denials with client-side caching
//
// With WithLocalDenials, a request that Redis denied once can be denied
// again without running the script, from the bucket's stored state read
// through rueidis client-side caching (RESP3 tracking, DoCache). Only token
// bucket limits of at most 100 days qualify, and only when every bucket of
// the request does, its cached state written under the same fill time;
// requests with a window algorithm or shaping (whose queue may hold a
// bucket past its fill time), limits decided in microseconds, buckets
// whose limit changed since their last write, reads (cost 0) and allowed
// requests always go to Redis.
//
// After a denial the store remembers the request's bucket keys and what
// the script's reply said each one held. The next request on them reads
// each bucket's stored value, its theoretical arrival time (TAT), with
// DoCache (DoMultiCache for several), with a client-side TTL no longer than
// the denial's RetryAfter. Redis invalidates the cached copy the moment
// any instance writes the key (a take, a refund, a reset) and when it
// expires, so the copy is the value at the last write that this instance
// has been told of. The store then runs core's Limit.Decide on it, with
// the request's own cost and limit, at an upper bound of the script's
// current time. If that denies for any bucket that Redis recently denied
// (a prover), the request is denied locally; otherwise the script decides.
//
// Why a local denial is one Redis would give:
//
//   - A take under the limit the value was written with only raises its
//     TAT, and a larger TAT at an earlier time holds fewer tokens. A cached
//     copy older than the real value (another instance's take whose
//     invalidation is still on its way) therefore shows at least the
//     tokens Redis holds. A take under another limit (a rule or tenant
//     whose limit changed) rescales the value and may give tokens back: a
//     copy written under another fill time than the request's limit, and
//     any limit longer than 100 days (decided in microseconds), are never
//     decided locally; Redis decides them.
//   - The time is an upper bound. With WithClientClock or a Take's explicit
//     Now, it is exactly the time the script would get. With the server's
//     TIME, it is the time reported by the last script reply for the same
//     hash slot plus the local monotonic time elapsed since that request
//     was sent (never since the reply came), plus 1000 ppm for clock
//     drift, and such a reference is used for one second at most. Latency
//     and drift can only make the bound later, which only lets more
//     requests through to Redis.
//   - Decide is the function the script implements, and the decision is
//     recomputed from state on every request, never remembered: a rule
//     change (a new *core.Limit) is decided under the new rule.
//   - A refund or a reset lowers a TAT, which a stale copy would hide. Redis
//     invalidates the copy; until that message arrives (one network delay),
//     another instance's refund or reset can leave a local denial that
//     Redis would no longer give: the store then under-admits for that
//     moment, and never over-admits. The same holds for a key that Redis
//     expires, by its own clock, before WithClientClock's clock says the
//     bucket is full (a client clock behind the server's). For its own refunds and resets the
//     store does not wait for the message: it accepts a cached value only
//     if it is no larger than the value the refund or reset left, and a
//     reply to a call that may have run on either side of such a lowering
//     (their round trips overlap) leaves the bucket unknown, proving
//     nothing, until a reply to a call sent after both.
//
// What a local denial reports: for every bucket, Decide's state at a lower
// bound of the script's current time (the last reply's server time plus the
// time elapsed since it came; the exact time with a client clock): fewer
// tokens, a RetryAfter and a ResetAfter never shorter than those Redis would
// report on the same value. As the script does, the buckets that deny
// report the request's cost, the others their balance as it stands.
// Take.At is that lower bound. A local denial needs every bucket of the
// request to be a token bucket limit that this instance tracks
// (it has been part of a denied request, or shared one with a bucket that
// has); the buckets that prove nothing are reported from their cached
// value too, the value at the last write this instance has heard of. The
// store refuses a cached value lower than the one it last saw Redis hold
// (its own write whose invalidation is still on its way), so its own takes
// never make a local answer too generous, and goes to Redis instead.
//
// Reads served from the client-side cache cost no round trip (Stats.Local);
// a cache miss costs one GET and no script (Stats.Fetched), and fills the
// cache for the next request. While a bucket stays empty and no instance
// writes it, every instance denies it from its own cache. When a request
// is allowed somewhere, every instance's copy is invalidated and each pays
// one GET to read the new value (a script call, for a bucket this instance
// itself refunded or reset).
//
// The store tracks at most 100,000 bucket keys by default
// (WithLocalDenialKeys); when full, it forgets them all and learns again
// from Redis's answers.
//
// Stats counts remote and local decisions, cache hits and misses, script
// reloads, refunds and takes refused by an open breaker.
package rueidis
