package multiregion

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/bucketry/ratelimit/adapters/goredis"
	"github.com/bucketry/ratelimit/core"
	"github.com/redis/go-redis/v9"
)

// Global is the one limit that every region's requests share: a token
// bucket of Rate tokens per second and Burst tokens, full at the start.
type Global struct {
	Rate  int64 // tokens per second, >= 1
	Burst int64 // tokens, >= 1
}

// allowance returns the most the global bucket admits in elapsed from
// full: Burst + Rate × elapsed, in tokens.
func (g Global) allowance(elapsed time.Duration) float64 {
	return float64(g.Burst) + float64(g.Rate)*elapsed.Seconds()
}

// interval returns the time between two tokens.
func (g Global) interval() time.Duration { return time.Second / time.Duration(g.Rate) }

func (g Global) check(fn string) error {
	if g.Rate < 1 || g.Burst < 1 {
		return fmt.Errorf("%w: %s: Global rate and burst must be >= 1, got %d/s and %d", ErrInvalid, fn, g.Rate, g.Burst)
	}
	if time.Second%time.Duration(g.Rate) != 0 {
		// Reconciliation computes instants from the interval between
		// tokens, which must then be exact.
		return fmt.Errorf("%w: %s: Global rate must divide 1e9, got %d/s", ErrInvalid, fn, g.Rate)
	}
	return nil
}

// Strategy decides the requests of every region against one Global limit.
// Implementations are safe for concurrent use.
type Strategy interface {
	// Name is a short label for reports: "home", "budgets", "reconcile".
	Name() string
	// Allow decides one request arriving in region r (an index into the
	// addresses the strategy was made with) on one of that region's
	// limiter instances. Its decision and error are the limiter's.
	Allow(ctx context.Context, r int) (core.Decision, error)
	// Warm reads the bucket (core.Limiter.Inspect) on every limiter
	// instance until each read succeeds, so that connections are made and
	// the script is loaded, as in a service that has been running: a cold
	// remote client needs several round trips, which can exceed the
	// timeout. It returns ctx's error if ctx ends first, and an error if
	// an instance's reads fail 20 times in a row.
	Warm(ctx context.Context) error
	// Close stops the strategy's background work and closes its clients.
	Close() error
}

// ruleName is the name of the one rule every limiter of a simulation has.
const ruleName = "global"

// policy returns a policy of one global token bucket.
func policy(rate, burst int64) (*core.Policy, error) {
	return core.NewPolicy(core.Rule{Name: ruleName, Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerSecond(rate), burst)})
}

// Option configures a strategy. Each option says which strategies use it;
// the others ignore it.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	instances int
	failure   core.FailureMode
	timeout   time.Duration
	sync      time.Duration
	epoch     time.Duration
	floor     int64 // 0: see checkFloor
	home      int
	errs      []error
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
}

// Defaults of the options.
const (
	// DefaultInstances is WithInstances' default: limiter instances per
	// region.
	DefaultInstances = 2
	// DefaultTimeout is WithTimeout's default.
	DefaultTimeout = 500 * time.Millisecond
	// DefaultSyncInterval is WithSyncInterval's default.
	DefaultSyncInterval = 100 * time.Millisecond
	// DefaultEpoch is WithEpoch's default.
	DefaultEpoch = 250 * time.Millisecond
)

func newConfig(fn string, n int, g Global, opts []Option) (*config, error) {
	c := &config{instances: DefaultInstances, failure: core.FailOpen, timeout: DefaultTimeout, sync: DefaultSyncInterval, epoch: DefaultEpoch}
	for i, o := range opts {
		if o == nil {
			c.fail("%s: option %d is nil", fn, i)
			continue
		}
		o.apply(c)
	}
	if n < 2 {
		c.fail("%s: at least 2 regions, got %d", fn, n)
	}
	if err := g.check(fn); err != nil {
		c.errs = append(c.errs, err)
	}
	if c.home < 0 || c.home >= n {
		c.fail("WithHome: region %d of %d", c.home, n)
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return c, nil
}

// checkFloor sets budgets' default floor if none was given, and returns
// an error wrapping ErrInvalid if n regions cannot all have the floor or
// the floor's share of the burst is less than a token.
func (c *config) checkFloor(n int, g Global) error {
	if c.floor == 0 {
		// Rate/20, but at least a token of burst.
		c.floor = max(g.Rate/20, (g.Rate+g.Burst-1)/g.Burst)
	}
	if c.floor*int64(n) > g.Rate {
		return fmt.Errorf("%w: WithFloor: %d regions × %d/s exceed the global %d/s", ErrInvalid, n, c.floor, g.Rate)
	}
	if c.floor*g.Burst < g.Rate {
		return fmt.Errorf("%w: WithFloor: a floor of %d/s gives less than one token of burst (%d × %d / %d)", ErrInvalid, c.floor, g.Burst, c.floor, g.Rate)
	}
	return nil
}

// WithInstances sets how many limiter instances each region runs, each
// with its own Redis client; requests go to them in turn. Default
// DefaultInstances; it must be >= 1. All strategies.
func WithInstances(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.fail("WithInstances: must be >= 1, got %d", n)
			return
		}
		c.instances = n
	})
}

