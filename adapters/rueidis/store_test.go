package rueidis_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	rstore "github.com/bucketry/ratelimit/adapters/rueidis"
	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
	"github.com/bucketry/ratelimit/internal/redistest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The servers are shared by the tests of this binary: each is started on
// first use and stopped by TestMain. Tests run one at a time, and every
// store has its own prefix.
var servers struct {
	mu         sync.Mutex
	standalone *redistest.Server
	cluster    *redistest.ClusterServer
	sentinel   *redistest.SentinelServer
	stops      []func()
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, stop := range servers.stops {
		stop()
	}
	os.Exit(code)
}

// shared returns *p, starting it with start on first use; a server that
// cannot start fails t.
func shared[S any](t testing.TB, p **S, start func(...redistest.Option) (*S, func(), error)) *S {
	t.Helper()
	servers.mu.Lock()
	defer servers.mu.Unlock()
	if *p == nil {
		s, stop, err := start()
		if err != nil {
			t.Fatal(err)
		}
		*p = s
		servers.stops = append(servers.stops, stop)
	}
	return *p
}

func sharedStandalone(t testing.TB) *redistest.Server {
	return shared(t, &servers.standalone, redistest.StartStandalone)
}

func sharedCluster(t testing.TB) *redistest.ClusterServer {
	return shared(t, &servers.cluster, redistest.StartCluster)
}

func sharedSentinel(t testing.TB) *redistest.SentinelServer {
	return shared(t, &servers.sentinel, redistest.StartSentinel)
}

// prefixes gives every store of the test binary its own key space, so cases
// sharing one server never see each other's buckets.
var prefixes atomic.Int64

func newPrefix() string { return fmt.Sprintf("t%d", prefixes.Add(1)) }

func newClient(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func standaloneOpt(srv *redistest.Server) rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: []string{srv.Addr}}
}

func clusterOpt(cl *redistest.ClusterServer) rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: cl.Addrs()}
}

func sentinelOpt(s *redistest.SentinelServer) rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress: []string{s.SentinelAddr},
		Sentinel:    rueidis.SentinelOption{MasterSet: s.MasterName},
	}
}

// harness builds each case's store on one client shared by the whole suite:
// every store has its own prefix, so they never meet. Keys live at least an
// hour: Redis expires them by its own clock, not the suite's.
func harness(client rueidis.Client, opts ...rstore.Option) conformance.StoreHarness {
	return conformance.StoreHarness{
		New: func(t testing.TB, clock core.Clock) core.Store {
			o := append([]rstore.Option{rstore.WithPrefix(newPrefix()), rstore.WithClientClock(clock), rstore.WithMinTTL(time.Hour)}, opts...)
			s, err := rstore.New(client, o...)
			if err != nil {
				t.Fatalf("rueidis store New: %v", err)
			}
			return s
		},
	}
}

