package multiregion

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrInvalid is wrapped by the errors of constructors and options given a
// value that cannot work; the message names the function or option.
var ErrInvalid = errors.New("multiregion: invalid argument")

// Net is the network between the regions of a simulation: a Proxy with the
// same one-way latency for every route from one region to an address in
// another, and nothing within a region. Cut and Heal act on every route at
// once: a partition that isolates every region from every other. A Net is
// safe for concurrent use; the zero value is not usable, make one with
// NewNet.
type Net struct {
	latency time.Duration

	mu      sync.Mutex
	proxies []*Proxy
	cut     bool
	closed  bool
}

// NewNet returns a network whose routes between regions add latency (>= 0)
// in each direction. It fails with an error wrapping ErrInvalid for a
// negative latency.
func NewNet(latency time.Duration) (*Net, error) {
	if latency < 0 {
		return nil, fmt.Errorf("%w: NewNet: latency must be >= 0, got %v", ErrInvalid, latency)
	}
	return &Net{latency: latency}, nil
}

// Latency returns the one-way latency between two regions.
func (n *Net) Latency() time.Duration { return n.latency }

// Route returns the address a client in region from dials to reach addr in
// region to: addr itself when from == to, otherwise the address of a new
// Proxy to addr, cut if the network is. It fails with an error wrapping
// ErrClosed after Close.
func (n *Net) Route(from, to int, addr string) (string, error) {
	if from == to {
		return addr, nil
	}
	p, err := NewProxy(addr, n.latency)
	if err != nil {
		return "", err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		p.Close()
		return "", fmt.Errorf("%w: Net.Route", ErrClosed)
	}
	if n.cut {
		p.Cut()
	}
	n.proxies = append(n.proxies, p)
	return p.Addr(), nil
}

// Cut partitions every region from every other (see Proxy.Cut).
func (n *Net) Cut() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = true
	for _, p := range n.proxies {
		p.Cut()
	}
}

// Heal ends the partition (see Proxy.Heal).
func (n *Net) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = false
	for _, p := range n.proxies {
		p.Heal()
	}
}

// Close closes every proxy. A second call returns nil.
func (n *Net) Close() error {
	n.mu.Lock()
	ps := n.proxies
	n.proxies, n.closed = nil, true
	n.mu.Unlock()
	var errs []error
	for _, p := range ps {
		if err := p.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