// WithFailureMode sets the limiters' failure mode (core.WithFailureMode).
// Default core.FailOpen. It matters for home, whose remote regions reach
// Redis across the network; the other strategies use a local Redis only.
func WithFailureMode(m core.FailureMode) Option {
	return optionFunc(func(c *config) { c.failure = m })
}

// WithTimeout bounds every store call of every limiter (core.WithTimeout
// and the store's own goredis.WithTimeout). Default DefaultTimeout: at
// 40ms one way, a call queued behind another, on a new connection (whose
// handshake is one more round trip), takes up to four round trips, 320ms.
// A timeout below that lets one slow call start a spiral: go-redis drops a
// connection whose call timed out, so the next call pays the handshake
// again and times out in turn. It must be > 0. All strategies.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("WithTimeout: must be > 0, got %v", d)
			return
		}
		c.timeout = d
	})
}

// WithHome sets the home region of the key, an index into the addresses.
// Default 0. Home only.
func WithHome(r int) Option { return optionFunc(func(c *config) { c.home = r }) }

// WithSyncInterval sets how often each region publishes its consumption to
// the others. Default DefaultSyncInterval; it must be > 0. Reconcile only.
func WithSyncInterval(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("WithSyncInterval: must be > 0, got %v", d)
			return
		}
		c.sync = d
	})
}

// WithEpoch sets the length of a budget epoch: shares change at most once
// per epoch, from the demand of the epoch before the previous one. Default
// DefaultEpoch; it must be > 0 and should exceed twice the one-way latency
// (reports and acknowledgments each have half an epoch to arrive). Budgets
// only.
func WithEpoch(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("WithEpoch: must be > 0, got %v", d)
			return
		}
		c.epoch = d
	})
}

// WithFloor sets the least rate, in tokens per second, a region's budget
// ever gets. Default Rate/20, raised if need be to give a token of burst;
// regions × floor must not exceed Rate, and the floor's share of the burst
// must be at least one token. Budgets only.
func WithFloor(perSecond int64) Option {
	return optionFunc(func(c *config) {
		if perSecond < 1 {
			c.fail("WithFloor: must be >= 1, got %d", perSecond)
			return
		}
		c.floor = perSecond
	})
}

// minIdleConns is the idle connections each client keeps ready.
const minIdleConns = 4

// instances is one region's limiters, used in turn.
type instances struct {
	limiters []*core.Limiter
	stores   []*goredis.Store
	next     atomic.Uint32
}

// newInstances builds n limiters on policy p, each with its own client to
// addr.
func newInstances(cfg *config, addr string, p *core.Policy, storeOpts ...goredis.Option) (*instances, error) {
	in := &instances{}
	for range cfg.instances {
		// Warm idle connections: go-redis drops a connection whose call
		// timed out, and a new one costs a handshake round trip before the
		// next call can go; MinIdleConns has spares made in the background.
		o := &redis.UniversalOptions{Addrs: []string{addr}, MinIdleConns: minIdleConns}
		s, err := goredis.Open(o, append([]goredis.Option{goredis.WithTimeout(cfg.timeout)}, storeOpts...)...)
		if err != nil {
			in.close()
			return nil, err
		}
		in.stores = append(in.stores, s)
		l, err := core.NewLimiter(p, core.WithStore(s), core.WithFailureMode(cfg.failure), core.WithTimeout(cfg.timeout))
		if err != nil {
			in.close()
			return nil, err
		}
		in.limiters = append(in.limiters, l)
	}
	return in, nil
}

// pick returns the next limiter in turn.
func (in *instances) pick() *core.Limiter {
	return in.limiters[int(in.next.Add(1))%len(in.limiters)]
}

// warmTries is how many reads warm makes of each limiter before it gives
// up; each read is bounded by the timeout.
const warmTries = 20

// warm reads the bucket on every limiter until each read succeeds.
func (in *instances) warm(ctx context.Context) error {
	for i, l := range in.limiters {
		var last error
		for try := 0; ; try++ {
			d, err := l.Inspect(ctx, core.Request{})
			if err == nil && !d.Degraded {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if last = err; last == nil {
				last = d.Err
			}
			if try == warmTries-1 {
				return fmt.Errorf("multiregion: warm: instance %d: %d reads failed, the last with: %w", i, warmTries, last)
			}
		}
	}
	return nil
}

// setPolicy gives every limiter p.
func (in *instances) setPolicy(p *core.Policy) error {
	for _, l := range in.limiters {
		if err := l.SetPolicy(p); err != nil {
			return err
		}
	}
	return nil
}

func (in *instances) close() error {
	var errs []error
	for _, s := range in.stores {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkRegion returns an error for a region index out of range.
func checkRegion(r, n int) error {
	if r < 0 || r >= n {
		return fmt.Errorf("%w: region %d of %d", ErrInvalid, r, n)
	}
	return nil
}
