package goredis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
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

// TestBatchedCall: one script call carrying many requests reads each key
// once and writes each key it changes once, at the end, and decides every
// request as the memory store decides the same takes one after another, in
// the order the script decides them (Builder.Order: identical requests
// together, as runs): each on the state the requests before it in the call
// left, a denied request consuming nothing. In take-with-undo mode, the undo values chain:
// each request's value before is the one the last writer before it wrote,
// and the key ends holding the last writer's value.
func TestBatchedCall(t *testing.T) {
	srv := redistest.Standalone(t)
	client := standaloneClient(srv)(t)
	ctx := context.Background()
	if err := client.ScriptLoad(ctx, redisscript.Source()).Err(); err != nil {
		t.Fatal(err)
	}
	ls := redistests.Limits(t,
		core.TokenBucket(core.PerSecond(2), 4),
		core.Shaping(core.PerSecond(10), 2, 300*time.Millisecond),
		core.FixedWindow(5, time.Second),
		core.SlidingWindow(6, time.Second),
		core.SlidingLog(5, time.Second),
		core.TokenBucket(core.PerDay(1), 200), // microsecond resolution
	)
	for _, mode := range []string{redisscript.ModeTake, redisscript.ModeTakeUndo} {
		t.Run(mode, func(t *testing.T) {
			keys, err := redisscript.NewKeys("batch-"+mode, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			mem, err := core.NewMemoryStore()
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(len(mode)), 2))
			var b redisscript.Builder
			b.Reset(redisscript.NowArg(t0.Add(123456789)), mode)
			var (
				calls   []*redisscript.Call
				want    [][]core.BucketState
				changed = map[string]bool{} // keys an allowed take wrote
			)
			for range 80 {
				n := 1 + rng.IntN(2)
				var buckets []core.Bucket
				var ks []string
				for _, i := range rng.Perm(len(ls))[:n] {
					id := "u" + strconv.Itoa(rng.IntN(2))
					buckets = append(buckets, core.Bucket{Rule: "r" + strconv.Itoa(i), Key: id, Limit: ls[i]})
					ks = append(ks, keys.Key("r"+strconv.Itoa(i), id))
				}
				c := &redisscript.Call{Cost: int64(rng.IntN(3)), Buckets: buckets, Keys: ks, States: make([]core.BucketState, n)}
				b.Add(c)
				calls = append(calls, c)
			}
			// The memory store takes them in the order the script decides
			// them: in ModeTake, identical requests as runs, at the first's
			// place.
			order := b.Order()
			want = make([][]core.BucketState, len(calls))
			for _, i := range order {
				c := calls[i]
				tk := &core.Take{Now: t0.Add(123456789), Cost: c.Cost, Buckets: c.Buckets, States: make([]core.BucketState, len(c.Buckets))}
				if err := mem.Take(ctx, tk); err != nil {
					t.Fatal(err)
				}
				want[i] = tk.States
				if c.Cost > 0 && redistests.Allowed(tk) {
					for _, key := range c.Keys {
						changed[key] = true
					}
				}
			}
			if slices.IsSorted(order) {
				t.Fatalf("the script decides the requests in the order %v; want some reordered (runs)", order)
			}
			resetStats(t, srv)
			v, err := client.EvalSha(ctx, redisscript.SHA(), b.Keys, b.Args()...).Result()
			if err != nil {
				t.Fatal(err)
			}
			reply, undo := scriptReply(t, v, mode == redisscript.ModeTakeUndo)
			vals := make([][]string, len(calls))
			if mode == redisscript.ModeTakeUndo {
				_, err = b.DecodeUndo(reply, undo, calls, vals)
			} else {
				_, err = b.Decode(reply, calls)
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range calls {
				for k := range c.States {
					if c.States[k] != want[i][k] {
						t.Fatalf("request %d (cost %d) bucket %s (%v): redis %+v, memory %+v", i, c.Cost, c.Buckets[k].Rule, c.Buckets[k].Limit, c.States[k], want[i][k])
					}
				}
			}
			cmds := commandCalls(t, srv)
			if cmds["get"] != int64(len(b.Keys)) || cmds["set"] != int64(len(changed)) {
				t.Errorf("a call of %d requests on %d keys, %d of them changed, ran %v; want one get per key and one set per changed key",
					len(calls), len(b.Keys), len(changed), cmds)
			}
			if mode != redisscript.ModeTakeUndo {
				return
			}
			// In the order decided, each bucket's value before is what the
			// last writer before it wrote (or "", none yet), and each key
			// holds its last writer's.
			seen := map[string]string{}
			for _, i := range order {
				c, v := calls[i], vals[i]
				if len(v) != 2*len(c.Keys) {
					t.Fatalf("request %d: %d undo values, want %d", i, len(v), 2*len(c.Keys))
				}
				for k, key := range c.Keys {
					if v[2*k] != seen[key] {
						t.Fatalf("request %d, key %s: value before %q, want %q", i, key, v[2*k], seen[key])
					}
				}
				for k, key := range c.Keys {
					if w := v[2*k+1]; w != "" {
						seen[key] = w
					}
				}
			}
			if len(seen) != len(changed) {
				t.Errorf("%d keys written per the undo values, %d changed", len(seen), len(changed))
			}
			for k, w := range seen {
				got, err := client.Get(ctx, k).Result()
				if err != nil || got != w {
					t.Errorf("key %s holds %q, %v; want its last writer's value %q", k, got, err, w)
				}
			}
		})
	}
}

