// Package redisstore is the core.Store that the Redis stores (go-redis in
// adapters/goredis, rueidis in adapters/rueidis) share: their options and
// validation, Take with its per-slot batching, Cluster slot groups and
// refunds, the local denials, Reset, counters, and how errors are told
// apart (the caller's context ending, Redis failing, a malformed reply).
// Everything a decision needs is here; each store brings only the client
// calls, behind the small Client interface, and the Cache interface when
// its client has client-side caching.
//
// It imports no Redis client, so each store's module pulls in only its own.
package redisstore