func mustStore(t testing.TB, c rueidis.Client, opts ...rstore.Option) *rstore.Store {
	t.Helper()
	s, err := rstore.New(c, append([]rstore.Option{rstore.WithPrefix(newPrefix())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustPolicy(t testing.TB, rules ...core.Rule) *core.Policy {
	t.Helper()
	p, err := core.NewPolicy(rules...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// limits returns validated limits, one per argument, from a policy.
func limits(t testing.TB, ls ...core.Limit) []*core.Limit {
	t.Helper()
	var rules []core.Rule
	for i, l := range ls {
		rules = append(rules, core.Rule{Name: "r" + strconv.Itoa(i), Scope: core.ScopeUser, Limit: l})
	}
	kept := mustPolicy(t, rules...).Rules()
	out := make([]*core.Limit, len(kept))
	for i := range kept {
		out[i] = &kept[i].Limit
	}
	return out
}

// take runs one Take at now (zero: the store's clock) and fails t on error.
func take(t testing.TB, s core.Store, now time.Time, cost int64, bs ...core.Bucket) *core.Take {
	t.Helper()
	tk := &core.Take{Now: now, Cost: cost, Buckets: bs, States: make([]core.BucketState, len(bs))}
	if err := s.Take(context.Background(), tk); err != nil {
		t.Fatalf("Take(cost %d): %v", cost, err)
	}
	return tk
}

func allowed(tk *core.Take) bool {
	for _, st := range tk.States {
		if !st.Allowed {
			return false
		}
	}
	return true
}

// The conformance suite on every topology and mode.

func TestConformanceStandalone(t *testing.T) {
	srv := sharedStandalone(t)
	conformance.RunStoreSuite(t, harness(newClient(t, standaloneOpt(srv))))
}

func TestConformanceCluster(t *testing.T) {
	cl := sharedCluster(t)
	conformance.RunStoreSuite(t, harness(newClient(t, clusterOpt(cl))))
}

func TestConformanceSentinel(t *testing.T) {
	s := sharedSentinel(t)
	c := newClient(t, sentinelOpt(s))
	if c.Mode() != rueidis.ClientModeSentinel {
		t.Fatalf("client mode %q, want sentinel", c.Mode())
	}
	conformance.RunStoreSuite(t, harness(c))
}

func TestConformanceWithoutBatching(t *testing.T) {
	srv := sharedStandalone(t)
	conformance.RunStoreSuite(t, harness(newClient(t, standaloneOpt(srv)), rstore.WithoutBatching()))
}

// TestConformanceLocalDenials runs both suites with client-side caching:
// every local denial must be exactly what the script would have answered.
func TestConformanceLocalDenials(t *testing.T) {
	srv := sharedStandalone(t)
	h := harness(newClient(t, standaloneOpt(srv)), rstore.WithLocalDenials())
	conformance.RunStoreSuite(t, h)
	conformance.RunPropertySuite(t, h)
}

func TestConformanceLocalDenialsCluster(t *testing.T) {
	cl := sharedCluster(t)
	conformance.RunStoreSuite(t, harness(newClient(t, clusterOpt(cl)), rstore.WithLocalDenials()))
}

// TestSameDecisionsAsMemory drives the memory store and the rueidis store
// through the same random timelines (every algorithm, one to three buckets
// per take, costs up to burst+1, time steps forwards, zero and backwards,
// repeated takes so that local denials happen) and requires identical
// states, field by field, and the same Take.At. In Cluster the tiers of a
// take lie in several slots: refunds happen, with time moving backwards
// too.
func TestSameDecisionsAsMemory(t *testing.T) {
	srv := sharedStandalone(t)
	cl := sharedCluster(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ls := limits(t,
		core.TokenBucket(core.PerSecond(2), 4),
		core.TokenBucket(core.Rate{N: 3, Per: time.Second}, 5), // interval rounded up to the ns
		core.TokenBucket(core.PerMinute(100), 7),
		core.Shaping(core.PerSecond(10), 2, 300*time.Millisecond),
		core.FixedWindow(5, time.Second),
		core.SlidingWindow(4, 3*time.Second),
		core.SlidingLog(5, time.Second),
	)
	for _, tc := range []struct {
		name   string
		client rueidis.Client
		opts   []rstore.Option
	}{
		{"standalone", newClient(t, standaloneOpt(srv)), nil},
		{"standalone_local", newClient(t, standaloneOpt(srv)), []rstore.Option{rstore.WithLocalDenials()}},
		{"cluster_local", newClient(t, clusterOpt(cl)), []rstore.Option{rstore.WithLocalDenials()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			var local int64
			for seq := range 20 {
				// Time steps back: keep reclaimed buckets for it (see WithReclaimDelay).
				mem, err := core.NewMemoryStore(core.WithReclaimDelay(time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				red := mustStore(t, tc.client, append([]rstore.Option{rstore.WithMinTTL(time.Hour)}, tc.opts...)...)
				now := t0.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
				var tm, tr *core.Take
				for step := range 60 {
					if step == 0 || rng.IntN(3) > 0 {
						// A new take; otherwise the last one again.
						switch rng.IntN(10) {
						case 0:
						case 1:
							now = now.Add(-time.Duration(rng.IntN(300)) * time.Millisecond)
						default:
							now = now.Add(time.Duration(rng.IntN(400))*time.Millisecond + time.Duration(rng.IntN(1000)))
						}
						n := 1 + rng.IntN(3)
						perm := rng.Perm(len(ls))[:n]
						var buckets []core.Bucket
						for _, i := range perm {
							buckets = append(buckets, core.Bucket{Rule: "r" + strconv.Itoa(i), Key: "k" + strconv.Itoa(rng.IntN(2)), Limit: ls[i]})
						}
						cost := int64(rng.IntN(int(ls[perm[0]].Burst()) + 2))
						tm = &core.Take{Now: now, Cost: cost, Buckets: buckets, States: make([]core.BucketState, n)}
						tr = &core.Take{Now: now, Cost: cost, Buckets: buckets, States: make([]core.BucketState, n)}
					}
					if err := mem.Take(context.Background(), tm); err != nil {
						t.Fatal(err)
					}
					if err := red.Take(context.Background(), tr); err != nil {
						t.Fatal(err)
					}
					for i := range tm.States {
						if tm.States[i] != tr.States[i] {
							t.Fatalf("sequence %d step %d at %v cost %d bucket %s (%v): redis %+v, memory %+v\nall buckets %v\nredis  %+v\nmemory %+v\nstats %+v",
								seq, step, now.Sub(t0), tm.Cost, tm.Buckets[i].Rule, tm.Buckets[i].Limit, tr.States[i], tm.States[i],
								tm.Buckets, tr.States, tm.States, red.Stats())
						}
					}
					if !tr.At.Equal(now) {
						t.Fatalf("Take.At = %v, want %v", tr.At, now)
					}
				}
				local += red.Stats().Local + red.Stats().Fetched
			}
			if len(tc.opts) > 0 && local == 0 {
				t.Fatal("no take was denied locally: the timelines do not exercise local denials")
			}
			t.Logf("%d local denials", local)
		})
	}
}

// TestLocalDenialFlood: with the server's clock, a flood of repeated denied
// requests from one instance is answered from the client-side cache, and
// every answer is consistent with the stored state: At + RetryAfter is the
// bucket's TAT, the instant the token is back.
func TestLocalDenialFlood(t *testing.T) {
	srv := sharedStandalone(t)
	cl := sharedCluster(t)
	for _, tc := range []struct {
		name   string
		client rueidis.Client
	}{
		{"standalone", newClient(t, standaloneOpt(srv))},
		{"cluster", newClient(t, clusterOpt(cl))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 1000
			st := mustStore(t, tc.client, rstore.WithLocalDenials())
			b := core.Bucket{Rule: "r", Key: "flood", Limit: limits(t, core.TokenBucket(core.PerMinute(1), 1))[0]}
			if tk := take(t, st, time.Time{}, 1, b); !allowed(tk) {
				t.Fatalf("first take: %+v, want allowed", tk.States[0])
			}
			// The bucket's TAT, read behind the store's back.
			v, err := tc.client.Do(context.Background(), tc.client.B().Get().Key(st.Key("r", "flood")).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			tat := time.Unix(0, v)
			before := st.Stats()
			for i := range n {
				tk := take(t, st, time.Time{}, 1, b)
				s := tk.States[0]
				if s.Allowed || s.Reason != core.ReasonLimited || s.RetryAfter <= 0 || s.RetryAfter > time.Minute {
					t.Fatalf("take %d: %+v, want denied for up to a minute", i, s)
				}
				if got := tk.At.Add(s.RetryAfter); !got.Equal(tat) {
					t.Fatalf("take %d: At + RetryAfter = %v, want the TAT %v", i, got, tat)
				}
				if s.ResetAfter != s.RetryAfter || s.Remaining != 0 {
					t.Fatalf("take %d: %+v, want ResetAfter = RetryAfter and nothing remaining", i, s)
				}
			}
			after := st.Stats()
			local := after.Local - before.Local
			t.Logf("stats %+v", after)
			if local < n*95/100 {
				t.Fatalf("%d of %d denials answered locally (stats %+v), want at least 95%%", local, n, after)
			}
			if after.Remote-before.Remote+local+after.Fetched-before.Fetched != n {
				t.Fatalf("stats %+v do not add up to %d takes", after, n)
			}
			if after.CacheHits < local {
				t.Fatalf("stats %+v: fewer cache hits than local denials", after)
			}
		})
	}
}

// invalidations counts the client-side cache invalidations a client
// receives, per key.
type invalidations struct {
	mu   sync.Mutex
	seen map[string]int
	ch   chan struct{}
}

func newInvalidations() *invalidations {
	return &invalidations{seen: map[string]int{}, ch: make(chan struct{}, 1)}
}

func (v *invalidations) hook(ms []rueidis.RedisMessage) {
	v.mu.Lock()
	for _, m := range ms {
		if k, err := m.ToString(); err == nil {
			v.seen[k]++
		}
	}
	v.mu.Unlock()
	select {
	case v.ch <- struct{}{}:
	default:
	}
}

// wait blocks until key has been invalidated n times in all. rueidis
// deletes the cached copy before calling the hook.
func (v *invalidations) wait(t testing.TB, key string, n int) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		v.mu.Lock()
		got := v.seen[key]
		v.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-v.ch:
		case <-deadline:
			t.Fatalf("%s invalidated %d times, want %d", key, got, n)
		}
	}
}

// TestOtherInstanceInvalidates: instance A denies from its cache; a write by
// instance B (a reset, then a take after the refill) reaches A as an
// invalidation at once, and A's next request goes to Redis and gets the
// right answer. The counters show each step.
func TestOtherInstanceInvalidates(t *testing.T) {
	srv := sharedStandalone(t)
	inv := newInvalidations()
	optA := standaloneOpt(srv)
	optA.OnInvalidations = inv.hook
	clientA, clientB := newClient(t, optA), newClient(t, standaloneOpt(srv))
	prefix := newPrefix()
	clock := core.NewManualClock(t0)
	a := mustStore(t, clientA, rstore.WithPrefix(prefix), rstore.WithClientClock(clock), rstore.WithLocalDenials())
	b := mustStore(t, clientB, rstore.WithPrefix(prefix), rstore.WithClientClock(clock), rstore.WithLocalDenials())
	bucket := core.Bucket{Rule: "r", Key: "u", Limit: limits(t, core.TokenBucket(core.PerMinute(1), 1))[0]}
	key := a.Key("r", "u")
	want := func(step string, s *rstore.Store, allow bool, d rstore.Stats) {
		t.Helper()
		before := s.Stats()
		tk := take(t, s, time.Time{}, 1, bucket)
		if allowed(tk) != allow {
			t.Fatalf("%s: %+v, want allowed %v", step, tk.States[0], allow)
		}
		after := s.Stats()
		got := rstore.Stats{
			Remote: after.Remote - before.Remote, Local: after.Local - before.Local, Fetched: after.Fetched - before.Fetched,
			CacheHits: after.CacheHits - before.CacheHits, CacheMisses: after.CacheMisses - before.CacheMisses,
		}
		if got != d {
			t.Fatalf("%s: counted %+v, want %+v", step, got, d)
		}
	}
	want("A takes the token", a, true, rstore.Stats{Remote: 1})
	want("A is denied by Redis", a, false, rstore.Stats{Remote: 1})
	want("A reads the bucket into its cache", a, false, rstore.Stats{Fetched: 1, CacheMisses: 1})
	for range 20 {
		want("A denies from its cache", a, false, rstore.Stats{Local: 1, CacheHits: 1})
	}

	// B resets the bucket: Redis invalidates A's copy.
	if err := b.Reset(context.Background(), "r", "u"); err != nil {
		t.Fatal(err)
	}
	inv.wait(t, key, 1)
	want("after B's reset, A's copy is gone: it reads the empty key and asks the script", a, true, rstore.Stats{Remote: 1, CacheMisses: 1})
	inv.wait(t, key, 2) // A's own write
	want("A reads its own write and denies", a, false, rstore.Stats{Fetched: 1, CacheMisses: 1})
	want("A denies from its cache", a, false, rstore.Stats{Local: 1, CacheHits: 1})

	// The bucket refills; B takes the token first.
	clock.Advance(time.Minute)
	want("B takes the refilled token", b, true, rstore.Stats{Remote: 1})
	inv.wait(t, key, 3)
	want("A's copy is gone: it reads B's write from Redis and denies", a, false, rstore.Stats{Fetched: 1, CacheMisses: 1})
	want("A denies from its cache", a, false, rstore.Stats{Local: 1, CacheHits: 1})

	// Without B's write, A's copy would have let the request through to the
	// script; with it, the script agrees with A.
	want("B is denied by Redis", b, false, rstore.Stats{Remote: 1})
}

// TestRuleChange: a local denial is recomputed from state under the rule of
// the request, so a roomier rule for the same bucket admits at once.
func TestRuleChange(t *testing.T) {
	srv := sharedStandalone(t)
	clock := core.NewManualClock(t0)
	st := mustStore(t, newClient(t, standaloneOpt(srv)), rstore.WithClientClock(clock), rstore.WithLocalDenials())
	ls := limits(t, core.TokenBucket(core.PerMinute(1), 1), core.TokenBucket(core.PerMinute(1), 3))
	tight := core.Bucket{Rule: "r", Key: "u", Limit: ls[0]}
	roomy := core.Bucket{Rule: "r", Key: "u", Limit: ls[1]}
	take(t, st, time.Time{}, 1, tight)
	for range 5 {
		if tk := take(t, st, time.Time{}, 1, tight); allowed(tk) {
			t.Fatal("allowed past the burst")
		}
	}
	if s := st.Stats(); s.Local < 3 {
		t.Fatalf("stats %+v, want local denials", s)
	}
	if tk := take(t, st, time.Time{}, 1, roomy); !allowed(tk) || tk.States[0].Remaining != 1 {
		t.Fatalf("under the roomier rule: %+v, want allowed with 1 remaining", tk.States[0])
	}
}

// TestRefundAcrossSlots: in Cluster, a request whose tiers lie in two slots
// and that one tier denies takes nothing from the other: its tokens are
// given back (Stats.Refunds), and neither the refunding instance nor another
// one that had the bucket in its cache answers from a stale copy.
func TestRefundAcrossSlots(t *testing.T) {
	cl := sharedCluster(t)
	inv := newInvalidations()
	optB := clusterOpt(cl)
	optB.OnInvalidations = inv.hook
	clientA, clientB := newClient(t, clusterOpt(cl)), newClient(t, optB)
	prefix := newPrefix()
	clock := core.NewManualClock(t0)
	a := mustStore(t, clientA, rstore.WithPrefix(prefix), rstore.WithClientClock(clock), rstore.WithLocalDenials())
	b := mustStore(t, clientB, rstore.WithPrefix(prefix), rstore.WithClientClock(clock), rstore.WithLocalDenials())
	ls := limits(t, core.TokenBucket(core.PerMinute(1), 1), core.TokenBucket(core.PerMinute(1), 2))
	var id string
	for i := 0; id == ""; i++ {
		cand := "u" + strconv.Itoa(i)
		if redisscript.Slot(a.Key("a", cand)) != redisscript.Slot(a.Key("b", cand)) {
			id = cand
		}
	}
	ta := core.Bucket{Rule: "a", Key: id, Limit: ls[0]}
	tb := core.Bucket{Rule: "b", Key: id, Limit: ls[1]}

	// b holds 1 of 2 tokens; a cost of 2 is denied, and both instances
	// cache that state.
	take(t, a, time.Time{}, 1, tb)
	for _, s := range []*rstore.Store{a, b} {
		for range 3 {
			if tk := take(t, s, time.Time{}, 2, tb); allowed(tk) || tk.States[0].Remaining != 1 {
				t.Fatalf("cost 2 on b: %+v, want denied with 1 remaining", tk.States[0])
			}
		}
		if s.Stats().Local == 0 {
			t.Fatalf("stats %+v, want local denials", s.Stats())
		}
	}
	// a is emptied; then a request on both: a denies, b's token is taken
	// and given back.
	take(t, a, time.Time{}, 1, ta)
	tk := take(t, a, time.Time{}, 1, ta, tb)
	if allowed(tk) || tk.States[0].Allowed || !tk.States[1].Allowed || tk.States[1].Remaining != 1 {
		t.Fatalf("a and b: %+v, want denied by a, b reporting 1 remaining", tk.States)
	}
	if s := a.Stats(); s.Refunds != 1 {
		t.Fatalf("stats %+v, want 1 refund", s)
	}
	// b's copy in B's cache was invalidated by the take (and the refund
	// wrote the key again); B now reads the refunded state.
	inv.wait(t, b.Key("b", id), 1)
	for _, s := range []*rstore.Store{b, a} {
		if tk := take(t, s, time.Time{}, 2, tb); allowed(tk) || tk.States[0].Remaining != 1 || tk.States[0].RetryAfter != time.Minute {
			t.Fatalf("after the refund, cost 2 on b: %+v, want denied with 1 remaining for 1m", tk.States[0])
		}
	}
	if tk := take(t, b, time.Time{}, 1, tb); !allowed(tk) {
		t.Fatalf("after the refund, cost 1 on b: %+v, want allowed", tk.States[0])
	}
}

// TestServerClock: without a client clock the script decides at the Redis
// server's TIME and reports it, and local denials report a time no later
// than the server's.
func TestServerClock(t *testing.T) {
	srv := sharedStandalone(t)
	st := mustStore(t, newClient(t, standaloneOpt(srv)), rstore.WithLocalDenials())
	b := core.Bucket{Rule: "r", Key: "u", Limit: limits(t, core.TokenBucket(core.PerHour(1), 1))[0]}
	before := time.Now()
	tk := take(t, st, time.Time{}, 1, b)
	after := time.Now()
	// The server runs on this machine: its clock is this clock, to within
	// the microsecond TIME reports.
	if !allowed(tk) || tk.At.Before(before.Add(-time.Millisecond)) || tk.At.After(after.Add(time.Millisecond)) {
		t.Fatalf("Take = %+v at %v, want allowed within [%v, %v]", tk.States[0], tk.At, before, after)
	}
	for range 5 {
		tk = take(t, st, time.Time{}, 1, b)
		after := time.Now()
		if allowed(tk) || tk.States[0].RetryAfter <= 59*time.Minute || tk.States[0].RetryAfter > time.Hour {
			t.Fatalf("denied take: %+v, want denied for about an hour", tk.States[0])
		}
		if tk.At.After(after.Add(time.Millisecond)) {
			t.Fatalf("Take.At = %v, later than the time after the take %v", tk.At, after)
		}
	}
	if s := st.Stats(); s.Local == 0 {
		t.Fatalf("stats %+v, want local denials on the server's clock", s)
	}
}

// TestScriptReload: after SCRIPT FLUSH the store sends the script in full,
// single-slot and across slots.
func TestScriptReload(t *testing.T) {
	cl := sharedCluster(t)
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching_%v", batch), func(t *testing.T) {
			var opts []rstore.Option
			if !batch {
				opts = append(opts, rstore.WithoutBatching())
			}
			st := mustStore(t, newClient(t, clusterOpt(cl)), opts...)
			ls := limits(t, core.TokenBucket(core.PerSecond(1), 10), core.TokenBucket(core.PerSecond(1), 10))
			var id string
			for i := 0; id == ""; i++ {
				cand := "u" + strconv.Itoa(i)
				if redisscript.Slot(st.Key("a", cand)) != redisscript.Slot(st.Key("b", cand)) {
					id = cand
				}
			}
			ta := core.Bucket{Rule: "a", Key: id, Limit: ls[0]}
			tb := core.Bucket{Rule: "b", Key: id, Limit: ls[1]}
			flush := func() {
				for _, n := range cl.Masters {
					if _, err := n.Do("SCRIPT", "FLUSH"); err != nil {
						t.Fatal(err)
					}
				}
			}
			flush()
			take(t, st, time.Time{}, 1, ta)
			if r := st.Stats().Reloads; r != 1 {
				t.Fatalf("single slot: %d reloads, want 1", r)
			}
			take(t, st, time.Time{}, 1, ta)
			if r := st.Stats().Reloads; r != 1 {
				t.Fatalf("single slot again: %d reloads, want still 1", r)
			}
			flush()
			if tk := take(t, st, time.Time{}, 1, ta, tb); !allowed(tk) || tk.States[0].Remaining != 7 || tk.States[1].Remaining != 9 {
				t.Fatalf("two slots: %+v, want allowed with 7 and 9 remaining", tk.States)
			}
			if r := st.Stats().Reloads; r != 3 {
				t.Fatalf("two slots: %d reloads, want 3", r)
			}
		})
	}
}

// TestDistributedExactness: four store instances, each with its own client,
// 16 goroutines each, on one key with the clock frozen, admit exactly the
// burst, alone and with tiers spread across slots.
func TestDistributedExactness(t *testing.T) {
	const burst = 200
	srv := sharedStandalone(t)
	cl := sharedCluster(t)
	for _, tc := range []struct {
		name  string
		opt   rueidis.ClientOption
		tiers int
		opts  []rstore.Option
	}{
		{"standalone", standaloneOpt(srv), 1, nil},
		{"standalone_unbatched", standaloneOpt(srv), 1, []rstore.Option{rstore.WithoutBatching()}},
		{"standalone_local_denials", standaloneOpt(srv), 2, []rstore.Option{rstore.WithLocalDenials()}},
		{"cluster_3_tiers_local_denials", clusterOpt(cl), 3, []rstore.Option{rstore.WithLocalDenials()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := newPrefix()
			clock := core.NewManualClock(t0)
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
			p := mustPolicy(t, rules...)
			var admitted, denied atomic.Int64
			var wg sync.WaitGroup
			var stores []*rstore.Store
			for range 4 {
				opts := append([]rstore.Option{rstore.WithPrefix(prefix), rstore.WithClientClock(clock)}, tc.opts...)
				st, err := rstore.New(newClient(t, tc.opt), opts...)
				if err != nil {
					t.Fatal(err)
				}
				stores = append(stores, st)
				l, err := core.NewLimiter(p, core.WithStore(st), core.WithFailureMode(core.FailClosed))
				if err != nil {
					t.Fatal(err)
				}
				for range 16 {
					wg.Go(func() {
						for range 3 * burst / 16 {
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
			var local int64
			for _, st := range stores {
				local += st.Stats().Local
			}
			t.Logf("%d of %d denials local", local, denied.Load())
			// Denied requests took nothing from the roomier tiers.
			if tc.tiers > 1 {
				st := mustStore(t, newClient(t, tc.opt), rstore.WithPrefix(prefix), rstore.WithClientClock(clock))
				l, _ := core.NewLimiter(mustPolicy(t, rules[1:]...), core.WithStore(st))
				d, err := l.AllowN(context.Background(), core.Request{}, 0)
				if err != nil || d.Remaining != 10*burst-burst {
					t.Fatalf("roomy tiers: %+v, %v; want %d remaining", d, err, 10*burst-burst)
				}
			}
		})
	}
}

func TestNewOptions(t *testing.T) {
	srv := sharedStandalone(t)
	c := newClient(t, standaloneOpt(srv))
	for _, tc := range []struct {
		name   string
		client rueidis.Client
		opts   []rstore.Option
	}{
		{"nil client", nil, nil},
		{"empty prefix", c, []rstore.Option{rstore.WithPrefix("")}},
		{"control character in prefix", c, []rstore.Option{rstore.WithPrefix("a\nb")}},
		{"short secret", c, []rstore.Option{rstore.WithHashedIdentities([]byte("short"))}},
		{"negative timeout", c, []rstore.Option{rstore.WithTimeout(-time.Second)}},
		{"negative min TTL", c, []rstore.Option{rstore.WithMinTTL(-time.Millisecond)}},
		{"min TTL above MaxSpan", c, []rstore.Option{rstore.WithMinTTL(core.MaxSpan + time.Millisecond)}},
		{"no local denial keys", c, []rstore.Option{rstore.WithLocalDenialKeys(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := rstore.New(tc.client, tc.opts...); !errors.Is(err, core.ErrInvalidOption) {
				t.Fatalf("New = %v, want an error wrapping core.ErrInvalidOption", err)
			}
		})
	}
	st, err := rstore.New(c, rstore.WithHashedIdentities([]byte("0123456789abcdef")), rstore.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if k := st.Key("r", "alice"); strings.Contains(k, "alice") || !strings.HasPrefix(k, "ratelimit:r:#") {
		t.Fatalf("Key = %q, want a hashed identity under the default prefix", k)
	}
}

// TestLocalDenialKeysBound: when the local denial cache is full it forgets
// everything and learns again; decisions stay right.
func TestLocalDenialKeysBound(t *testing.T) {
	srv := sharedStandalone(t)
	clock := core.NewManualClock(t0)
	st := mustStore(t, newClient(t, standaloneOpt(srv)), rstore.WithClientClock(clock), rstore.WithLocalDenials(), rstore.WithLocalDenialKeys(2))
	l := limits(t, core.TokenBucket(core.PerMinute(1), 1))[0]
	for round := range 3 {
		for i := range 3 {
			b := core.Bucket{Rule: "r", Key: "u" + strconv.Itoa(i), Limit: l}
			if round == 0 {
				take(t, st, time.Time{}, 1, b)
			}
			if tk := take(t, st, time.Time{}, 1, b); allowed(tk) {
				t.Fatalf("round %d key %d: allowed past the burst", round, i)
			}
		}
	}
}

// A fake RESP3 server, for replies a real Redis never sends.

type fakeServer struct {
	ln      net.Listener
	cluster bool // answer CLUSTER SLOTS: one node owning every slot

	mu       sync.Mutex
	evalsha  []string // raw replies to EVALSHA, in turn; the last one repeats
	eval     string   // raw reply to EVAL
	get      string   // raw reply to GET (inside EXEC for DoCache)
	calls    map[string]int
	lastArgs []string // of the last EVALSHA
}

func newFakeServer(t *testing.T, cluster bool) *fakeServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{ln: ln, cluster: cluster, calls: map[string]int{}, get: "_\r\n"}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { f.serve(conn) })
		}
	})
	return f
}

func (f *fakeServer) set(evalsha []string, eval, get string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.evalsha, f.eval, f.get = evalsha, eval, get
}

func (f *fakeServer) last() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastArgs
}

func (f *fakeServer) count(cmd string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[cmd]
}

func (f *fakeServer) serve(conn net.Conn) {
	defer conn.Close()
	r, w := bufio.NewReader(conn), bufio.NewWriter(conn)
	var queued []string
	inMulti := false
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		cmd := strings.ToUpper(args[0])
		f.mu.Lock()
		f.calls[cmd]++
		var reply string
		switch cmd {
		case "HELLO":
			reply = "%2\r\n+proto\r\n:3\r\n+version\r\n+7.0.15\r\n"
		case "PING":
			reply = "+PONG\r\n"
		case "MULTI":
			inMulti, queued, reply = true, queued[:0], "+OK\r\n"
		case "EXEC":
			reply = fmt.Sprintf("*%d\r\n%s", len(queued), strings.Join(queued, ""))
			inMulti = false
		case "PTTL":
			reply = ":-1\r\n"
		case "GET":
			reply = f.get
		case "CLUSTER":
			reply = "-ERR This instance has cluster support disabled\r\n"
			if f.cluster {
				port := f.ln.Addr().(*net.TCPAddr).Port
				reply = fmt.Sprintf("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n", port)
			}
		case "EVALSHA":
			f.lastArgs = args
			reply = f.evalsha[0]
			if len(f.evalsha) > 1 {
				f.evalsha = f.evalsha[1:]
			}
		case "EVAL":
			reply = f.eval
		default:
			reply = "+OK\r\n"
		}
		f.mu.Unlock()
		if inMulti && cmd != "MULTI" {
			queued = append(queued, reply)
			reply = "+QUEUED\r\n"
		}
		w.WriteString(reply)
		if r.Buffered() == 0 {
			if w.Flush() != nil {
				return
			}
		}
	}
}

// readCommand reads one command, an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[0] != '*' {
		return nil, fmt.Errorf("bad command line %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

// ints formats a RESP array of integers.
func respInts(vs ...int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(vs))
	for _, v := range vs {
		fmt.Fprintf(&b, ":%d\r\n", v)
	}
	return b.String()
}

// TestGarbageReplies: replies a real server never sends to the script, and
// bucket states that are not strings, are errors wrapping
// redisscript.ErrReply; nothing panics.
func TestGarbageReplies(t *testing.T) {
	f := newFakeServer(t, false)
	client := newClient(t, rueidis.ClientOption{InitAddress: []string{f.ln.Addr().String()}, ForceSingleClient: true, DisableRetry: true})
	l := limits(t, core.TokenBucket(core.PerMinute(1), 1))[0]
	b := core.Bucket{Rule: "r", Key: "u", Limit: l}
	sec := t0.Unix()
	denial := respInts(0, 1, 0, int64(time.Minute), int64(time.Minute), 0, sec, 0) // denied at t0 for a minute
	noscript := "-NOSCRIPT No matching script. Please use EVAL.\r\n"
	for _, tc := range []struct {
		name    string
		evalsha string
		eval    string
	}{
		{"simple string", "+OK\r\n", ""},
		{"integer", ":1\r\n", ""},
		{"nil", "_\r\n", ""},
		{"double", ",1.5\r\n", ""},
		{"map", "%1\r\n+a\r\n:1\r\n", ""},
		{"bulk string element", "*8\r\n:0\r\n:1\r\n:0\r\n:1\r\n:1\r\n:0\r\n$1\r\nx\r\n:0\r\n", ""},
		{"nested array", "*8\r\n*0\r\n:1\r\n:0\r\n:1\r\n:1\r\n:0\r\n:1\r\n:0\r\n", ""},
		{"nil element", "*8\r\n_\r\n:1\r\n:0\r\n:1\r\n:1\r\n:0\r\n:1\r\n:0\r\n", ""},
		{"too short", respInts(0, 1, 0), ""},
		{"too long", respInts(0, 1, 0, 1, 1, 0, 1, 0, 0), ""},
		{"allowed flag 2", respInts(2, 0, 0, 1, 1, 0, sec, 0), ""},
		{"allowed with a reason", respInts(1, 1, 0, 1, 1, 0, sec, 0), ""},
		{"negative remaining", respInts(0, 1, -1, 1, 1, 0, sec, 0), ""},
		{"nanoseconds out of range", respInts(0, 1, 0, 1, 1, 0, sec, 1e9), ""},
		{"garbage after NOSCRIPT", noscript, "+OK\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, batch := range []bool{true, false} {
				var opts []rstore.Option
				if !batch {
					opts = append(opts, rstore.WithoutBatching())
				}
				st := mustStore(t, client, opts...)
				f.set([]string{tc.evalsha}, tc.eval, "_\r\n")
				tk := &core.Take{Cost: 1, Buckets: []core.Bucket{b}, States: make([]core.BucketState, 1)}
				err := st.Take(context.Background(), tk)
				if !errors.Is(err, redisscript.ErrReply) {
					t.Fatalf("batching %v: Take = %v, want an error wrapping redisscript.ErrReply", batch, err)
				}
			}
		})
	}
	t.Run("error reply", func(t *testing.T) {
		st := mustStore(t, client)
		f.set([]string{"-ERR boom\r\n"}, "", "_\r\n")
		tk := &core.Take{Cost: 1, Buckets: []core.Bucket{b}, States: make([]core.BucketState, 1)}
		err := st.Take(context.Background(), tk)
		if err == nil || errors.Is(err, redisscript.ErrReply) || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("Take = %v, want the server's error, not ErrReply", err)
		}
	})
	t.Run("reload", func(t *testing.T) {
		st := mustStore(t, client)
		f.set([]string{noscript}, denial, "_\r\n")
		tk := take(t, st, time.Time{}, 1, b)
		if allowed(tk) || !tk.At.Equal(t0) || tk.States[0].RetryAfter != time.Minute {
			t.Fatalf("Take = %+v at %v, want denied at t0 for a minute", tk.States[0], tk.At)
		}
		if s := st.Stats(); s.Reloads != 1 {
			t.Fatalf("stats %+v, want 1 reload", s)
		}
	})
	// The local denial path reads the bucket's state with GET.
	for _, tc := range []struct {
		name    string
		get     string
		wantErr bool
	}{
		{"state is an array", "*1\r\n:5\r\n", true},
		{"state is an integer", ":5\r\n", true},
		{"state is a double", ",5\r\n", true},
		{"state is not a TAT", "$3\r\n1:2\r\n", false},
		{"state is negative", "$2\r\n-5\r\n", false},
	} {
		t.Run("local_"+strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			clock := core.NewManualClock(t0)
			st := mustStore(t, client, rstore.WithClientClock(clock), rstore.WithLocalDenials())
			f.set([]string{denial}, "", tc.get)
			take(t, st, time.Time{}, 1, b) // Redis denies: the store remembers
			evalsha := f.count("EVALSHA")
			tk := &core.Take{Cost: 1, Buckets: []core.Bucket{b}, States: make([]core.BucketState, 1)}
			err := st.Take(context.Background(), tk)
			if tc.wantErr {
				if !errors.Is(err, redisscript.ErrReply) {
					t.Fatalf("Take = %v, want an error wrapping redisscript.ErrReply", err)
				}
				return
			}
			// A value that is not a token bucket's: Redis decides.
			if err != nil || allowed(tk) || f.count("EVALSHA") != evalsha+1 {
				t.Fatalf("Take = %+v, %v after %d script calls (was %d); want denied by the script", tk.States[0], err, f.count("EVALSHA"), evalsha)
			}
		})
	}
}