// TestFastPathSameAsGeneral: the script's fast path (its function fast)
// decides what it decides exactly as the rest of the script. Two scripts
// are cut from the script's text at its markers: the fast path alone
// (replying "" where it declines) and the script without it. Random calls
// on token buckets and shaping limits (several requests per call on few
// keys, many repeated, so that runs of identical requests form, costs from
// 0 to past the burst, one to three buckets per request, time going
// forward by random steps) run on two sets of keys, one through each: the
// replies must decode to the same states for every request (the fast path
// answers a run in one record per bucket, the rest request by request),
// and every value written must be equal. Then the cases it leaves to the rest, a
// limit changed under a bucket and a bucket far ahead of the time used,
// must be declined with nothing written.
func TestFastPathSameAsGeneral(t *testing.T) {
	srv := redistest.Standalone(t)
	client := standaloneClient(srv)(t)
	ctx := context.Background()
	ls := redistests.Limits(t,
		core.TokenBucket(core.PerSecond(20), 5),
		core.Shaping(core.PerSecond(10), 3, 400*time.Millisecond),
		core.TokenBucket(core.PerMinute(7), 2),
		core.Shaping(core.PerSecond(1000), 1, time.Millisecond),
	)
	src := redisscript.Source()
	begin, call, end := strings.Index(src, "-- fast:begin"), strings.Index(src, "-- fast:call"), strings.Index(src, "-- fast:end")
	if begin < 0 || call < begin || end < call {
		t.Fatal("the script's fast path markers are missing or out of order")
	}
	fastOnly := src[:call] + "return fast() or ''\n"
	general := src[:begin] + src[end:]
	declined := func(reply string) bool { return reply == "" }
	// run returns the binary reply and, in ModeTakeUndo, the undo values.
	run := func(script string, keys []string, args []any) (string, []string) {
		t.Helper()
		v, err := client.Eval(ctx, script, keys, args...).Result()
		if err != nil {
			t.Fatal(err)
		}
		_, undo := v.([]any)
		return scriptReply(t, v, undo)
	}
	values := func(keys []string) []string {
		t.Helper()
		out := make([]string, len(keys))
		for i, k := range keys {
			v, err := client.Get(ctx, k).Result()
			if err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			out[i] = v
		}
		return out
	}
	rng := rand.New(rand.NewPCG(7, 11))
	now := t0
	var fastKeys, generalKeys []string
	runs, compact := 0, 0 // requests repeated; calls the fast path answered in fewer records
	for call := range 600 {
		mode := redisscript.ModeTake
		if call%2 == 1 {
			mode = redisscript.ModeTakeUndo
		}
		now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
		var fb, gb redisscript.Builder
		fb.Reset(redisscript.NowArg(now), mode)
		gb.Reset(redisscript.NowArg(now), mode)
		fb.SetMinTTL(time.Duration(1+call%3) * time.Second) // no key expires before it is read back
		gb.SetMinTTL(time.Duration(1+call%3) * time.Second)
		var fcalls, gcalls []*redisscript.Call
		for range 1 + rng.IntN(40) {
			if len(fcalls) > 0 && rng.IntN(2) == 0 {
				// A request made before, again: runs form.
				i := rng.IntN(len(fcalls))
				f, g := *fcalls[i], *gcalls[i]
				f.States, g.States = make([]core.BucketState, len(f.Buckets)), make([]core.BucketState, len(g.Buckets))
				fcalls, gcalls = append(fcalls, &f), append(gcalls, &g)
				fb.Add(&f)
				gb.Add(&g)
				runs++
				continue
			}
			n := 1 + rng.IntN(3)
			var buckets []core.Bucket
			var fk, gk []string
			for _, i := range rng.Perm(len(ls))[:n] {
				id := "u" + strconv.Itoa(rng.IntN(3))
				buckets = append(buckets, core.Bucket{Rule: "r" + strconv.Itoa(i), Key: id, Limit: ls[i]})
				fk = append(fk, "fast:r"+strconv.Itoa(i)+":"+id)
				gk = append(gk, "general:r"+strconv.Itoa(i)+":"+id)
			}
			cost := int64(rng.IntN(4))
			if rng.IntN(20) == 0 {
				cost = 6 // past every burst
			}
			f := &redisscript.Call{Cost: cost, Buckets: buckets, Keys: fk, States: make([]core.BucketState, n)}
			g := &redisscript.Call{Cost: cost, Buckets: buckets, Keys: gk, States: make([]core.BucketState, n)}
			fcalls, gcalls = append(fcalls, f), append(gcalls, g)
			fb.Add(f)
			gb.Add(g)
		}
		fr, fu := run(fastOnly, fb.Keys, fb.Args())
		gr, gu := run(general, gb.Keys, gb.Args())
		if declined(fr) {
			t.Fatalf("call %d (%s): the fast path declined a call it decides", call, mode)
		}
		if len(fr) < len(gr) {
			compact++
		}
		var (
			fat, gat   time.Time
			ferr, gerr error
			fv, gv     = make([][]string, len(fcalls)), make([][]string, len(gcalls))
		)
		if mode == redisscript.ModeTakeUndo {
			fat, ferr = fb.DecodeUndo(fr, fu, fcalls, fv)
			gat, gerr = gb.DecodeUndo(gr, gu, gcalls, gv)
		} else {
			fat, ferr = fb.Decode(fr, fcalls)
			gat, gerr = gb.Decode(gr, gcalls)
		}
		if ferr != nil || gerr != nil || !fat.Equal(gat) {
			t.Fatalf("call %d (%s): the fast path's reply decodes to %v, %v; the rest's to %v, %v", call, mode, fat, ferr, gat, gerr)
		}
		for i := range fcalls {
			if !slices.Equal(fcalls[i].States, gcalls[i].States) {
				t.Fatalf("call %d (%s), request %d: the fast path answered %+v, the rest %+v", call, mode, i, fcalls[i].States, gcalls[i].States)
			}
			if !slices.Equal(fv[i], gv[i]) {
				t.Fatalf("call %d (%s), request %d: the fast path's undo values %x, the rest's %x", call, mode, i, fv[i], gv[i])
			}
		}
		fastKeys, generalKeys = fb.Keys, gb.Keys
		if fv, gv := values(fb.Keys), values(gb.Keys); !slices.Equal(fv, gv) {
			t.Fatalf("call %d: the fast path wrote %q, the rest %q", call, fv, gv)
		}
		// Both write a key to live as long, but for the time between the
		// two calls (the times to live are counted from each SET).
		for i := range fb.Keys {
			ft, ferr := client.PTTL(ctx, fb.Keys[i]).Result()
			gt, gerr := client.PTTL(ctx, gb.Keys[i]).Result()
			if ferr != nil || gerr != nil {
				t.Fatal(ferr, gerr)
			}
			if (ft < 0) != (gt < 0) || (ft-gt).Abs() > 250*time.Millisecond {
				t.Fatalf("call %d: key %d lives %v through the fast path, %v through the rest", call, i, ft, gt)
			}
		}
	}
	if len(fastKeys) == 0 || len(generalKeys) == 0 || runs == 0 || compact == 0 {
		t.Fatalf("%d keys, %d requests repeated, %d calls answered with runs: nothing compared", len(fastKeys), runs, compact)
	}

	// Declined, nothing written: a bucket written under another fill time,
	// and one far ahead of the time used.
	changed := redistests.Limits(t, core.TokenBucket(core.PerSecond(5), 5))[0]
	var b redisscript.Builder
	decline := func(name string, at time.Time, lim *core.Limit, mode string) {
		t.Helper()
		b.Reset(redisscript.NowArg(at), mode)
		b.Add(&redisscript.Call{Cost: 1, Buckets: []core.Bucket{{Rule: "r0", Key: "u0", Limit: lim}}, Keys: []string{"owing"}})
		before := values(b.Keys)
		if before[0] == "" {
			t.Fatalf("%s: the bucket holds nothing", name)
		}
		if r, _ := run(fastOnly, b.Keys, b.Args()); !declined(r) {
			t.Errorf("%s: the fast path replied %x, want it declined", name, r)
		}
		if after := values(b.Keys); !slices.Equal(before, after) {
			t.Errorf("%s: the fast path declined but the value changed from %q to %q", name, before, after)
		}
	}
	b.Reset(redisscript.NowArg(now), redisscript.ModeTake)
	b.Add(&redisscript.Call{Cost: 5, Buckets: []core.Bucket{{Rule: "r0", Key: "u0", Limit: ls[0]}}, Keys: []string{"owing"}})
	if r, _ := run(fastOnly, b.Keys, b.Args()); declined(r) || r[redisscript.HeaderSize] != 0 {
		t.Fatalf("a full bucket's whole burst: reply %x, want it allowed", r) // the bucket then owes its fill time
	}
	decline("limit changed", now, changed, redisscript.ModeTake)
	decline("limit changed, with undo", now, changed, redisscript.ModeTakeUndo)
	decline("far ahead", now.Add(-200*24*time.Hour), ls[0], redisscript.ModeTake)
	decline("window", now, redistests.Limits(t, core.FixedWindow(5, time.Second))[0], redisscript.ModeTake)
	decline("a day's token bucket", now, redistests.Limits(t, core.TokenBucket(core.PerDay(1), 200))[0], redisscript.ModeTake)
	decline("refund", now, ls[0], redisscript.ModeRefund)
}

