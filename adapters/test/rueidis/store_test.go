package rueidis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	rstore "github.com/bucketry/ratelimit/adapters/rueidis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
	"github.com/bucketry/ratelimit/internal/redistest"
)

var t0 = redistests.T0

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

// kit is the store, for the shared tests.
var kit = redistests.Kit[rueidis.Client, rstore.Option, *rstore.Store]{New: rstore.New, Prefix: rstore.WithPrefix, Clock: rstore.WithClientClock, MinTTL: rstore.WithMinTTL, Unbatched: rstore.WithoutBatching, LocalDenials: rstore.WithLocalDenials, Timeout: rstore.WithTimeout}

// harness builds each case's store on one client shared by the whole suite:
// every store has its own prefix, so they never meet.
func harness(client rueidis.Client, opts ...rstore.Option) conformance.StoreHarness {
	return redistests.Harness(func(t testing.TB, o redistests.Options) core.Store { return kit.Store(t, client, o, opts...) })
}

// mustStore returns a store on c with a prefix of its own, then opts.
func mustStore(t testing.TB, c rueidis.Client, opts ...rstore.Option) *rstore.Store {
	t.Helper()
	return kit.Store(t, c, redistests.Options{}, opts...)
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
// through the same random timelines, repeating takes so that local denials
// happen, and requires identical states, field by field, and the same
// Take.At (see redistests.RunSameDecisionsAsMemory).
func TestSameDecisionsAsMemory(t *testing.T) {
	store := func(c rueidis.Client) func(t testing.TB, o redistests.Options) core.Store {
		return func(t testing.TB, o redistests.Options) core.Store { return kit.Store(t, c, o) }
	}
	local := func(st core.Store) int64 { s := st.(*rstore.Store).Stats(); return s.Local + s.Fetched }
	standalone, cluster := newClient(t, standaloneOpt(sharedStandalone(t))), newClient(t, clusterOpt(sharedCluster(t)))
	redistests.RunSameDecisionsAsMemory(t, 20,
		redistests.MemoryCase{Name: "standalone", New: store(standalone)},
		redistests.MemoryCase{Name: "standalone_local", New: store(standalone), LocalDenials: true, Local: local},
		redistests.MemoryCase{Name: "cluster_local", New: store(cluster), LocalDenials: true, Local: local},
	)
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
			b := core.Bucket{Rule: "r", Key: "flood", Limit: redistests.Limits(t, core.TokenBucket(core.PerMinute(1), 1))[0]}
			if tk := redistests.Take(t, st, time.Time{}, 1, b); !redistests.Allowed(tk) {
				t.Fatalf("first take: %+v, want allowed", tk.States[0])
			}
			// The bucket's TAT, read behind the store's back.
			raw, err := tc.client.Do(context.Background(), tc.client.B().Get().Key(st.Key("r", "flood")).Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			v, span, ok := redisscript.DecodeTokenBucket(raw)
			if !ok || span != int64(time.Minute) {
				t.Fatalf("stored value %q: TAT %d, fill time %d, ok %v; want a token bucket's of a minute", raw, v, span, ok)
			}
			tat := time.Unix(0, v)
			before := st.Stats()
			for i := range n {
				tk := redistests.Take(t, st, time.Time{}, 1, b)
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
	prefix := redistests.NewPrefix()
	clock := core.NewManualClock(t0)
	a := mustStore(t, clientA, rstore.WithPrefix(prefix), rstore.WithClientClock(clock), rstore.WithLocalDenials())
	b := mustStore(t, clientB, rstore.WithPrefix(prefix), rstore.WithClientClock(clock), rstore.WithLocalDenials())
	bucket := core.Bucket{Rule: "r", Key: "u", Limit: redistests.Limits(t, core.TokenBucket(core.PerMinute(1), 1))[0]}
	key := a.Key("r", "u")
	want := func(step string, s *rstore.Store, allow bool, d rstore.Stats) {
		t.Helper()
		before := s.Stats()
		tk := redistests.Take(t, s, time.Time{}, 1, bucket)
		if redistests.Allowed(tk) != allow {
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
// the request: the bucket, half full under a burst of 2, denies a cost of 2
// locally; under a rule with twice the burst at twice the rate (the same
// fill time) it keeps its share, half, and admits that cost at once.
func TestRuleChange(t *testing.T) {
	srv := sharedStandalone(t)
	clock := core.NewManualClock(t0)
	st := mustStore(t, newClient(t, standaloneOpt(srv)), rstore.WithClientClock(clock), rstore.WithLocalDenials())
	ls := redistests.Limits(t, core.TokenBucket(core.PerMinute(1), 2), core.TokenBucket(core.PerMinute(2), 4))
	tight := core.Bucket{Rule: "r", Key: "u", Limit: ls[0]}
	roomy := core.Bucket{Rule: "r", Key: "u", Limit: ls[1]}
	redistests.Take(t, st, time.Time{}, 1, tight)
	for range 5 {
		if tk := redistests.Take(t, st, time.Time{}, 2, tight); redistests.Allowed(tk) {
			t.Fatal("a cost of 2 allowed with 1 token left")
		}
	}
	if s := st.Stats(); s.Local < 3 {
		t.Fatalf("stats %+v, want local denials", s)
	}
	if tk := redistests.Take(t, st, time.Time{}, 2, roomy); !redistests.Allowed(tk) || tk.States[0].Remaining != 0 {
		t.Fatalf("under the roomier rule: %+v, want allowed with 0 remaining", tk.States[0])
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
	prefix := redistests.NewPrefix()
	clock := core.NewManualClock(t0)
	a := mustStore(t, clientA, rstore.WithPrefix(prefix), rstore.WithClientClock(clock), rstore.WithLocalDenials())
	b := mustStore(t, clientB, rstore.WithPrefix(prefix), rstore.WithClientClock(clock), rstore.WithLocalDenials())
	ls := redistests.Limits(t, core.TokenBucket(core.PerMinute(1), 1), core.TokenBucket(core.PerMinute(1), 2))
	id := redistests.SplitID(a.Key, "u", "a", "b")
	ta := core.Bucket{Rule: "a", Key: id, Limit: ls[0]}
	tb := core.Bucket{Rule: "b", Key: id, Limit: ls[1]}

	// b holds 1 of 2 tokens; a cost of 2 is denied, and both instances
	// cache that state.
	redistests.Take(t, a, time.Time{}, 1, tb)
	for _, s := range []*rstore.Store{a, b} {
		for range 3 {
			if tk := redistests.Take(t, s, time.Time{}, 2, tb); redistests.Allowed(tk) || tk.States[0].Remaining != 1 {
				t.Fatalf("cost 2 on b: %+v, want denied with 1 remaining", tk.States[0])
			}
		}
		if s.Stats().Local == 0 {
			t.Fatalf("stats %+v, want local denials", s.Stats())
		}
	}
	// a is emptied; then a request on both: a denies, b's token is taken
	// and given back.
	redistests.Take(t, a, time.Time{}, 1, ta)
	tk := redistests.Take(t, a, time.Time{}, 1, ta, tb)
	if redistests.Allowed(tk) || tk.States[0].Allowed || !tk.States[1].Allowed || tk.States[1].Remaining != 1 {
		t.Fatalf("a and b: %+v, want denied by a, b reporting 1 remaining", tk.States)
	}
	if s := a.Stats(); s.Refunds != 1 {
		t.Fatalf("stats %+v, want 1 refund", s)
	}
	// b's copy in B's cache was invalidated by the take (and the refund
	// wrote the key again); B now reads the refunded state.
	inv.wait(t, b.Key("b", id), 1)
	for _, s := range []*rstore.Store{b, a} {
		if tk := redistests.Take(t, s, time.Time{}, 2, tb); redistests.Allowed(tk) || tk.States[0].Remaining != 1 || tk.States[0].RetryAfter != time.Minute {
			t.Fatalf("after the refund, cost 2 on b: %+v, want denied with 1 remaining for 1m", tk.States[0])
		}
	}
	if tk := redistests.Take(t, b, time.Time{}, 1, tb); !redistests.Allowed(tk) {
		t.Fatalf("after the refund, cost 1 on b: %+v, want allowed", tk.States[0])
	}
}

// TestServerClock: without a client clock the script decides at the Redis
// server's TIME and reports it, and local denials report a time no later
// than the server's.
func TestServerClock(t *testing.T) {
	srv := sharedStandalone(t)
	st := mustStore(t, newClient(t, standaloneOpt(srv)), rstore.WithLocalDenials())
	b := core.Bucket{Rule: "r", Key: "u", Limit: redistests.Limits(t, core.TokenBucket(core.PerHour(1), 1))[0]}
	before := time.Now()
	tk := redistests.Take(t, st, time.Time{}, 1, b)
	after := time.Now()
	// The server runs on this machine: its clock is this clock, to within
	// the microsecond TIME reports.
	if !redistests.Allowed(tk) || tk.At.Before(before.Add(-time.Millisecond)) || tk.At.After(after.Add(time.Millisecond)) {
		t.Fatalf("Take = %+v at %v, want allowed within [%v, %v]", tk.States[0], tk.At, before, after)
	}
	for range 5 {
		tk = redistests.Take(t, st, time.Time{}, 1, b)
		after := time.Now()
		if redistests.Allowed(tk) || tk.States[0].RetryAfter <= 59*time.Minute || tk.States[0].RetryAfter > time.Hour {
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
			ls := redistests.Limits(t, core.TokenBucket(core.PerSecond(1), 10), core.TokenBucket(core.PerSecond(1), 10))
			id := redistests.SplitID(st.Key, "u", "a", "b")
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
			redistests.Take(t, st, time.Time{}, 1, ta)
			if r := st.Stats().Reloads; r != 1 {
				t.Fatalf("single slot: %d reloads, want 1", r)
			}
			redistests.Take(t, st, time.Time{}, 1, ta)
			if r := st.Stats().Reloads; r != 1 {
				t.Fatalf("single slot again: %d reloads, want still 1", r)
			}
			flush()
			if tk := redistests.Take(t, st, time.Time{}, 1, ta, tb); !redistests.Allowed(tk) || tk.States[0].Remaining != 7 || tk.States[1].Remaining != 9 {
				t.Fatalf("two slots: %+v, want allowed with 7 and 9 remaining", tk.States)
			}
			if r := st.Stats().Reloads; r != 3 {
				t.Fatalf("two slots: %d reloads, want 3", r)
			}
		})
	}
}

// TestDistributedExactness: several store instances, each on a client of
// its own, admit exactly the burst together (see
// redistests.RunDistributedExactness).
func TestDistributedExactness(t *testing.T) {
	opts := [2]rueidis.ClientOption{standaloneOpt(sharedStandalone(t)), clusterOpt(sharedCluster(t))}
	redistests.RunDistributedExactness(t, func(t testing.TB, cluster bool, o redistests.Options) core.Store {
		opt := opts[0]
		if cluster {
			opt = opts[1]
		}
		return kit.Store(t, newClient(t, opt), o)
	})
}

// TestLocalDenialKeysBound: when the local denial cache is full it forgets
// everything and learns again; decisions stay right.
func TestLocalDenialKeysBound(t *testing.T) {
	srv := sharedStandalone(t)
	clock := core.NewManualClock(t0)
	st := mustStore(t, newClient(t, standaloneOpt(srv)), rstore.WithClientClock(clock), rstore.WithLocalDenials(), rstore.WithLocalDenialKeys(2))
	l := redistests.Limits(t, core.TokenBucket(core.PerMinute(1), 1))[0]
	for round := range 3 {
		for i := range 3 {
			b := core.Bucket{Rule: "r", Key: "u" + strconv.Itoa(i), Limit: l}
			if round == 0 {
				redistests.Take(t, st, time.Time{}, 1, b)
			}
			if tk := redistests.Take(t, st, time.Time{}, 1, b); redistests.Allowed(tk) {
				t.Fatalf("round %d key %d: allowed past the burst", round, i)
			}
		}
	}
}

// A fake RESP3 server, for replies a real Redis never sends: the replies
// of a redistests.FakeServer.

type fakeServer struct {
	*redistests.FakeServer
	cluster bool // answer CLUSTER SLOTS: one node owning every slot

	mu       sync.Mutex
	evalsha  []string // raw replies to EVALSHA, in turn; the last one repeats
	eval     string   // raw reply to EVAL
	get      string   // raw reply to GET (inside EXEC for DoCache)
	lastArgs []string // of the last EVALSHA
}

func newFakeServer(t *testing.T, cluster bool) *fakeServer {
	f := &fakeServer{cluster: cluster, get: "_\r\n"}
	f.FakeServer = redistests.StartFake(t, f.reply)
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

func (f *fakeServer) reply(args []string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch strings.ToUpper(args[0]) {
	case "HELLO":
		return "%2\r\n+proto\r\n:3\r\n+version\r\n+7.0.15\r\n"
	case "PING":
		return "+PONG\r\n"
	case "PTTL":
		return ":-1\r\n"
	case "GET":
		return f.get
	case "CLUSTER":
		if f.cluster {
			return fmt.Sprintf("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n", f.Port())
		}
		return "-ERR This instance has cluster support disabled\r\n"
	case "EVALSHA":
		f.lastArgs = args
		reply := f.evalsha[0]
		if len(f.evalsha) > 1 {
			f.evalsha = f.evalsha[1:]
		}
		return reply
	case "EVAL":
		return f.eval
	}
	return "+OK\r\n"
}

// TestGarbageReplies: replies a real server never sends to the script, and
// bucket states that are not strings, are errors wrapping
// redisscript.ErrReply; nothing panics.
func TestGarbageReplies(t *testing.T) {
	f := newFakeServer(t, false)
	client := newClient(t, rueidis.ClientOption{InitAddress: []string{f.Addr}, ForceSingleClient: true, DisableRetry: true})
	l := redistests.Limits(t, core.TokenBucket(core.PerMinute(1), 1))[0]
	b := core.Bucket{Rule: "r", Key: "u", Limit: l}
	denied := core.BucketState{Reason: core.ReasonLimited, ResetAfter: time.Minute, RetryAfter: time.Minute}
	denial := redistests.RespReply(t0, denied) // denied at t0 for a minute
	blob := string(redisscript.AppendReply(nil, t0, denied))
	// patched returns denial's binary string with b written at offset at.
	patched := func(at int, b ...byte) string {
		p := []byte(blob)
		copy(p[at:], b)
		return redistests.RespBulk(string(p))
	}
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
		{"empty array", "*0\r\n", ""},
		{"integer element", "*1\r\n:1\r\n", ""},
		{"nested array", "*1\r\n*0\r\n", ""},
		{"nil element", "*1\r\n_\r\n", ""},
		{"three elements", "*3\r\n" + redistests.RespBulk(blob) + "*0\r\n:1\r\n", ""},
		{"undo where none is due", "*2\r\n" + redistests.RespBulk(blob) + "*0\r\n", ""},
		{"too short", redistests.RespBulk(blob[:len(blob)-1]), ""},
		{"too long", redistests.RespBulk(blob + "x"), ""},
		{"empty string", "$0\r\n\r\n", ""},
		{"array of one string", "*1\r\n" + redistests.RespBulk(blob), ""},
		{"code out of range", patched(redisscript.HeaderSize, 3), ""},
		{"negative remaining", patched(redisscript.HeaderSize+1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), ""},
		{"nanoseconds out of range", patched(8, 0x00, 0xca, 0x9a, 0x3b), ""}, // 1e9
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
		tk := redistests.Take(t, st, time.Time{}, 1, b)
		if redistests.Allowed(tk) || !tk.At.Equal(t0) || tk.States[0].RetryAfter != time.Minute {
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
		{"state is a shaping bucket's", redistests.RespBulk("\x02" + redisscript.EncodeTokenBucket(t0.UnixNano(), int64(time.Minute))[1:]), false},
	} {
		t.Run("local_"+strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			clock := core.NewManualClock(t0)
			st := mustStore(t, client, rstore.WithClientClock(clock), rstore.WithLocalDenials())
			f.set([]string{denial}, "", tc.get)
			redistests.Take(t, st, time.Time{}, 1, b) // Redis denies: the store remembers
			evalsha := f.Calls("EVALSHA")
			tk := &core.Take{Cost: 1, Buckets: []core.Bucket{b}, States: make([]core.BucketState, 1)}
			err := st.Take(context.Background(), tk)
			if tc.wantErr {
				if !errors.Is(err, redisscript.ErrReply) {
					t.Fatalf("Take = %v, want an error wrapping redisscript.ErrReply", err)
				}
				return
			}
			// A value that is not a token bucket's: Redis decides.
			if err != nil || redistests.Allowed(tk) || f.Calls("EVALSHA") != evalsha+1 {
				t.Fatalf("Take = %+v, %v after %d script calls (was %d); want denied by the script", tk.States[0], err, f.Calls("EVALSHA"), evalsha)
			}
		})
	}
}

// undoReply is a take-with-undo reply for one bucket at t0: its state, then
// the values before and after the take.
func undoReply(st core.BucketState, before, written string) string {
	return rawUndoReply(st, "*2\r\n"+redistests.RespBulk(before)+redistests.RespBulk(written))
}

// rawUndoReply is a take-with-undo reply whose last element is undo, raw
// RESP.
func rawUndoReply(st core.BucketState, undo string) string {
	return redistests.RespUndoReply(t0, undo, st)
}

// TestGarbageRepliesAcrossSlots: in Cluster, the take-with-undo and refund
// replies are checked as strictly; a well-formed exchange refunds with the
// undo values.
func TestGarbageRepliesAcrossSlots(t *testing.T) {
	f := newFakeServer(t, true)
	client := newClient(t, rueidis.ClientOption{InitAddress: []string{f.Addr}, DisableRetry: true})
	if client.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("client mode %q, want cluster", client.Mode())
	}
	ls := redistests.Limits(t, core.TokenBucket(core.PerMinute(1), 1), core.TokenBucket(core.PerMinute(1), 1))
	st := mustStore(t, client)
	id := redistests.SplitID(st.Key, "u", "a", "b")
	buckets := []core.Bucket{{Rule: "a", Key: id, Limit: ls[0]}, {Rule: "b", Key: id, Limit: ls[1]}}
	allow := core.BucketState{Allowed: true, ResetAfter: time.Minute}
	deny := core.BucketState{Reason: core.ReasonLimited, ResetAfter: time.Minute, RetryAfter: time.Minute}
	tat := redisscript.EncodeTokenBucket(t0.Add(time.Minute).UnixNano(), int64(time.Minute))
	good := undoReply(allow, "", tat)
	for _, tc := range []struct {
		name    string
		replies []string
	}{
		{"no undo array", []string{redistests.RespReply(t0, allow), good}},
		{"undo too short", []string{rawUndoReply(allow, "*1\r\n$0\r\n\r\n"), good}},
		{"undo holds an integer", []string{rawUndoReply(allow, "*2\r\n:0\r\n$0\r\n\r\n"), good}},
		{"undo holds an array", []string{rawUndoReply(allow, "*2\r\n*0\r\n$0\r\n\r\n"), good}},
		{"reply is an integer", []string{"*2\r\n:1\r\n" + good[strings.Index(good, "\r\n*2\r\n")+2:], good}},
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
		f.set([]string{good, undoReply(deny, tat, ""), redistests.RespReply(t0, core.BucketState{Allowed: true, Remaining: 1})}, "", "_\r\n")
		tk := &core.Take{Cost: 1, Buckets: buckets, States: make([]core.BucketState, 2)}
		if err := st.Take(context.Background(), tk); err != nil {
			t.Fatal(err)
		}
		if redistests.Allowed(tk) || !tk.States[0].Allowed || tk.States[0].Remaining != 1 || tk.States[1].Allowed {
			t.Fatalf("Take = %+v, want denied by b, a refunded with 1 remaining", tk.States)
		}
		if st.Stats().Refunds != refunds+1 {
			t.Fatalf("stats %+v, want one more refund", st.Stats())
		}
		// The refund's call argument names the mode, and per bucket the
		// value the take wrote and the value before it follow.
		args := f.last()
		nk, _ := strconv.Atoi(args[min(2, len(args)-1)])
		refund := len(args) > 3+nk && strings.HasPrefix(args[3+nk], redisscript.ModeRefund)
		if len(args) < 2 || args[len(args)-2] != tat || args[len(args)-1] != "" || !refund {
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
			ls := redistests.Limits(t, l, core.TokenBucket(core.PerMinute(1), 1))
			id := redistests.SplitID(st.Key, l.Algorithm().String(), "w", "tb")
			w := core.Bucket{Rule: "w", Key: id, Limit: ls[0]}
			tb := core.Bucket{Rule: "tb", Key: id, Limit: ls[1]}
			var got [2][]core.BucketState
			for i, s := range []core.Store{st, mem} {
				redistests.Take(t, s, t0.Add(1500*time.Millisecond), 1, w)
				redistests.Take(t, s, t0.Add(500*time.Millisecond), 1, tb)
				multi := redistests.Take(t, s, t0.Add(500*time.Millisecond), 1, w, tb) // back in time; tb denies
				read := redistests.Take(t, s, t0.Add(1500*time.Millisecond), 0, w)
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
	b := core.Bucket{Rule: "r", Key: "u", Limit: redistests.Limits(t, core.TokenBucket(core.PerMinute(1), 1))[0]}
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
