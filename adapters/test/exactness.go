package redistests

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
)

// NewStore returns a store with the options o on a client of its own: on
// the test's Redis Cluster when cluster is set, else on its standalone
// server. It fails t if the store cannot be built.
type NewStore func(t testing.TB, cluster bool, o Options) core.Store

// RunDistributedExactness checks what several instances of a service
// sharing limits through Redis admit together: four store instances, each
// on a client of its own, with 16 goroutines each, hammer one global bucket
// with the clock frozen, so that no token is ever refilled, and exactly the
// burst must get in, not one request more or less. Standalone and Cluster,
// batched or not, with local denials, and with roomier tiers that denied
// requests must not be charged for; in Cluster the tiers' keys lie in
// several slots, so refunds are in play.
func RunDistributedExactness(t *testing.T, newStore NewStore) {
	const (
		burst      = 250
		instances  = 4
		goroutines = 16 // per instance
		requests   = 3 * burst / goroutines
	)
	for _, tc := range []struct {
		name    string
		cluster bool
		tiers   int
		opts    Options
	}{
		{"standalone", false, 1, Options{}},
		{"standalone_3_tiers", false, 3, Options{}},
		{"standalone_unbatched", false, 1, Options{Unbatched: true}},
		{"standalone_local_denials", false, 2, Options{LocalDenials: true}},
		{"cluster", true, 1, Options{}},
		{"cluster_3_tiers_across_slots", true, 3, Options{}},
		{"cluster_3_tiers_local_denials", true, 3, Options{LocalDenials: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Prefix, o.Clock = NewPrefix(), core.NewManualClock(T0)
			var rules []core.Rule
			for i := range tc.tiers {
				// The first tier is the tight one; the others have room but
				// must not be charged for denied requests.
				b := int64(burst)
				if i > 0 {
					b = 10 * burst
				}
				rules = append(rules, core.Rule{Name: "tier" + strconv.Itoa(i), Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerMinute(1), b)})
			}
			p := Policy(t, rules...)
			var admitted, denied atomic.Int64
			var wg sync.WaitGroup
			for i := range instances {
				st := newStore(t, tc.cluster, o)
				if i == 0 && tc.cluster && tc.tiers > 1 {
					keys, ok := st.(interface{ Key(rule, id string) string })
					if !ok {
						t.Fatalf("%T has no Key method to check the tiers' slots", st)
					}
					slots := map[int]bool{}
					for _, r := range rules {
						slots[redisscript.Slot(keys.Key(r.Name, "*"))] = true
					}
					if len(slots) < 2 {
						t.Fatalf("the tiers' keys share one slot; pick other names")
					}
				}
				l := Limiter(t, p, core.WithStore(st), core.WithFailureMode(core.FailClosed))
				for range goroutines {
					wg.Go(func() {
						for range requests {
							d, err := l.Allow(context.Background(), core.Request{})
							switch {
							case err != nil:
								t.Error(err)
								return
							case d.Allowed:
								admitted.Add(1)
							default:
								denied.Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			if admitted.Load() != burst {
				t.Fatalf("admitted %d of %d requests, want exactly the burst %d", admitted.Load(), admitted.Load()+denied.Load(), burst)
			}
			// Denied requests took nothing from the roomier tiers.
			if tc.tiers > 1 {
				o := Options{Prefix: o.Prefix, Clock: o.Clock}
				l := Limiter(t, Policy(t, rules[1:]...), core.WithStore(newStore(t, tc.cluster, o)))
				d, err := l.AllowN(context.Background(), core.Request{}, 0)
				if err != nil || d.Remaining != 10*burst-burst {
					t.Fatalf("roomy tiers: %+v, %v; want %d remaining", d, err, 10*burst-burst)
				}
			}
		})
	}
}
