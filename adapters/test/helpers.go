package redistests

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
)

// T0 is the first named instant of the tests' timelines and the instant of
// their frozen clocks: midnight UTC, 1 January 2026.
var T0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// prefixes gives every store of a test binary its own key space.
var prefixes atomic.Int64

// NewPrefix returns a key prefix that no other store of the test binary
// has, so that cases sharing a server never see each other's buckets.
func NewPrefix() string { return fmt.Sprintf("t%d", prefixes.Add(1)) }

// Options are the store options the shared tests set; a store's Kit turns
// them into its own.
type Options struct {
	Prefix       string        // WithPrefix; "" for a NewPrefix
	Clock        core.Clock    // WithClientClock; nil for the server's TIME
	MinTTL       time.Duration // WithMinTTL; 0 for none
	Unbatched    bool          // WithoutBatching
	LocalDenials bool          // WithLocalDenials
	// Timeout is WithTimeout; 0 for TestTimeout. Tests of what a store
	// decides must not fail because a -race binary on a busy machine
	// was slow: those of how long it waits set their own.
	Timeout time.Duration
}

// TestTimeout is the bound on a Take's wait in shared tests that set none.
const TestTimeout = 10 * time.Second

// Kit is what the shared tests need of one store: its constructor, and
// its option constructors, one for each field of Options.
type Kit[C, O any, S core.Store] struct {
	New          func(client C, opts ...O) (S, error)
	Prefix       func(string) O
	Clock        func(core.Clock) O
	MinTTL       func(time.Duration) O
	Unbatched    func() O
	LocalDenials func() O
	Timeout      func(time.Duration) O
}

// Options returns the options that o names, then extra.
func (k Kit[C, O, S]) Options(o Options, extra ...O) []O {
	if o.Prefix == "" {
		o.Prefix = NewPrefix()
	}
	if o.Timeout == 0 {
		o.Timeout = TestTimeout
	}
	opts := []O{k.Prefix(o.Prefix), k.Timeout(o.Timeout)}
	if o.Clock != nil {
		opts = append(opts, k.Clock(o.Clock))
	}
	if o.MinTTL > 0 {
		opts = append(opts, k.MinTTL(o.MinTTL))
	}
	if o.Unbatched {
		opts = append(opts, k.Unbatched())
	}
	if o.LocalDenials {
		opts = append(opts, k.LocalDenials())
	}
	return append(opts, extra...)
}

// Store returns a store on client with the options that o names, then
// extra, failing t if it cannot be built.
func (k Kit[C, O, S]) Store(t testing.TB, client C, o Options, extra ...O) S {
	t.Helper()
	s, err := k.New(client, k.Options(o, extra...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// Harness is the conformance harness of the stores newStore returns, each
// with a prefix of its own, the suite's clock and keys kept for an hour:
// Redis expires keys by its own clock, not the suite's.
func Harness(newStore func(t testing.TB, o Options) core.Store) conformance.StoreHarness {
	return conformance.StoreHarness{
		New: func(t testing.TB, clock core.Clock) core.Store {
			return newStore(t, Options{Clock: clock, MinTTL: time.Hour})
		},
	}
}

// Policy returns the policy of rules, failing t if it is invalid.
func Policy(t testing.TB, rules ...core.Rule) *core.Policy {
	t.Helper()
	p, err := core.NewPolicy(rules...)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

// Limiter returns a limiter of p, failing t on error.
func Limiter(t testing.TB, p *core.Policy, opts ...core.Option) *core.Limiter {
	t.Helper()
	l, err := core.NewLimiter(p, opts...)
	if err != nil {
		t.Fatalf("NewLimiter: %v", err)
	}
	return l
}

// Limits returns validated limits, one per argument, from a policy with one
// rule per limit, named r0, r1, ...
func Limits(t testing.TB, ls ...core.Limit) []*core.Limit {
	t.Helper()
	var rules []core.Rule
	for i, l := range ls {
		rules = append(rules, core.Rule{Name: "r" + strconv.Itoa(i), Scope: core.ScopeUser, Limit: l})
	}
	kept := Policy(t, rules...).Rules()
	out := make([]*core.Limit, len(kept))
	for i := range kept {
		out[i] = &kept[i].Limit
	}
	return out
}

// Take runs one Take of cost on bs at now (zero: the store's clock) and
// fails t on error.
func Take(t testing.TB, s core.Store, now time.Time, cost int64, bs ...core.Bucket) *core.Take {
	t.Helper()
	tk := &core.Take{Now: now, Cost: cost, Buckets: bs, States: make([]core.BucketState, len(bs))}
	if err := s.Take(context.Background(), tk); err != nil {
		t.Fatalf("Take(cost %d): %v", cost, err)
	}
	return tk
}

// Allowed reports whether every bucket of tk allowed it.
func Allowed(tk *core.Take) bool {
	for _, st := range tk.States {
		if !st.Allowed {
			return false
		}
	}
	return true
}

// SplitID returns the first identity base0, base1, ... whose keys under
// rules, as key names them, lie in as many Cluster hash slots as there are
// rules, so that a take on them spans slots.
func SplitID(key func(rule, id string) string, base string, rules ...string) string {
	for i := 0; ; i++ {
		id := base + strconv.Itoa(i)
		slots := map[int]bool{}
		for _, r := range rules {
			slots[redisscript.Slot(key(r, id))] = true
		}
		if len(slots) == len(rules) {
			return id
		}
	}
}

// SameSlotRule returns a rule name, base followed by a number, whose bucket
// of id lies in the hash slot of rule's: in Cluster, one script call takes
// the two.
func SameSlotRule(key func(rule, id string) string, rule, id, base string) string {
	want := redisscript.Slot(key(rule, id))
	for i := 0; ; i++ {
		if r := base + strconv.Itoa(i); redisscript.Slot(key(r, id)) == want {
			return r
		}
	}
}

// MetricsAfterDecisions decides four requests of one user on s, under a
// rule of burst 2 an hour, checking that the first two are allowed and the
// others denied, none degraded; then it returns s's metrics, each keyed
// "name{label=value}", in the order s reported them.
func MetricsAfterDecisions(t testing.TB, s interface {
	core.Store
	core.MetricSource
}) (got map[string]float64, order []string) {
	t.Helper()
	p := Policy(t, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 2)})
	l := Limiter(t, p, core.WithStore(s))
	for i, want := range []bool{true, true, false, false} {
		d, err := l.Allow(context.Background(), core.Request{User: "alice"})
		if err != nil || d.Allowed != want || d.Degraded {
			t.Fatalf("Allow %d = allowed %v, degraded %v, %v; want allowed %v", i, d.Allowed, d.Degraded, err, want)
		}
	}
	got = map[string]float64{}
	s.CollectMetrics(func(m core.Metric) {
		k := fmt.Sprintf("%s{%s}", m.Name, strings.Join(m.Labels, "="))
		got[k] = m.Value
		order = append(order, k)
	})
	return got, order
}
