package redistest

import (
	"fmt"
	"time"
)

// Option changes how servers are started. The zero set of options gives a
// 20s start timeout, no extra arguments, a cluster of 3 masters without
// replicas, plain TCP and only the default user.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	masters      int // WithMasters
	replicas     int
	args         []string
	startTimeout time.Duration
	tls          bool      // WithTLS
	certs        *certs    // made by newConfig when tls is set
	users        []aclUser // WithACLUser
}

func newConfig(opts []Option) (*config, error) {
	c := &config{masters: clusterMasters, startTimeout: 20 * time.Second}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	if c.masters < 1 || c.masters > SlotCount {
		return nil, fmt.Errorf("redistest: WithMasters: count must be between 1 and %d, got %d", SlotCount, c.masters)
	}
	if c.replicas < 0 {
		return nil, fmt.Errorf("redistest: WithReplicas: count must be >= 0, got %d", c.replicas)
	}
	if c.startTimeout <= 0 {
		return nil, fmt.Errorf("redistest: WithStartTimeout: timeout must be > 0, got %v", c.startTimeout)
	}
	seen := make(map[string]bool)
	for _, u := range c.users {
		if err := u.check(seen); err != nil {
			return nil, err
		}
		seen[u.name] = true
	}
	if c.tls {
		var err error
		if c.certs, err = newCerts(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// WithReplicas gives every master of a [Cluster] n replicas (0 by default).
// Other topologies ignore it: [Sentinel] always has exactly one replica.
func WithReplicas(n int) Option {
	return optionFunc(func(c *config) { c.replicas = n })
}

// WithMasters gives a [Cluster] n masters (3 by default), between 1 and
// 16384 (one slot each at most); the 16384 slots are split evenly among
// them, in order (see [ClusterServer.Masters]), and [WithReplicas] gives
// each of them its replicas. Use it to measure how work spreads over
// masters. Other topologies ignore it.
func WithMasters(n int) Option {
	return optionFunc(func(c *config) { c.masters = n })
}

// WithArgs appends command-line arguments to every redis-server that holds
// data (not to the sentinel), after the harness's own, so they can override
// them: WithArgs("--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru").
// Do not require a password: [Server.Do] does not authenticate (add
// users with [WithACLUser] instead).
func WithArgs(args ...string) Option {
	return optionFunc(func(c *config) { c.args = append(c.args, args...) })
}

// WithStartTimeout bounds how long starting waits for servers to become
// ready (20s by default): the processes answering and, for a cluster or
// a sentinel, the whole topology being up. It also bounds [Server.Restart]
// and [ClusterServer.WaitHealthy].
func WithStartTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.startTimeout = d })
}
