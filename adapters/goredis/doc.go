// Package goredis is a core.Store on Redis through go-redis v9: standalone,
// Sentinel (failover clients) and Cluster. Several instances of a service
// share their limits through it, exactly.
//
//	store, err := goredis.Open(&redis.UniversalOptions{Addrs: []string{"localhost:6379"}})
//	...
//	limiter, err := core.NewLimiter(policy, core.WithStore(store))
//
// Open builds the client and sets ContextTimeoutEnabled, without which
// go-redis ignores context deadlines; New takes a client of your own, which
// must have it set.
//
// # One script, one round trip
//
// Every decision runs one Lua script (internal/redisscript) that reads,
// decides and writes all the buckets of a request in one call, all or
// nothing, exactly as core's in-memory math does: the same integer
// nanoseconds, the same decisions, the same Remaining, ResetAfter and
// RetryAfter. The script is sent by SHA and sent in full when Redis answers
// NOSCRIPT (after a restart, SCRIPT FLUSH or failover), in pipelines too. A
// denied request writes nothing. A bucket's key expires when the bucket is
// full again, rounded up to the millisecond Redis can express.
//
// A key holds its bucket's state as a short binary value: a tag byte for the
// algorithm, then little-endian integers, for a token bucket its
// theoretical arrival time as Unix seconds and nanoseconds and the fill time
// it was written under (21 bytes). Times are kept as (seconds, nanoseconds)
// pairs because Lua's numbers are doubles, which cannot hold a Unix time in
// nanoseconds: that keeps decisions exact to the nanosecond. The package
// documentation of internal/redisscript gives every algorithm's layout and
// why.
//
// Time is the Redis server's TIME, one clock for every instance; no client
// clock skew enters a decision. WithClientClock passes a client clock
// instead, which tests use.
//
// # Batching
//
// Requests for one hash slot that arrive while a script call is in flight
// are sent together in the next call and decided in arrival order, each
// caller getting its own decision. Nothing waits on a timer: an idle store
// sends at once, so at low load a decision costs one round trip, and under
// load one round trip carries every request that queued during the previous
// one, and the next requests of the callers it answered: before the next
// call leaves, those callers get the processor for a moment (a few yields,
// no timer) to queue them, so that under steady load the calls are fewer
// and larger (at 64 goroutines on a hot key, about 30% fewer in the
// project's benchmarks) than if each left with only what queued during the
// last. Within a call, each key is read and written once, however many
// requests it serves, and each limit is sent once. Identical requests in a
// call (a hot key's, or a hot set of tiers') are sent once with a count and
// decided one after the other at the first's place; on token buckets and
// shaping limits the script decides such a run at once, so a hot key's call
// costs Redis about what one request costs. WithoutBatching turns this off.
//
// # Redis Cluster
//
// Keys are grouped by hash slot: one script call per slot, all of them in
// one pipelined round trip. When one slot's buckets deny a request while
// another slot's buckets took its cost, a second round trip gives those
// tokens back. In between, the tokens are held: the store may under-admit
// for the length of a round trip; it never over-admits. A prefix with a hash
// tag ("{ratelimit}") keeps every bucket in one slot and every check in one
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
// behind a batch in flight, dialing, the client's retries, redirects and the reply. A Take that
// runs out of it fails, and the limiter's failure mode decides. With
// WithBreaker, each failure domain has a circuit breaker: a Cluster master
// (the owner of a key's slot, from CLUSTER SLOTS, refreshed every 5s and
// within 100ms of a failure, so that a promoted replica or a moved slot
// takes its keys to the new owner's breaker), or the server outside
// Cluster. A dead master then costs its own keys a failure at once, without
// a call, and no other key anything. A request whose buckets span a failed
// node and a healthy one gets a core.PartialError, having changed nothing
// on the healthy node, and the failure mode decides the failed tiers only
// (see core.FailureMode). A store starts while Redis is down (WithRequireRedis makes New and Open
// fail instead). Open refuses an empty or malformed address; New refuses a
// malformed one, but go-redis has turned an empty one into localhost:6379
// by the time New sees the client.
//
// The README's "Production set-up" section gives the recommended options,
// each exercised by a test.
//
// # Local denials
//
// With WithLocalDenials, a repeat of a denied request (the same buckets, the
// same rules, the same cost) is denied without a round trip for as long as
// the denial provably holds: the request was sent at local time s, so Redis
// decided at some d >= s, when every denying bucket needed at least
// RetryAfter to refill enough. Other requests only take tokens, so no
// denying bucket can admit the cost before d + RetryAfter >= s + RetryAfter.
// Measuring from s, the earliest instant Redis could have decided, makes
// latency and clock skew only shorten a local denial. The Retry-After
// reported for a local denial counts down from when the reply arrived, so it
// is never earlier than the real refill. Two things add tokens early, by
// any instance: a give-back (a Cluster refund, a returned lease), and a take
// under a limit of another fill time, which rescales the bucket (instances
// whose rules differ while a change rolls out, a Lookup that gives a tenant
// another limit for a while): a local denial can then outlast the real one,
// which under-admits for at most its Retry-After and never over-admits. A
// rule change (a new policy) on this instance drops local denials, and a
// request under another limit than its denial's goes to Redis; allowed
// requests always go to Redis.
//
// Stats counts remote and local decisions, script reloads, refunds and
// takes refused by an open breaker.
package goredis
