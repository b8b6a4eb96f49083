package benchmarks

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/internal/redistest"
)

// scenario is one comparison: every implementation decides the same
// requests under the same quota, at each of its concurrency levels.
type scenario struct {
	name       string
	q          quota
	tiers      int   // 1: per-user; 3: per-user, per-endpoint and global; up to maxTiers (see tierDefs)
	keys       int   // distinct subjects, visited in turn by every goroutine
	deny       bool  // every measured decision is a denial
	goroutines []int // the goroutines deciding at once, one sub-benchmark g=<n> each
	perKey     bool  // also report the heap the implementation holds per key (B/key)
	cluster    bool  // Redis: on a Cluster of 3 masters rather than one server
}

var memoryScenarios = []scenario{
	{name: "HotKeyAllow", q: roomy, tiers: 1, keys: 1, goroutines: []int{1, 2}},
	{name: "HotKeyDeny", q: stingy, tiers: 1, keys: 1, deny: true, goroutines: []int{1, 2}},
	{name: "Keys100k", q: manyKeys, tiers: 1, keys: 100_000, goroutines: []int{2}},
	{name: "ThreeTier", q: roomy, tiers: 3, keys: 1, goroutines: []int{1, 2}},
	{name: "EightTier", q: roomy, tiers: 8, keys: 1, goroutines: []int{1}},
	{name: "Keys1M", q: manyKeys, tiers: 1, keys: 1_000_000, goroutines: []int{2}, perKey: true},
}

// redisGoroutines are the concurrency levels of the Redis benchmarks on one
// server.
var redisGoroutines = []int{1, 16, 64}

var redisScenarios = []scenario{
	{name: "HotKeyAllow", q: roomy, tiers: 1, keys: 1, goroutines: redisGoroutines},
	{name: "DenyFlood", q: stingy, tiers: 1, keys: 1, deny: true, goroutines: redisGoroutines},
	{name: "Keys10k", q: manyKeys, tiers: 1, keys: 10_000, goroutines: redisGoroutines},
	{name: "ThreeTier", q: roomy, tiers: 3, keys: 1, goroutines: redisGoroutines},
	// The three tiers' keys are in three hash slots (runRedis checks it),
	// so that no implementation decides them in one call on one node.
	{name: "ThreeTierCluster", q: roomy, tiers: 3, keys: 1, goroutines: []int{1, 64}, cluster: true},
}

// BenchmarkMemory compares the in-memory limiters at each scenario's
// goroutine counts: g=1 is a plain loop, g=2 two goroutines through
// RunParallel (see measure).
func BenchmarkMemory(b *testing.B) {
	for _, sc := range memoryScenarios {
		b.Run(sc.name, func(b *testing.B) {
			subs := subjects(sc.keys, sc.tiers)
			for _, g := range sc.goroutines {
				b.Run("g="+strconv.Itoa(g), func(b *testing.B) {
					for _, mb := range slices.Concat(memoryBuilders, ceilingBuilders(sc, subs)) {
						if mb.oneKey && sc.keys > 1 {
							continue
						}
						var kept kept
						b.Run("impl="+mb.name, func(b *testing.B) { runMemory(b, sc, g, mb, subs, &kept) })
						kept.close()
					}
				})
			}
		})
	}
}

// kept is an implementation kept across the runs of one sub-benchmark
// (testing calls its function with b.N = 1, then with larger b.N), so that
// a scenario of a million keys builds and primes it once per -count rather
// than once per run. Its cleanups run when it is replaced or closed.
type kept struct {
	im       impl
	perKey   float64 // B/key measured when it was built
	cleanups []func()
}

func (k *kept) close() {
	for i := len(k.cleanups) - 1; i >= 0; i-- {
		k.cleanups[i]()
	}
	*k = kept{}
}

// keepTB is a testing.TB whose cleanups wait for kept.close rather than
// the end of the current run.
type keepTB struct {
	testing.TB
	k *kept
}

func (t keepTB) Cleanup(f func()) { t.k.cleanups = append(t.k.cleanups, f) }

