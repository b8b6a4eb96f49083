package redisstore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
)

// Config is what the stores' options set: each store's With* options apply
// one of the settings below (Prefix, Timeout, ...), and Open validates the
// result. It is not safe for concurrent use.
type Config struct {
	name      string        // the store's package, first in every error
	prefix    string        // key prefix; "ratelimit" by default
	hashAll   bool          // hash every identity with secret
	secret    []byte        // the HMAC key when hashAll
	clock     core.Clock    // nil: the Redis server's TIME
	timeout   time.Duration // bound on each Take's wait, > 0
	failures  int           // breaker threshold; 0: no breakers
	cooldown  time.Duration // breaker cooldown
	breaker   bool          // WithBreaker was given
	require   bool          // Redis must answer at construction
	minTTL    time.Duration // least life of a written key; 0: exact
	local     bool          // answer provable denials locally
	localKeys int           // bucket keys the cached local denials track
	noBatch   bool          // one script call per request
	logger    *slog.Logger  // nil: no logging
	errs      []error
}

// DefaultTimeout bounds the wait of each Take when WithTimeout does not say
// otherwise. A script call takes well under a millisecond on a healthy
// network; 100ms is two orders of magnitude above that, room for a Cluster
// redirect or a reconnect, yet short enough that a dead or hung Redis costs
// a request no more than a slow upstream would.
const DefaultTimeout = 100 * time.Millisecond

// defaultLocalKeys bounds the keys that local denials from client-side
// cached state track, by default.
const defaultLocalKeys = 100_000

// configure returns the configuration of the store of package name with
// opts applied in order by apply. A nil option is not applied: newStore
// then fails naming its position, counted from 0.
func configure[O comparable](name string, opts []O, apply func(O, *Config)) Config {
	c := Config{name: name, prefix: "ratelimit", localKeys: defaultLocalKeys, timeout: DefaultTimeout}
	var none O
	for i, o := range opts {
		if o == none {
			c.Fail("option %d is nil", i)
			continue
		}
		apply(o, &c)
	}
	return c
}

// Fail records a configuration error, which Open returns wrapping
// core.ErrInvalidOption and naming the store.
func (c *Config) Fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: %s: "+format, append([]any{core.ErrInvalidOption, c.name}, args...)...))
}

// The settings of the stores' options, each named after its option (see
// the With* documentation of adapters/goredis and adapters/rueidis). Each
// store's option applies one.

// Prefix sets the key prefix.
func Prefix(p string) func(*Config) { return func(c *Config) { c.prefix = p } }

// HashedIdentities hashes every identity with secret, a copy of which it
// keeps: a caller may wipe its own after the option is made.
func HashedIdentities(secret []byte) func(*Config) {
	secret = bytes.Clone(secret)
	return func(c *Config) { c.hashAll, c.secret = true, secret }
}

// ClientClock decides at clock's time; a nil clock is an error.
func ClientClock(clock core.Clock) func(*Config) {
	return func(c *Config) {
		if IsNil(clock) {
			c.Fail("WithClientClock: nil clock")
			return
		}
		c.clock = clock
	}
}

// Breaker gives every failure domain a circuit breaker.
func Breaker(failures int, cooldown time.Duration) func(*Config) {
	return func(c *Config) { c.breaker, c.failures, c.cooldown = true, failures, cooldown }
}

// RequireRedis makes the constructor fail when Redis does not answer.
func RequireRedis(c *Config) { c.require = true }

// Timeout bounds each Take.
func Timeout(d time.Duration) func(*Config) { return func(c *Config) { c.timeout = d } }

// MinTTL keeps every key written for at least d.
func MinTTL(d time.Duration) func(*Config) { return func(c *Config) { c.minTTL = d } }

// LocalDenialKeys bounds the keys that cached local denials track.
func LocalDenialKeys(n int) func(*Config) { return func(c *Config) { c.localKeys = n } }

// LocalDenials answers provable denials locally.
func LocalDenials(c *Config) { c.local = true }

// Logger logs breaker transitions through logger; nil is an error.
func Logger(logger *slog.Logger) func(*Config) {
	return func(c *Config) {
		if logger == nil {
			c.Fail("WithLogger: logger is nil")
			return
		}
		c.logger = logger
	}
}

// NoBatching sends every request in a script call of its own.
func NoBatching(c *Config) { c.noBatch = true }

// check validates c and returns its key namer. The error joins every
// problem found, each wrapping core.ErrInvalidOption.
func (c *Config) check() (*redisscript.Keys, error) {
	if c.timeout <= 0 {
		c.Fail("WithTimeout: the timeout must be > 0, got %v", c.timeout)
	}
	if c.breaker {
		if c.failures < 1 || c.failures > core.MaxBreakerFailures {
			c.Fail("WithBreaker: failures must be between 1 and %d, got %d", core.MaxBreakerFailures, c.failures)
		}
		if c.cooldown <= 0 {
			c.Fail("WithBreaker: cooldown must be > 0, got %v", c.cooldown)
		}
	}
	if c.minTTL < 0 || c.minTTL > core.MaxSpan {
		c.Fail("WithMinTTL: the TTL must be between 0 and %v, got %v", core.MaxSpan, c.minTTL)
	}
	if c.localKeys < 1 {
		c.Fail("WithLocalDenialKeys: local denial keys must be >= 1, got %d", c.localKeys)
	}
	if c.prefix == "" {
		c.Fail("WithPrefix: the key prefix must not be empty")
	} else if err := core.CheckKey(c.prefix); err != nil {
		c.Fail("WithPrefix(%q): %v", c.prefix, err)
	}
	if c.hashAll && len(c.secret) < 16 {
		c.Fail("WithHashedIdentities: the secret must be at least 16 bytes, got %d", len(c.secret))
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return redisscript.NewKeys(c.prefix, c.hashAll, c.secret)
}

// Required reports whether RequireRedis was applied.
func (c *Config) Required() bool { return c.require }

// NotRequired undoes RequireRedis: for a stand-in client that must not be
// asked.
func NotRequired(c *Config) { c.require = false }

// CheckAddr returns an error unless a is host:port with a port in
// 1..65535: the stores refuse an empty or malformed address rather than
// let a client default it.
func CheckAddr(a string) error {
	if a == "" {
		return errors.New("empty address")
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("address %q: %w", a, err)
	}
	if host == "" {
		return fmt.Errorf("address %q has no host", a)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("address %q: port must be 1 to 65535", a)
	}
	return nil
}
