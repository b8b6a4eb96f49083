package rueidis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript/redisstore"
)

// Store is a core.Store on Redis through rueidis: standalone, Sentinel and
// Cluster. It is safe for concurrent use.
type Store struct {
	s    atomic.Pointer[redisstore.Store]
	dial *dialer // set by Open: the client it made, or is still making
}

// New returns a store on client, a rueidis client for a standalone server,
// a Sentinel master set or a Cluster (Client.Mode tells which). The store
// never closes client. It fails with an error wrapping core.ErrInvalidOption,
// naming each problem, for a nil client, a nil option (by its position in
// opts, counted from 0), an empty prefix, a short secret, a nil clock, a
// timeout <= 0, a breaker that cannot work, a minimum TTL out of range or a
// local denial bound below 1; and, with WithRequireRedis, with an error
// wrapping core.ErrUnavailable when Redis does not answer.
//
// rueidis.NewClient itself fails while Redis is down: to start a service
// whatever the state of Redis, as the go-redis store does, use Open.
func New(client rueidis.Client, opts ...Option) (*Store, error) {
	s, err := redisstore.Open("rueidis", client, newClient, opts, Option.apply)
	if err != nil {
		return nil, err
	}
	st := &Store{}
	st.s.Store(s)
	return st, nil
}

// redialEvery is the least time between two attempts of a store made by
// Open to build its client while Redis is down.
const redialEvery = 250 * time.Millisecond

