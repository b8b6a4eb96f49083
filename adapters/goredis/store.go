package goredis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript/redisstore"
)

// Option configures a Store; pass options to New or Open, which apply them
// in order.
type Option interface{ apply(*redisstore.Config) }

type option func(*redisstore.Config)

func (f option) apply(c *redisstore.Config) { f(c) }

// Store is a core.Store on Redis through go-redis v9; see the package
// documentation for its guarantees. It is safe for concurrent use.
type Store struct {
	s     *redisstore.Store
	owned redis.UniversalClient // the client Open made, which Close closes
}

// Stats counts how the store's decisions were made.
type Stats struct {
	Remote  int64 // takes sent to Redis
	Local   int64 // takes denied from the local denial cache, without a round trip
	Reloads int64 // scripts sent in full after NOSCRIPT
	Refunds int64 // Cluster slot groups given back after another group denied
	Refused int64 // takes refused at once, wholly or in part, by an open circuit breaker
	Leases  int64 // leases taken (core.Leaser's TakeLease calls sent to Redis)
	Returns int64 // leases given back (ReturnLease calls sent to Redis)
}

// New returns a store on client: a *redis.Client, a failover client
// (Sentinel) or a *redis.ClusterClient, built with ContextTimeoutEnabled so
// that it honours the store's bound on every wait (without it go-redis waits
// for its own ReadTimeout, 3s by default, whatever the context says). The
// store never closes client. It fails with an error wrapping
// core.ErrInvalidOption, naming each problem, for a nil client, a client
// without ContextTimeoutEnabled, a malformed address, a nil option (by its
// position in opts, counted from 0), an empty prefix, a short secret, a nil
// clock, a timeout <= 0, a breaker that cannot work, or a minimum TTL out of
// range; and, with WithRequireRedis, with an error wrapping
// core.ErrUnavailable when Redis does not answer. Without WithRequireRedis a
// store whose Redis is down starts, and the limiter's failure mode decides
// until Redis answers.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	s, err := redisstore.Open("goredis", client, newClient, opts, Option.apply)
	if err != nil {
		return nil, err
	}
	return &Store{s: s}, nil
}

// Open builds a go-redis client from o, with ContextTimeoutEnabled set, and
// returns a store on it that owns it: Close closes it. o.Addrs must name at
// least one address, each host:port (an empty address is an error, not
// localhost). One address and no MasterName gives a *redis.Client, a
// MasterName a failover client (Sentinel), several addresses or
// IsClusterMode a *redis.ClusterClient, as redis.NewUniversalClient does.
// Open fails as New does, and for a nil o.
func Open(o *redis.UniversalOptions, opts ...Option) (*Store, error) {
	if o == nil {
		return nil, fmt.Errorf("%w: goredis: Open: nil options", core.ErrInvalidOption)
	}
	var errs []error
	if len(o.Addrs) == 0 {
		errs = append(errs, fmt.Errorf("%w: goredis: Open: no address in UniversalOptions.Addrs", core.ErrInvalidOption))
	}
	for i, a := range o.Addrs {
		if err := redisstore.CheckAddr(a); err != nil {
			errs = append(errs, fmt.Errorf("%w: goredis: Open: UniversalOptions.Addrs[%d]: %w", core.ErrInvalidOption, i, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c := *o
	c.ContextTimeoutEnabled = true
	client := redis.NewUniversalClient(&c)
	s, err := New(client, opts...)
	if err != nil {
		client.Close()
		return nil, err
	}
	s.owned = client
	return s, nil
}

// Close closes the client Open made; for a store made by New, which never
// owns its client, it does nothing and returns nil.
func (s *Store) Close() error {
	if s.owned == nil {
		return nil
	}
	return s.owned.Close()
}

func newClient(client redis.UniversalClient, cfg *redisstore.Config) redisstore.Client {
	if !contextTimeouts(client) {
		cfg.Fail("the client ignores context deadlines, so no wait could be bounded: build it with ContextTimeoutEnabled: true (or use goredis.Open)")
	}
	switch c := client.(type) {
	case *redis.Client:
		if o := c.Options(); o.Network != "unix" && o.Addr != "FailoverClient" {
			if err := redisstore.CheckAddr(o.Addr); err != nil {
				cfg.Fail("client: %v", err)
			}
		}
	case *redis.ClusterClient:
		if len(c.Options().Addrs) == 0 && c.Options().ClusterSlots == nil {
			cfg.Fail("cluster client: no address, and no ClusterSlots function")
		}
		for i, a := range c.Options().Addrs {
			if err := redisstore.CheckAddr(a); err != nil {
				cfg.Fail("cluster client: Addrs[%d]: %v", i, err)
			}
		}
	}
	_, cluster := client.(*redis.ClusterClient)
	return &goRedis{client: client, cluster: cluster}
}

// contextTimeouts reports whether client honours context deadlines.
func contextTimeouts(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	st := s.s.Stats()
	return Stats{Remote: st.Remote, Local: st.Local, Reloads: st.Reloads, Refunds: st.Refunds, Refused: st.Refused, Leases: st.Leases, Returns: st.Returns}
}

// BreakerStates reports the state of each failure domain's circuit
// breaker (WithBreaker): by Cluster master address, or "redis" for the
// whole server outside Cluster (and in Cluster until the slot map is
// known). Empty without WithBreaker. It is meant for health checks and
// metrics.
func (s *Store) BreakerStates() map[string]core.BreakerState { return s.s.BreakerStates() }

// Reset deletes bucket (rule, id), which is then full, and drops the local
// denials that involve it. It is meant for operators (unblocking a client),
// not for the request path.
func (s *Store) Reset(ctx context.Context, rule, id string) error { return s.s.Reset(ctx, rule, id) }

// Key returns the Redis key of bucket (rule, id), for inspection.
func (s *Store) Key(rule, id string) string { return s.s.Key(rule, id) }

// Take implements core.Store.
func (s *Store) Take(ctx context.Context, t *core.Take) error { return s.s.Take(ctx, t) }

// TakeLease implements core.Leaser, for rules with a core.Lease: one script
// call takes between need and size tokens from the bucket, on the key Take
// uses for it.
func (s *Store) TakeLease(ctx context.Context, b core.Bucket, need, size int64, now time.Time) (core.LeaseGrant, error) {
	return s.s.TakeLease(ctx, b, need, size, now)
}

// ReturnLease implements core.Leaser: one script call gives n unused
// leased tokens back to the bucket, never filling it beyond its burst.
func (s *Store) ReturnLease(ctx context.Context, b core.Bucket, n int64, now time.Time) error {
	return s.s.ReturnLease(ctx, b, n, now)
}