// scriptReply returns the binary string and, when undo, the undo values of
// the script's reply v: the string alone, or with undo an array of the
// string and the array of undo values.
func scriptReply(t *testing.T, v any, undo bool) (string, []string) {
	t.Helper()
	if !undo {
		reply, ok := v.(string)
		if !ok {
			t.Fatalf("reply %v (%T), want a string", v, v)
		}
		return reply, nil
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 2 {
		t.Fatalf("reply %v, want an array of the string and the undo values", v)
	}
	reply, ok := arr[0].(string)
	u, ok2 := arr[1].([]any)
	if !ok || !ok2 {
		t.Fatalf("reply %v, want an array of the string and the undo values", v)
	}
	vals := make([]string, len(u))
	for i, x := range u {
		if vals[i], ok = x.(string); !ok {
			t.Fatalf("undo value %d is %T, want a string", i, x)
		}
	}
	return reply, vals
}

// TestScriptRefusesMalformedCalls: a call argument the script cannot read
// (short, a time outside its range, limits past its end, an unknown limit
// code, a truncated request) is an error reply naming what is wrong, from
// the fast path's fallback as from the rest, and writes nothing.
func TestScriptRefusesMalformedCalls(t *testing.T) {
	srv := redistest.Standalone(t)
	client := standaloneClient(srv)(t)
	ctx := context.Background()
	l := redistests.Limits(t, core.TokenBucket(core.PerSecond(10), 5))[0]
	var b redisscript.Builder
	b.Reset(redisscript.NowArg(t0), redisscript.ModeTake)
	b.Add(&redisscript.Call{Cost: 1, Buckets: []core.Bucket{{Rule: "r", Key: "u", Limit: l}}, Keys: []string{"malformed:u"}})
	args := b.Args()
	valid := args[0].(string)
	// patched returns valid with b written at offset at.
	patched := func(at int, b ...byte) string {
		p := []byte(valid)
		copy(p[at:], b)
		return string(p)
	}
	ff := byte(0xff)
	for _, tc := range []struct {
		name, call, want string
	}{
		{"short header", valid[:redisscript.CallHeaderSize-1], "bad arguments"},
		{"seconds below -1", patched(1, 0xfe, ff, ff, ff, ff, ff, ff, ff), "bad time"},
		{"nanoseconds of a whole second", patched(9, 0x00, 0xca, 0x9a, 0x3b), "bad time"}, // 1e9
		{"limits past the end", patched(redisscript.CallHeaderSize-4, 9), "bad limit arguments"},
		{"limit code 0", patched(redisscript.CallHeaderSize, 0, 0, 0, 0, 0, 0, 0, 0), "bad arguments for limit 1"},
		{"truncated request", valid[:len(valid)-1], "bad request arguments"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			_, err := client.Eval(ctx, redisscript.Source(), b.Keys, tc.call).Result()
			if err == nil || !strings.Contains(err.Error(), "ERR ratelimit: "+tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if n, err := client.Exists(ctx, b.Keys...).Result(); err != nil || n != 0 {
				t.Fatalf("EXISTS %v = %d, %v; want nothing written", b.Keys, n, err)
			}
		})
	}
	// The call unchanged is decided, and writes its key.
	v, err := client.Eval(ctx, redisscript.Source(), b.Keys, valid).Result()
	if err != nil {
		t.Fatal(err)
	}
	reply, _ := scriptReply(t, v, false)
	call := &redisscript.Call{Cost: 1, Buckets: []core.Bucket{{Rule: "r", Key: "u", Limit: l}}, Keys: []string{"malformed:u"}, States: make([]core.BucketState, 1)}
	if _, err := b.Decode(reply, []*redisscript.Call{call}); err != nil || !call.States[0].Allowed || call.States[0].Remaining != 4 {
		t.Fatalf("the valid call: %+v, %v; want allowed with 4 remaining", call.States[0], err)
	}
	if n, err := client.Exists(ctx, b.Keys...).Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS %v = %d, %v; want the key written", b.Keys, n, err)
	}
}
