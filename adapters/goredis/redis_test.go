package goredis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
	"github.com/bucketry/ratelimit/internal/redistest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustPolicy(t testing.TB, rules ...core.Rule) *core.Policy {
	t.Helper()
	p, err := core.NewPolicy(rules...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustStore(t testing.TB, c redis.UniversalClient, opts ...goredis.Option) *goredis.Store {
	t.Helper()
	s, err := goredis.New(c, append([]goredis.Option{goredis.WithPrefix(newPrefix())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSameDecisionsAsMemory drives the memory store and the Redis store
// through the same random timelines (every algorithm, one to three buckets
// per take, costs up to burst+1, time steps forwards, zero and backwards)
// and requires identical states, field by field.
func TestSameDecisionsAsMemory(t *testing.T) {
	srv := redistest.Standalone(t)
	client := standaloneClient(srv)(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	limits := []core.Limit{
		core.TokenBucket(core.PerSecond(2), 4),
		core.TokenBucket(core.Rate{N: 3, Per: time.Second}, 5), // interval rounded up to the ns
		core.TokenBucket(core.PerMinute(100), 7),
		core.Shaping(core.PerSecond(10), 2, 300*time.Millisecond),
		core.FixedWindow(5, time.Second),
		core.FixedWindow(3, 7*time.Second),
		core.SlidingWindow(6, time.Second),
		core.SlidingWindow(4, 3*time.Second),
		core.SlidingLog(5, time.Second),
	}
	var rules []core.Rule
	for i, l := range limits {
		rules = append(rules, core.Rule{Name: "r" + strconv.Itoa(i), Scope: core.ScopeGlobal, Limit: l})
	}
	p := mustPolicy(t, rules...)
	validated := p.Rules()
	for seq := range 40 {
		// Time steps back below: keep reclaimed buckets for it (see WithReclaimDelay).
		mem, err := core.NewMemoryStore(core.WithReclaimDelay(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		red := mustStore(t, client)
		now := t0.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
		for step := range 60 {
			switch rng.IntN(10) {
			case 0: // same instant
			case 1:
				now = now.Add(-time.Duration(rng.IntN(300)) * time.Millisecond)
			default:
				now = now.Add(time.Duration(rng.IntN(700))*time.Millisecond + time.Duration(rng.IntN(1000)))
			}
			n := 1 + rng.IntN(3)
			perm := rng.Perm(len(validated))[:n]
			var buckets []core.Bucket
			for _, i := range perm {
				buckets = append(buckets, core.Bucket{Rule: validated[i].Name, Key: "k" + strconv.Itoa(rng.IntN(2)), Limit: &validated[i].Limit})
			}
			cost := int64(rng.IntN(int(validated[perm[0]].Limit.Burst()) + 2))
			tm := &core.Take{Now: now, Cost: cost, Buckets: buckets, States: make([]core.BucketState, n)}
			tr := &core.Take{Now: now, Cost: cost, Buckets: buckets, States: make([]core.BucketState, n)}
			if err := mem.Take(context.Background(), tm); err != nil {
				t.Fatal(err)
			}
			if err := red.Take(context.Background(), tr); err != nil {
				t.Fatal(err)
			}
			for i := range tm.States {
				if tm.States[i] != tr.States[i] {
					t.Fatalf("sequence %d step %d at %v cost %d bucket %s (%v): redis %+v, memory %+v",
						seq, step, now.Sub(t0), cost, buckets[i].Rule, buckets[i].Limit, tr.States[i], tm.States[i])
				}
			}
			if !tr.At.Equal(now) {
				t.Fatalf("Take.At = %v, want %v", tr.At, now)
			}
		}
	}
}

// commandCalls reads INFO commandstats: calls per command name.
func commandCalls(t testing.TB, srv *redistest.Server) map[string]int64 {
	t.Helper()
	v, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(fmt.Sprint(v), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if n, ok := strings.CutPrefix(f, "calls="); ok {
				out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(n, 10, 64)
			}
		}
	}
	return out
}

func resetStats(t testing.TB, srv *redistest.Server) {
	t.Helper()
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
}

// TestCommandsPerDecision counts what Redis executes: one script call per
// decision for three tiers in one slot, and a denial writes nothing.
func TestCommandsPerDecision(t *testing.T) {
	srv := redistest.Standalone(t)
	client := standaloneClient(srv)(t)
	p := mustPolicy(t,
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(1), 2)},
		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerSecond(100), 100)},
		core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.SlidingWindow(1000, time.Second)},
	)
	st := mustStore(t, client, goredis.WithoutBatching())
	l, err := core.NewLimiter(p, core.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := core.Request{User: "u", Endpoint: "/x"}
	l.Allow(ctx, req) // loads the script
	resetStats(t, srv)
	if d, err := l.Allow(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("second request: %+v, %v", d, err)
	}
	c := commandCalls(t, srv)
	if c["evalsha"] != 1 || c["set"] != 3 {
		t.Fatalf("allowed 3-tier decision ran %v, want 1 evalsha and 3 sets", c)
	}
	resetStats(t, srv)
	if d, err := l.Allow(ctx, req); err != nil || d.Allowed || d.Rule != "per-user" {
		t.Fatalf("third request: %+v, %v; want denied by per-user", d, err)
	}
	c = commandCalls(t, srv)
	writes := c["set"] + c["del"] + c["expire"] + c["pexpire"] + c["hset"] + c["incrby"]
	if c["evalsha"] != 1 || writes != 0 {
		t.Fatalf("denied decision ran %v, want 1 evalsha and no write", c)
	}
}

// TestCommandsPerSlotGroup: in Cluster, one script call per slot group.
func TestCommandsPerSlotGroup(t *testing.T) {
	cl := redistest.Cluster(t)
	client := clusterClient(cl)(t)
	st := mustStore(t, client, goredis.WithoutBatching())
	p := mustPolicy(t,
		core.Rule{Name: "a", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 10)},
		core.Rule{Name: "b", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 10)},
		core.Rule{Name: "c", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 10)},
	)
	rules := p.Rules()
	// Find an identity whose three keys fall in three different slots.
	var id string
	for i := 0; id == ""; i++ {
		cand := "user" + strconv.Itoa(i)
		s := map[int]bool{}
		for _, r := range rules {
			s[redisscript.Slot(st.Key(r.Name, cand))] = true
		}
		if len(s) == 3 {
			id = cand
		}
	}
	take := func() *core.Take {
		t := &core.Take{Cost: 1, States: make([]core.BucketState, 3)}
		for i := range rules {
			t.Buckets = append(t.Buckets, core.Bucket{Rule: rules[i].Name, Key: id, Limit: &rules[i].Limit})
		}
		return t
	}
	ctx := context.Background()
	if err := st.Take(ctx, take()); err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.Masters {
		resetStats(t, n)
	}
	if err := st.Take(ctx, take()); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, n := range cl.Masters {
		total += commandCalls(t, n)["evalsha"]
	}
	if total != 3 {
		t.Fatalf("a take over 3 slots ran %d evalsha in the cluster, want 3", total)
	}
}

