package rueidis

import (
	"context"

	"github.com/redis/rueidis"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript/redisstore"
)

// Store is a core.Store on Redis through rueidis: standalone, Sentinel and
// Cluster. It is safe for concurrent use.
type Store struct{ s *redisstore.Store }

// New returns a store on client, a rueidis client for a standalone server,
// a Sentinel master set or a Cluster (Client.Mode tells which). It fails
// with an error wrapping core.ErrInvalidOption, naming each problem, for a
// nil client, a nil option (by its position in opts, counted from 0), an
// empty prefix, a short secret, a nil clock, a negative timeout, a minimum
// TTL out of range or a local denial bound below 1.
func New(client rueidis.Client, opts ...Option) (*Store, error) {
	s, err := redisstore.Open("rueidis", client, newClient, opts, Option.apply)
	if err != nil {
		return nil, err
	}
	return &Store{s}, nil
}

// Take implements core.Store.
func (s *Store) Take(ctx context.Context, t *core.Take) error { return s.s.Take(ctx, t) }

// Key returns the Redis key of bucket (rule, id), for inspection.
func (s *Store) Key(rule, id string) string { return s.s.Key(rule, id) }

// Reset deletes bucket (rule, id), which is then full. Redis tells every
// instance's client-side cache; this instance also stops trusting what it
// knew of the bucket. It is meant for operators (unblocking a client), not
// for the request path.
func (s *Store) Reset(ctx context.Context, rule, id string) error { return s.s.Reset(ctx, rule, id) }

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
func (s *Store) Stats() Stats { return Stats(s.s.Stats()) }

// Option configures a Store; pass options to New, which applies them in
// order.
type Option interface{ apply(*redisstore.Config) }

type option func(*redisstore.Config)

func (f option) apply(c *redisstore.Config) { f(c) }