// runMemory measures one in-memory implementation in one scenario at g
// goroutines. The implementation is built and primed at b.N = 1, the first
// run of every -count, and kept for the longer runs that follow; with
// sc.perKey, the heap in use (after a collection) is read before it is
// built and after it is primed, and the difference per key reported as
// B/key.
func runMemory(b *testing.B, sc scenario, g int, mb builder, subs []subject, k *kept) {
	if b.N == 1 || k.im == nil {
		k.close()
		var before uint64
		if sc.perKey {
			before = heapInuse()
		}
		k.im = mb.build(keepTB{TB: b, k: k}, sc.q, sc.tiers, sc.keys)
		prime(b, k.im, subs, runtime.GOMAXPROCS(0))
		if sc.perKey {
			k.perKey = (float64(heapInuse()) - float64(before)) / float64(len(subs))
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	errs, wrong := measure(b, k.im, subs, sc.deny, g)
	b.StopTimer()
	reportDecisions(b, sc, errs, wrong)
	if sc.perKey {
		b.ReportMetric(k.perKey, "B/key")
	}
}

// heapInuse returns the bytes of heap spans in use after a full collection:
// what the live objects occupy, fragmentation included.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// BenchmarkRedis compares the Redis limiters against one local redis-server
// at 1, 16 and 64 goroutines, and on a local Cluster of 3 masters for the
// scenarios marked cluster.
func BenchmarkRedis(b *testing.B) {
	for _, sc := range redisScenarios {
		b.Run(sc.name, func(b *testing.B) {
			tgt := standaloneTarget(redisServer(b))
			if sc.cluster {
				tgt = clusterTarget(redisCluster(b))
			}
			for _, g := range sc.goroutines {
				b.Run("g="+strconv.Itoa(g), func(b *testing.B) {
					for _, rb := range redisBuilders {
						if sc.cluster && rb.standaloneOnly {
							continue
						}
						b.Run("impl="+rb.name, func(b *testing.B) { runRedis(b, tgt, sc, g, rb) })
					}
				})
			}
		})
	}
}

// runRedis measures one implementation in one scenario at g goroutines.
func runRedis(b *testing.B, tgt redisTarget, sc scenario, g int, rb redisBuilder) {
	for _, srv := range tgt.nodes {
		flushAll(b, srv)
	}
	if tgt.cluster && b.N == 1 {
		checkSlots(b, tgt, rb, sc.tiers)
	}
	var n sent
	im := rb.build(b, tgt, &n, sc.q, sc.tiers, sc.deny)
	subs := subjects(sc.keys, sc.tiers)
	prime(b, im, subs, 64)
	// Open the connections the run will use and let local denial caches
	// learn, as in a service that has been up for a while.
	warm(im, subs, g)
	for _, srv := range tgt.nodes {
		if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
			b.Fatalf("CONFIG RESETSTAT: %v", err)
		}
	}
	st, hasStats := im.(statser)
	var local0, total0 int64
	if hasStats {
		local0, total0 = st.decisions()
	}
	sent0 := n.Load()
	redis0, client0 := redisCPU(b, tgt), processCPU()
	b.ReportAllocs()
	b.ResetTimer()
	errs, wrong := measure(b, im, subs, sc.deny, g)
	b.StopTimer()
	redisSpent, clientSpent := redisCPU(b, tgt)-redis0, processCPU()-client0

	reportDecisions(b, sc, errs, wrong)
	b.ReportMetric(float64(n.Load()-sent0)/float64(b.N), "cmds/decision")
	var ran int64
	for _, srv := range tgt.nodes {
		for name, calls := range srv.CommandCalls(b) {
			// Not our own INFO and CONFIG RESETSTAT.
			if name != "info" && !strings.HasPrefix(name, "config") {
				ran += calls
			}
		}
	}
	b.ReportMetric(float64(ran)/float64(b.N), "redis-cmds/decision")
	share := 0.0
	if hasStats {
		if local, total := st.decisions(); total > total0 {
			share = float64(local-local0) / float64(total-total0)
		}
	}
	b.ReportMetric(share, "local-share")
	b.ReportMetric(float64(redisSpent)/float64(b.N), "redis-cpu-ns/decision")
	b.ReportMetric(float64(clientSpent)/float64(b.N), "client-cpu-ns/decision")
}

// checkSlots fails b unless rb, deciding one request of tiers tiers on
// the Cluster, writes keys in at least tiers distinct hash slots. It uses
// an instance of its own with the stingy quota: a bucket of the roomy quota
// is full again, and its key gone, some milliseconds after one request,
// while an emptied stingy one stays for an hour. It empties the Cluster
// again afterwards.
func checkSlots(b *testing.B, tgt redisTarget, rb redisBuilder, tiers int) {
	b.Helper()
	im := rb.build(b, tgt, new(sent), stingy, tiers, false)
	s := newSubject("slots", tiers)
	if ok, err := im.allow(context.Background(), &s); err != nil || !ok {
		b.Fatalf("the first request on the Cluster = %v, %v; want allowed", ok, err)
	}
	slots := map[int]bool{}
	var keys []string
	for _, srv := range tgt.nodes {
		v, err := srv.Do("KEYS", "*")
		if err != nil {
			b.Fatalf("KEYS *: %v", err)
		}
		list, ok := v.([]any)
		if !ok {
			b.Fatalf("KEYS * = %T, want an array", v)
		}
		for _, k := range list {
			key, ok := k.(string)
			if !ok {
				b.Fatalf("KEYS *: an element of type %T, want a string", k)
			}
			keys = append(keys, key)
			slots[redistest.KeySlot(key)] = true
		}
		flushAll(b, srv)
	}
	if len(slots) < tiers {
		b.Fatalf("%d tiers wrote keys in %d hash slots, want %d: %q", tiers, len(slots), tiers, keys)
	}
}

// redisCPU returns the CPU time (user and system) the servers of tgt have
// used, from INFO cpu.
func redisCPU(tb testing.TB, tgt redisTarget) time.Duration {
	tb.Helper()
	var total float64
	for _, srv := range tgt.nodes {
		v, err := srv.Do("INFO", "cpu")
		info, ok := v.(string)
		if err != nil || !ok {
			tb.Fatalf("INFO cpu = %v, %v", v, err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			k, val, _ := strings.Cut(strings.TrimSpace(line), ":")
			if k == "used_cpu_sys" || k == "used_cpu_user" {
				f, err := strconv.ParseFloat(val, 64)
				if err != nil {
					tb.Fatalf("INFO cpu: %s: %v", line, err)
				}
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}

// prime decides once for every subject, with workers goroutines, so that
// every bucket exists before the run and a deny scenario's only token is
// taken.
func prime(b *testing.B, im impl, subs []subject, workers int) {
	b.Helper()
	ctx := context.Background()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range min(workers, len(subs)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(subs) {
					return
				}
				if _, err := im.allow(ctx, &subs[i]); err != nil {
					// A copy, so that only a failure puts an error on
					// the heap.
					e := err
					failed.CompareAndSwap(nil, &e)
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		// A peer may fail under this load (throttled's CAS gives up after
		// 10 attempts); the run counts such errors. Only say so.
		b.Logf("prime: an implementation error: %v", *err)
	}
}

// warm runs a few decisions on g goroutines.
func warm(im impl, subs []subject, g int) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range g {
		wg.Go(func() {
			for i := range 8 {
				im.allow(ctx, &subs[(w*8+i)%len(subs)])
			}
		})
	}
	wg.Wait()
}

// measure runs b.N decisions and counts the errors and the wrong answers
// (a denial in an allow scenario, or the reverse). goroutines is 0 for
// RunParallel's default of GOMAXPROCS, 1 for a serial loop, and otherwise
// the number of goroutines RunParallel starts, through SetParallelism: it
// starts a multiple of GOMAXPROCS, so a count GOMAXPROCS does not divide is
// rounded up, and said.
func measure(b *testing.B, im impl, subs []subject, deny bool, goroutines int) (errs, wrong int64) {
	ctx := context.Background()
	n := len(subs)
	if goroutines == 1 {
		i := 0
		for range b.N {
			ok, err := im.allow(ctx, &subs[i])
			if err != nil {
				errs++
			} else if ok == deny {
				wrong++
			}
			if i++; i == n {
				i = 0
			}
		}
		return errs, wrong
	}
	if goroutines > 1 {
		procs := runtime.GOMAXPROCS(0)
		p := (goroutines + procs - 1) / procs
		if p*procs != goroutines {
			b.Logf("%d goroutines asked, %d run (GOMAXPROCS=%d)", goroutines, p*procs, procs)
		}
		b.SetParallelism(p)
	}
	var next atomic.Uint64
	var totalErrs, totalWrong atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		// Goroutines start at different subjects; a wrapping counter rather
		// than a modulo keeps a division out of the loop.
		i := int(next.Add(7919) % uint64(n))
		var e, w int64
		for pb.Next() {
			ok, err := im.allow(ctx, &subs[i])
			if err != nil {
				e++
			} else if ok == deny {
				w++
			}
			if i++; i == n {
				i = 0
			}
		}
		totalErrs.Add(e)
		totalWrong.Add(w)
	})
	return totalErrs.Load(), totalWrong.Load()
}

// reportDecisions reports decisions/s (decisions without error per second
// of wall time) and errors/op, and wrong/op when an implementation answered
// against the scenario, which means its configuration or the harness is
// wrong, not that it is fast.
func reportDecisions(b *testing.B, sc scenario, errs, wrong int64) {
	b.ReportMetric(float64(int64(b.N)-errs)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(errs)/float64(b.N), "errors/op")
	if wrong > 0 {
		b.ReportMetric(float64(wrong)/float64(b.N), "wrong/op")
		want := "allowed"
		if sc.deny {
			want = "denied"
		}
		b.Logf("%d of %d decisions were not %s", wrong, b.N, want)
	}
}