// Open builds a rueidis client from o and returns a store on it that owns
// it: Close closes it. o.InitAddress must name at least one address, each
// host:port (an empty address is an error). If Redis cannot be reached, Open
// still returns a store (unless WithRequireRedis is given, when it fails
// with an error wrapping core.ErrUnavailable): every Take then fails at once,
// so the limiter's failure mode decides, and tries again to build the
// client, in the background and at most every 250ms, until Redis answers.
// This is how a store on go-redis behaves too. Open fails as New does, with
// errors wrapping core.ErrInvalidOption, for bad options.
func Open(o rueidis.ClientOption, opts ...Option) (*Store, error) {
	var errs []error
	if len(o.InitAddress) == 0 {
		errs = append(errs, fmt.Errorf("%w: rueidis: Open: no address in ClientOption.InitAddress", core.ErrInvalidOption))
	}
	for i, a := range o.InitAddress {
		if err := redisstore.CheckAddr(a); err != nil {
			errs = append(errs, fmt.Errorf("%w: rueidis: Open: ClientOption.InitAddress[%d]: %w", core.ErrInvalidOption, i, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	st := &Store{dial: &dialer{opt: o, opts: opts}}
	// The options are checked, and the key namer made, before any dial.
	d := &down{st: st}
	stub := append(append([]Option(nil), opts...), option(redisstore.NotRequired))
	s, err := redisstore.Open("rueidis", d, func(c *down, _ *redisstore.Config) redisstore.Client { return c }, stub, Option.apply)
	if err != nil {
		return nil, err
	}
	st.s.Store(s)
	client, err := rueidis.NewClient(o)
	if err == nil {
		err = st.connected(client)
	}
	if err != nil {
		if errors.Is(err, core.ErrInvalidOption) || requires(opts) {
			return nil, fmt.Errorf("%w: rueidis: Open: %w", core.ErrUnavailable, err)
		}
		st.dial.mu.Lock()
		st.dial.err, st.dial.last = err, time.Now()
		st.dial.mu.Unlock()
	}
	return st, nil
}

// requires reports whether opts hold WithRequireRedis.
func requires(opts []Option) bool {
	var c redisstore.Config
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c.Required()
}

// connected puts the store on client, which it then owns.
func (s *Store) connected(client rueidis.Client) error {
	real, err := redisstore.Open("rueidis", client, newClient, s.dial.opts, Option.apply)
	if err != nil {
		client.Close()
		return err
	}
	s.dial.mu.Lock()
	defer s.dial.mu.Unlock()
	if s.dial.closed {
		client.Close()
		return errors.New("rueidis: store closed")
	}
	s.dial.client = client
	s.s.Store(real)
	return nil
}

// dialer is how a store made by Open builds its client.
type dialer struct {
	opt  rueidis.ClientOption
	opts []Option

	mu     sync.Mutex
	client rueidis.Client // once built
	err    error          // the last attempt's
	last   time.Time      // when the last attempt started
	busy   bool           // an attempt is under way
	closed bool
}

// redial starts an attempt to build the client, unless one is under way or
// the last began less than redialEvery ago, and returns the last error.
func (s *Store) redial() error {
	d := s.dial
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.err
	if d.client != nil || d.closed || d.busy || time.Since(d.last) < redialEvery {
		return err
	}
	d.busy, d.last = true, time.Now()
	go func() {
		client, err := rueidis.NewClient(d.opt)
		if err == nil {
			err = s.connected(client)
		}
		d.mu.Lock()
		d.busy, d.err = false, err
		d.mu.Unlock()
	}()
	return err
}

// Close closes the client Open made and stops any attempt to make it; for a
// store made by New, which never owns its client, it does nothing and
// returns nil.
func (s *Store) Close() error {
	if s.dial == nil {
		return nil
	}
	s.dial.mu.Lock()
	defer s.dial.mu.Unlock()
	s.dial.closed = true
	if s.dial.client != nil {
		s.dial.client.Close()
	}
	return nil
}

// down is the client of a store made by Open while Redis cannot be reached:
// every call fails with the last attempt's error and asks for another.
type down struct{ st *Store }

func (d *down) err() error {
	return fmt.Errorf("rueidis: not connected to redis: %w", d.st.redial())
}

func (d *down) Cluster() bool { return false }

func (d *down) Eval(_ context.Context, evals []*redisstore.Eval, _ bool) {
	err := d.err()
	for _, e := range evals {
		e.Reply, e.Undo, e.NoScript, e.Err = "", nil, false, err
	}
}

func (d *down) Del(context.Context, string) error { return d.err() }

func (d *down) Slots(context.Context) ([]redisstore.SlotRange, error) { return nil, d.err() }

func (d *down) Ping(context.Context) error { return d.err() }

// Take implements core.Store.
func (s *Store) Take(ctx context.Context, t *core.Take) error { return s.s.Load().Take(ctx, t) }

// TakeLease implements core.Leaser, for rules with a core.Lease: one script
// call takes between need and size tokens from the bucket, on the key Take
// uses for it.
func (s *Store) TakeLease(ctx context.Context, b core.Bucket, need, size int64, now time.Time) (core.LeaseGrant, error) {
	return s.s.Load().TakeLease(ctx, b, need, size, now)
}

// ReturnLease implements core.Leaser: one script call gives n unused
// leased tokens back to the bucket, never filling it beyond its burst.
func (s *Store) ReturnLease(ctx context.Context, b core.Bucket, n int64, now time.Time) error {
	return s.s.Load().ReturnLease(ctx, b, n, now)
}

// Key returns the Redis key of bucket (rule, id), for inspection.
func (s *Store) Key(rule, id string) string { return s.s.Load().Key(rule, id) }

// Reset deletes bucket (rule, id), which is then full. Redis tells every
// instance's client-side cache; this instance also stops trusting what it
// knew of the bucket. It is meant for operators (unblocking a client), not
// for the request path.
func (s *Store) Reset(ctx context.Context, rule, id string) error {
	return s.s.Load().Reset(ctx, rule, id)
}

// BreakerStates reports the state of each failure domain's circuit
// breaker (WithBreaker): by Cluster master address, or "redis" for the
// whole server outside Cluster (and in Cluster until the slot map is
// known). Empty without WithBreaker. It is meant for health checks and
// metrics.
func (s *Store) BreakerStates() map[string]core.BreakerState { return s.s.Load().BreakerStates() }

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
	Refused     int64 // takes refused at once, wholly or in part, by an open circuit breaker
	Leases      int64 // leases taken (core.Leaser's TakeLease calls sent to Redis)
	Returns     int64 // leases given back (ReturnLease calls sent to Redis)
}

// Stats returns the store's counters (since it connected, for a store made
// by Open).
func (s *Store) Stats() Stats { return Stats(s.s.Load().Stats()) }

// Option configures a Store; pass options to New or Open, which apply them
// in order.
type Option interface{ apply(*redisstore.Config) }

type option func(*redisstore.Config)

func (f option) apply(c *redisstore.Config) { f(c) }