// TestKeyExpiresWhenFull: a bucket's key lives exactly until the bucket is
// full again, to the millisecond Redis can express.
func TestKeyExpiresWhenFull(t *testing.T) {
	srv := redistest.Standalone(t)
	client := standaloneClient(srv)(t)
	clock := core.NewManualClock(t0)
	st := mustStore(t, client, goredis.WithClientClock(clock))
	p := mustPolicy(t,
		core.Rule{Name: "tb", Scope: core.ScopeUser, Limit: core.TokenBucket(core.Rate{N: 3, Per: time.Second}, 10)},
		core.Rule{Name: "fw", Scope: core.ScopeUser, Limit: core.FixedWindow(10, time.Minute)},
	)
	l, err := core.NewLimiter(p, core.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.AllowN(context.Background(), core.Request{User: "u"}, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range d.Tiers() {
		v, err := srv.Do("PTTL", st.Key(ts.Rule.Name, "u"))
		if err != nil {
			t.Fatal(err)
		}
		// PTTL counts down in real time from the take: allow the
		// milliseconds that passed since.
		want := int64((ts.ResetAfter + time.Millisecond - 1) / time.Millisecond)
		if n, ok := v.(int64); !ok || n > want || n < want-50 {
			t.Errorf("%s: PTTL = %v ms, want %d (ResetAfter %v rounded up) less the time since", ts.Rule.Name, v, want, ts.ResetAfter)
		}
	}
}

// TestServerClock: without a client clock the script decides at the Redis
// server's TIME and reports it.
func TestServerClock(t *testing.T) {
	srv := redistest.Standalone(t)
	client := standaloneClient(srv)(t)
	st := mustStore(t, client)
	p := mustPolicy(t, core.Rule{Name: "r", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 1)})
	l, _ := core.NewLimiter(p, core.WithStore(st))
	before := time.Now()
	d, err := l.Allow(context.Background(), core.Request{User: "u"})
	after := time.Now()
	if err != nil || !d.Allowed {
		t.Fatalf("Allow = %+v, %v", d, err)
	}
	// The server runs on this machine: its clock is this clock, to within
	// the microsecond TIME reports.
	if d.At.Before(before.Add(-time.Millisecond)) || d.At.After(after.Add(time.Millisecond)) {
		t.Fatalf("Decision.At = %v, not within [%v, %v]", d.At, before, after)
	}
	d, _ = l.Allow(context.Background(), core.Request{User: "u"})
	if d.Allowed || d.RetryAfter <= 59*time.Minute || d.RetryAfter > time.Hour {
		t.Fatalf("second request: %+v, want denied for about an hour", d)
	}
}

// TestDistributedExactness: four limiter instances, each with its own
// client, 32 goroutines each, on one key with the clock frozen, admit
// exactly the burst, alone and with tiers spread across slots.
func TestDistributedExactness(t *testing.T) {
	const burst = 500
	srv := redistest.Standalone(t)
	cl := redistest.Cluster(t)
	for _, tc := range []struct {
		name   string
		client func(t testing.TB) redis.UniversalClient
		tiers  int
		opts   []goredis.Option
	}{
		{"standalone", standaloneClient(srv), 1, nil},
		{"standalone_3_tiers", standaloneClient(srv), 3, nil},
		{"standalone_unbatched", standaloneClient(srv), 1, []goredis.Option{goredis.WithoutBatching()}},
		{"standalone_local_denials", standaloneClient(srv), 1, []goredis.Option{goredis.WithLocalDenials()}},
		{"cluster", clusterClient(cl), 1, nil},
		{"cluster_3_tiers_across_slots", clusterClient(cl), 3, nil},
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
			if strings.HasPrefix(tc.name, "cluster_3") {
				probe, _ := goredis.New(tc.client(t), goredis.WithPrefix(prefix))
				slots := map[int]bool{}
				for _, r := range rules {
					slots[redisscript.Slot(probe.Key(r.Name, "*"))] = true
				}
				if len(slots) < 2 {
					t.Fatalf("the tiers' keys share one slot; pick other names")
				}
			}
			var admitted, denied atomic.Int64
			var wg sync.WaitGroup
			for range 4 {
				opts := append([]goredis.Option{goredis.WithPrefix(prefix), goredis.WithClientClock(clock)}, tc.opts...)
				st, err := goredis.New(tc.client(t), opts...)
				if err != nil {
					t.Fatal(err)
				}
				l, err := core.NewLimiter(p, core.WithStore(st), core.WithFailureMode(core.FailClosed))
				if err != nil {
					t.Fatal(err)
				}
				for range 32 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 2 * burst / 32 {
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
					}()
				}
			}
			wg.Wait()
			if admitted.Load() != burst {
				t.Fatalf("admitted %d of %d requests, want exactly the burst %d", admitted.Load(), admitted.Load()+denied.Load(), burst)
			}
			// Denied requests took nothing from the roomier tiers.
			if tc.tiers > 1 {
				st, _ := goredis.New(tc.client(t), goredis.WithPrefix(prefix), goredis.WithClientClock(clock))
				l, _ := core.NewLimiter(mustPolicy(t, rules[1:]...), core.WithStore(st))
				d, err := l.AllowN(context.Background(), core.Request{}, 0)
				if err != nil || d.Remaining != 10*burst-burst {
					t.Fatalf("roomy tiers: %+v, %v; want %d remaining", d, err, 10*burst-burst)
				}
			}
		})
	}
}

// TestResetDropsLocalDenials: after Reset, a bucket is full again and no
// instance-local denial hides it.
func TestResetDropsLocalDenials(t *testing.T) {
	srv := redistest.Standalone(t)
	client := standaloneClient(srv)(t)
	clock := core.NewManualClock(t0)
	st := mustStore(t, client, goredis.WithClientClock(clock), goredis.WithLocalDenials())
	p := mustPolicy(t,
		core.Rule{Name: "a", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 1)},
		core.Rule{Name: "b", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerHour(1), 100)},
	)
	l, _ := core.NewLimiter(p, core.WithStore(st))
	ctx := context.Background()
	req := core.Request{User: "u"}
	l.Allow(ctx, req)
	for range 3 {
		if d, _ := l.Allow(ctx, req); d.Allowed {
			t.Fatal("allowed past the burst")
		}
	}
	if s := st.Stats(); s.Local != 2 {
		t.Fatalf("Stats = %+v, want 2 local denials", s)
	}
	if err := st.Reset(ctx, "a", "u"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Allow(ctx, req); !d.Allowed {
		t.Fatalf("after Reset: %+v, want allowed", d)
	}
}
