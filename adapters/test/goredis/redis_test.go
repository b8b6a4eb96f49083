package goredis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

var t0 = redistests.T0

// TestSameDecisionsAsMemory drives the memory store and the Redis store
// through the same random timelines and requires identical states, field
// by field (see redistests.RunSameDecisionsAsMemory).
func TestSameDecisionsAsMemory(t *testing.T) {
	client := standaloneClient(redistest.Standalone(t))(t)
	redistests.RunSameDecisionsAsMemory(t, 40, redistests.MemoryCase{
		Name: "standalone",
		New: func(t testing.TB, o redistests.Options) core.Store {
			return kit.Store(t, client, o)
		},
	})
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
	p := redistests.Policy(t,
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
	p := redistests.Policy(t,
		core.Rule{Name: "a", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 10)},
		core.Rule{Name: "b", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 10)},
		core.Rule{Name: "c", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 10)},
	)
	rules := p.Rules()
	// Find an identity whose three keys fall in three different slots.
	id := redistests.SplitID(st.Key, "user", rules[0].Name, rules[1].Name, rules[2].Name)
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
	p := redistests.Policy(t,
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
	p := redistests.Policy(t, core.Rule{Name: "r", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 1)})
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

// TestDistributedExactness: several store instances, each on a client of
// its own, admit exactly the burst together (see
// redistests.RunDistributedExactness).
func TestDistributedExactness(t *testing.T) {
	clients := [2]func(t testing.TB) redis.UniversalClient{standaloneClient(redistest.Standalone(t)), clusterClient(redistest.Cluster(t))}
	redistests.RunDistributedExactness(t, func(t testing.TB, cluster bool, o redistests.Options) core.Store {
		client := clients[0]
		if cluster {
			client = clients[1]
		}
		return kit.Store(t, client(t), o)
	})
}

// TestResetDropsLocalDenials: after Reset, a bucket is full again and no
// instance-local denial hides it.
func TestResetDropsLocalDenials(t *testing.T) {
	srv := redistest.Standalone(t)
	client := standaloneClient(srv)(t)
	clock := core.NewManualClock(t0)
	st := mustStore(t, client, goredis.WithClientClock(clock), goredis.WithLocalDenials())
	p := redistests.Policy(t,
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