// undoReply is a take-with-undo reply for one bucket: its six fields, the
// time, then the values before and after the take.
func undoReply(fields []int64, before, written string) string {
	return rawUndoReply(fields, fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(before), before, len(written), written))
}

// rawUndoReply is a take-with-undo reply whose last element is undo, raw
// RESP.
func rawUndoReply(fields []int64, undo string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(fields)+3)
	for _, v := range append(append([]int64(nil), fields...), t0.Unix(), 0) {
		fmt.Fprintf(&b, ":%d\r\n", v)
	}
	b.WriteString(undo)
	return b.String()
}

// TestGarbageRepliesAcrossSlots: in Cluster, the take-with-undo and refund
// replies are checked as strictly; a well-formed exchange refunds with the
// undo values.
func TestGarbageRepliesAcrossSlots(t *testing.T) {
	f := newFakeServer(t, true)
	client := newClient(t, rueidis.ClientOption{InitAddress: []string{f.ln.Addr().String()}, DisableRetry: true})
	if client.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("client mode %q, want cluster", client.Mode())
	}
	ls := limits(t, core.TokenBucket(core.PerMinute(1), 1), core.TokenBucket(core.PerMinute(1), 1))
	st := mustStore(t, client)
	var id string
	for i := 0; id == ""; i++ {
		cand := "u" + strconv.Itoa(i)
		if redisscript.Slot(st.Key("a", cand)) != redisscript.Slot(st.Key("b", cand)) {
			id = cand
		}
	}
	buckets := []core.Bucket{{Rule: "a", Key: id, Limit: ls[0]}, {Rule: "b", Key: id, Limit: ls[1]}}
	minute := int64(time.Minute)
	allow := []int64{1, 0, 0, minute, 0, 0}
	deny := []int64{0, 1, 0, minute, minute, 0}
	tat := strconv.FormatInt(t0.Add(time.Minute).UnixNano(), 10)
	good := undoReply(allow, "", tat)
	for _, tc := range []struct {
		name    string
		replies []string
	}{
		{"no undo array", []string{respInts(append(allow, t0.Unix(), 0)...), good}},
		{"undo too short", []string{rawUndoReply(allow, "*1\r\n$0\r\n\r\n"), good}},
		{"undo holds an integer", []string{rawUndoReply(allow, "*2\r\n:0\r\n$0\r\n\r\n"), good}},
		{"undo holds an array", []string{rawUndoReply(allow, "*2\r\n*0\r\n$0\r\n\r\n"), good}},
		{"garbage field", []string{strings.Replace(good, ":1\r\n", "$1\r\n1\r\n", 1), good}},
		{"refund reply with a nested array", []string{good, undoReply(deny, tat, ""), good}},
		{"refund reply nil", []string{good, undoReply(deny, tat, ""), "_\r\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.set(tc.replies, "", "_\r\n")
			tk := &core.Take{Cost: 1, Buckets: buckets, States: make([]core.BucketState, 2)}
			if err := st.Take(context.Background(), tk); !errors.Is(err, redisscript.ErrReply) {
				t.Fatalf("Take = %v (states %+v), want an error wrapping redisscript.ErrReply", err, tk.States)
			}
		})
	}
	t.Run("refund with undo", func(t *testing.T) {
		refunds := st.Stats().Refunds
		f.set([]string{good, undoReply(deny, tat, ""), respInts(1, 0, 1, 0, 0, 0, t0.Unix(), 0)}, "", "_\r\n")
		tk := &core.Take{Cost: 1, Buckets: buckets, States: make([]core.BucketState, 2)}
		if err := st.Take(context.Background(), tk); err != nil {
			t.Fatal(err)
		}
		if allowed(tk) || !tk.States[0].Allowed || tk.States[0].Remaining != 1 || tk.States[1].Allowed {
			t.Fatalf("Take = %+v, want denied by b, a refunded with 1 remaining", tk.States)
		}
		if st.Stats().Refunds != refunds+1 {
			t.Fatalf("stats %+v, want one more refund", st.Stats())
		}
		// The refund names the mode, then per bucket its six arguments and
		// the value the take wrote and the value before it.
		args := f.last()
		if len(args) < 2 || args[len(args)-2] != tat || args[len(args)-1] != "" || !slices.Contains(args, redisscript.ModeRefund) {
			t.Fatalf("refund EVALSHA %q, want it to end with the written value %s and an empty before", args, tat)
		}
	})
}

