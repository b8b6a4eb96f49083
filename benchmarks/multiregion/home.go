package multiregion

import (
	"context"
	"errors"
	"sync"

	"github.com/bucketry/ratelimit/core"
)

// Home is strategy (a), one home region per key: every region's limiters
// use the home region's Redis, the remote regions through the network. It
// is exact while the network holds: one bucket, one script, one clock. A
// remote decision pays a round trip between regions, and during a
// partition the remote regions' store calls fail (at once on a reset, at
// the timeout on silence) and their failure mode decides. Home is safe for
// concurrent use.
type Home struct {
	regions  []*instances
	closed   sync.Once
	closeErr error
}

// NewHome returns the home strategy for g over the regions whose Redis
// addresses are addrs (the home's is used; the others' are not), routing
// the remote regions through n. It fails with an error wrapping ErrInvalid
// for fewer than two regions, an invalid g or option, or a home out of
// range, and with the store's error if a client cannot be made.
func NewHome(addrs []string, n *Net, g Global, opts ...Option) (*Home, error) {
	cfg, err := newConfig("NewHome", len(addrs), g, opts)
	if err != nil {
		return nil, err
	}
	p, err := policy(g.Rate, g.Burst)
	if err != nil {
		return nil, err
	}
	h := &Home{}
	for r := range addrs {
		addr, err := n.Route(r, cfg.home, addrs[cfg.home])
		if err != nil {
			h.Close()
			return nil, err
		}
		in, err := newInstances(cfg, addr, p)
		if err != nil {
			h.Close()
			return nil, err
		}
		h.regions = append(h.regions, in)
	}
	return h, nil
}

// Name returns "home".
func (h *Home) Name() string { return "home" }

// Allow decides a request of region r on the home region's bucket.
func (h *Home) Allow(ctx context.Context, r int) (core.Decision, error) {
	if err := checkRegion(r, len(h.regions)); err != nil {
		return core.Decision{}, err
	}
	return h.regions[r].pick().Allow(ctx, core.Request{})
}

// Warm warms every region's instances (see Strategy).
func (h *Home) Warm(ctx context.Context) error {
	for _, in := range h.regions {
		if err := in.warm(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close closes every client. Later calls return the first call's result.
func (h *Home) Close() error {
	h.closed.Do(func() {
		var errs []error
		for _, in := range h.regions {
			errs = append(errs, in.close())
		}
		h.closeErr = errors.Join(errs...)
	})
	return h.closeErr
}
