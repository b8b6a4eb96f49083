package goredis

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript/redisstore"
)

// Option configures a Store; pass options to New, which applies them in
// order.
type Option interface{ apply(*redisstore.Config) }

type option func(*redisstore.Config)

func (f option) apply(c *redisstore.Config) { f(c) }

// Store is a core.Store on Redis through go-redis v9; see the package
// documentation for its guarantees. It is safe for concurrent use.
type Store struct{ s *redisstore.Store }

// Stats counts how the store's decisions were made.
type Stats struct {
	Remote  int64 // takes sent to Redis
	Local   int64 // takes denied from the local denial cache, without a round trip
	Reloads int64 // scripts sent in full after NOSCRIPT
	Refunds int64 // Cluster slot groups given back after another group denied
}

// New returns a store on client: a *redis.Client, a failover client
// (Sentinel) or a *redis.ClusterClient. It fails with an error wrapping
// core.ErrInvalidOption, naming each problem, for a nil client, a nil
// option (by its position in opts, counted from 0), an empty prefix, a
// short secret, a nil clock, a negative timeout or one the client would
// ignore, or a minimum TTL out of range.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	s, err := redisstore.Open("goredis", client, newClient, opts, Option.apply)
	if err != nil {
		return nil, err
	}
	return &Store{s}, nil
}

// newClient returns the go-redis side of a store on client. A timeout the
// client would ignore is an error.
func newClient(client redis.UniversalClient, cfg *redisstore.Config) redisstore.Client {
	if d := cfg.Timeout(); d > 0 && !contextTimeouts(client) {
		cfg.Fail("WithTimeout(%v) needs the client's ContextTimeoutEnabled option, or go-redis ignores it", d)
	}
	_, cluster := client.(*redis.ClusterClient)
	return &goRedis{client: client, cluster: cluster}
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

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	st := s.s.Stats()
	return Stats{Remote: st.Remote, Local: st.Local, Reloads: st.Reloads, Refunds: st.Refunds}
}

// Reset deletes bucket (rule, id), which is then full, and drops the local
// denials that involve it. It is meant for operators (unblocking a client),
// not for the request path.
func (s *Store) Reset(ctx context.Context, rule, id string) error { return s.s.Reset(ctx, rule, id) }

// Key returns the Redis key of bucket (rule, id), for inspection.
func (s *Store) Key(rule, id string) string { return s.s.Key(rule, id) }

// Take implements core.Store.
func (s *Store) Take(ctx context.Context, t *core.Take) error { return s.s.Take(ctx, t) }