// TestRefundRestoresExactly: in Cluster, a request denied in one slot gives
// back what it took in another exactly, whatever the algorithm, even when
// the time went backwards and the take landed in a later window or log
// entry than the refund's time: the store agrees with the memory store.
func TestRefundRestoresExactly(t *testing.T) {
	st := mustStore(t, newClient(t, clusterOpt(sharedCluster(t))), rstore.WithMinTTL(time.Hour))
	mem, err := core.NewMemoryStore(core.WithReclaimDelay(time.Hour)) // time steps back
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []core.Limit{
		core.TokenBucket(core.PerSecond(5), 5),
		core.FixedWindow(5, time.Second),
		core.SlidingWindow(5, time.Second),
		core.SlidingLog(5, time.Second),
	} {
		t.Run(l.Algorithm().String(), func(t *testing.T) {
			ls := limits(t, l, core.TokenBucket(core.PerMinute(1), 1))
			var id string
			for i := 0; id == ""; i++ {
				c := l.Algorithm().String() + strconv.Itoa(i)
				if redisscript.Slot(st.Key("w", c)) != redisscript.Slot(st.Key("tb", c)) {
					id = c
				}
			}
			w := core.Bucket{Rule: "w", Key: id, Limit: ls[0]}
			tb := core.Bucket{Rule: "tb", Key: id, Limit: ls[1]}
			var got [2][]core.BucketState
			for i, s := range []core.Store{st, mem} {
				take(t, s, t0.Add(1500*time.Millisecond), 1, w)
				take(t, s, t0.Add(500*time.Millisecond), 1, tb)
				multi := take(t, s, t0.Add(500*time.Millisecond), 1, w, tb) // back in time; tb denies
				read := take(t, s, t0.Add(1500*time.Millisecond), 0, w)
				got[i] = append(multi.States, read.States...)
			}
			if !slices.Equal(got[0], got[1]) {
				t.Fatalf("redis %+v\nmemory %+v", got[0], got[1])
			}
		})
	}
}

// TestContextDeadline: a take whose context has ended fails with an error
// that says so, batched or not, so that the limiter does not count it as
// the store failing.
func TestContextDeadline(t *testing.T) {
	client := newClient(t, standaloneOpt(sharedStandalone(t)))
	b := core.Bucket{Rule: "r", Key: "u", Limit: limits(t, core.TokenBucket(core.PerMinute(1), 1))[0]}
	for _, opts := range [][]rstore.Option{nil, {rstore.WithoutBatching()}, {rstore.WithLocalDenials()}} {
		st := mustStore(t, client, opts...)
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		tk := &core.Take{Cost: 1, Buckets: []core.Bucket{b}, States: make([]core.BucketState, 1)}
		err := st.Take(ctx, tk)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Take with an ended context = %v, want an error wrapping context.DeadlineExceeded", err)
		}
	}
}
