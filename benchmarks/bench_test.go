package benchmarks

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/internal/redistest"
)

// scenario is one comparison: every implementation decides the same
// requests under the same quota.
type scenario struct {
	name  string
	q     quota
	tiers int  // 1: per-user; 3: per-user, per-endpoint and global
	keys  int  // distinct subjects, visited in turn by every goroutine
	deny  bool // every measured decision is a denial
}

var memoryScenarios = []scenario{
	{name: "HotKeyAllow", q: roomy, tiers: 1, keys: 1},
	{name: "HotKeyDeny", q: stingy, tiers: 1, keys: 1, deny: true},
	{name: "Keys100k", q: manyKeys, tiers: 1, keys: 100_000},
	{name: "ThreeTier", q: roomy, tiers: 3, keys: 1},
}

var redisScenarios = []scenario{
	{name: "HotKeyAllow", q: roomy, tiers: 1, keys: 1},
	{name: "DenyFlood", q: stingy, tiers: 1, keys: 1, deny: true},
	{name: "Keys10k", q: manyKeys, tiers: 1, keys: 10_000},
	{name: "ThreeTier", q: roomy, tiers: 3, keys: 1},
}

// redisGoroutines are the concurrency levels of the Redis benchmarks.
var redisGoroutines = []int{1, 16, 64}

// BenchmarkMemory compares the in-memory limiters, GOMAXPROCS goroutines
// deciding at once.
func BenchmarkMemory(b *testing.B) {
	for _, sc := range memoryScenarios {
		b.Run(sc.name, func(b *testing.B) {
			for _, mb := range memoryBuilders {
				if mb.oneKey && sc.keys > 1 {
					continue
				}
				b.Run("impl="+mb.name, func(b *testing.B) {
					im := mb.build(b, sc.q, sc.tiers)
					subs := subjects(sc.keys)
					prime(b, im, subs, 1)
					b.ReportAllocs()
					b.ResetTimer()
					errs, wrong := measure(b, im, subs, sc.deny, 0)
					b.StopTimer()
					reportDecisions(b, sc, errs, wrong)
				})
			}
		})
	}
}

// BenchmarkRedis compares the Redis limiters against one local redis-server
// at 1, 16 and 64 goroutines.
func BenchmarkRedis(b *testing.B) {
	srv := redisServer(b)
	for _, sc := range redisScenarios {
		b.Run(sc.name, func(b *testing.B) {
			for _, g := range redisGoroutines {
				b.Run("g="+strconv.Itoa(g), func(b *testing.B) {
					for _, rb := range redisBuilders {
						b.Run("impl="+rb.name, func(b *testing.B) { runRedis(b, srv, sc, g, rb) })
					}
				})
			}
		})
	}
}

// runRedis measures one implementation in one scenario at g goroutines.
func runRedis(b *testing.B, srv *redistest.Server, sc scenario, g int, rb redisBuilder) {
	flushAll(b, srv)
	var n sent
	im := rb.build(b, srv.Addr, &n, sc.q, sc.tiers, sc.deny)
	subs := subjects(sc.keys)
	prime(b, im, subs, 64)
	// Open the connections the run will use and let local denial caches
	// learn, as in a service that has been up for a while.
	warm(im, subs, g)
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		b.Fatalf("CONFIG RESETSTAT: %v", err)
	}
	st, hasStats := im.(statser)
	var local0, total0 int64
	if hasStats {
		local0, total0 = st.decisions()
	}
	sent0 := n.Load()
	redis0, client0 := redisCPU(b, srv), processCPU()
	b.ReportAllocs()
	b.ResetTimer()
	errs, wrong := measure(b, im, subs, sc.deny, g)
	b.StopTimer()
	redisSpent, clientSpent := redisCPU(b, srv)-redis0, processCPU()-client0

	reportDecisions(b, sc, errs, wrong)
	b.ReportMetric(float64(n.Load()-sent0)/float64(b.N), "cmds/decision")
	var ran int64
	for name, calls := range srv.CommandCalls(b) {
		// Not our own INFO and CONFIG RESETSTAT.
		if name != "info" && !strings.HasPrefix(name, "config") {
			ran += calls
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

// redisCPU returns the CPU time (user and system) redis-server has used,
// from INFO cpu.
func redisCPU(tb testing.TB, srv *redistest.Server) time.Duration {
	tb.Helper()
	v, err := srv.Do("INFO", "cpu")
	info, ok := v.(string)
	if err != nil || !ok {
		tb.Fatalf("INFO cpu = %v, %v", v, err)
	}
	var total float64
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
					failed.CompareAndSwap(nil, &err)
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
