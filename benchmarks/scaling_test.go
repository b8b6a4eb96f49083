package benchmarks

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/adapters/goredis"
	rlrueidis "github.com/bucketry/ratelimit/adapters/rueidis"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// The load of BenchmarkClusterScaling.
const (
	// scalingUsers are the distinct users, one per-user key each, spread
	// over the hash slots by their names.
	scalingUsers = 10_000
	// scalingEndpoints are the distinct endpoints of the three-tier policy:
	// its per-endpoint keys spread over slots too, so that only its global
	// key is one hot slot.
	scalingEndpoints = 64
	// scalingGoroutines decide at once.
	scalingGoroutines = 64
	// maxScalingMasters bounds the masters a run counts decisions for.
	maxScalingMasters = 8
	// scalingTimeout bounds each decision's wait.
	scalingTimeout = time.Second
)

// scalingMasters are the Cluster sizes measured.
var scalingMasters = []int{1, 3, 6}

// scalingPolicy is a policy measured on each Cluster size. Its per-user
// quota admits more than a run decides per user and refills one token in
// 16s, so no bucket denies or is full again (and its key gone) before the
// user's next turn; the other tiers, which see every request or a 64th of
// them, get the roomy quota.
type scalingPolicy struct {
	name  string
	rules []core.Rule
}

var scalingPolicies = []scalingPolicy{
	{name: "per-user", rules: []core.Rule{
		{Name: "per-user", Scope: core.ScopeUser, Limit: manyKeys.coreLimit()},
	}},
	{name: "three-tier", rules: []core.Rule{
		{Name: "per-user", Scope: core.ScopeUser, Limit: manyKeys.coreLimit()},
		{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: roomy.coreLimit()},
		{Name: "global", Scope: core.ScopeGlobal, Limit: roomy.coreLimit()},
	}},
}

// scalingStore builds one of our Redis stores on a Cluster, with its
// defaults (batching on, no local denials: nothing is denied here) but a
// timeout of 1s instead of 100ms, so that a 2-core machine shared with the
// servers measures throughput rather than timeouts, on a client that counts
// the commands it sends into n.
type scalingStore struct {
	name  string
	build func(tb testing.TB, tgt redisTarget, n *sent) (core.Store, func(rule, id string) string)
}

var scalingStores = []scalingStore{
	{name: "ours_goredis", build: func(tb testing.TB, tgt redisTarget, n *sent) (core.Store, func(rule, id string) string) {
		// newGoRedis: a ClusterClient with ContextTimeoutEnabled.
		st, err := goredis.New(newGoRedis(tb, tgt, n), goredis.WithTimeout(scalingTimeout))
		if err != nil {
			tb.Fatal(err)
		}
		return st, st.Key
	}},
	{name: "ours_rueidis", build: func(tb testing.TB, tgt redisTarget, n *sent) (core.Store, func(rule, id string) string) {
		st, err := rlrueidis.New(newRueidis(tb, tgt, n), rlrueidis.WithTimeout(scalingTimeout))
		if err != nil {
			tb.Fatal(err)
		}
		return st, st.Key
	}},
}

// BenchmarkClusterScaling measures decisions on Redis Clusters of 1, 3 and
// 6 masters started by the harness, through both of our stores, from
// scalingGoroutines goroutines deciding for scalingUsers users in turn.
// Besides decisions/s it reports, from the CPU time (INFO cpu, user and
// system) each redis-server used during the run and the decisions whose
// keys each master holds (counted from the keys' hash slots):
//
//   - m<i>-cpu-us/decision: master i's CPU per decision it served;
//   - m<i>-share: the fraction of decisions master i served (a three-tier
//     decision is served by every master holding one of its keys);
//   - ceiling-decisions/s: decisions / max_i(CPU of master i), the rate at
//     which the busiest master would use one whole core: what the Cluster
//     would serve with a core per master and enough clients;
//   - server-cpu-us/decision and server-cores: all masters together, per
//     decision and per second of wall time, and server-sys-fraction, the
//     part of it spent in the kernel;
//   - client-cpu-us/decision and client-cores: this process (getrusage),
//     the clients and the limiter; beside the server figures they tell
//     which side a small machine runs out of first;
//   - cmds/decision (commands the client sent) and redis-calls/decision
//     (commands the masters ran, INFO commandstats, less the harness's);
//   - server-wakeups/decision and server-preemptions/decision: the
//     voluntary and involuntary context switches of the masters' main
//     threads (/proc/<pid>/status, Linux only), per decision. A master
//     sleeps in epoll_wait when it has nothing to read, so the first is
//     how often it woke for work: the fewer decisions per wakeup, the more
//     CPU each decision costs. The second counts the times the scheduler
//     took the CPU from a runnable master, the sign of more processes than
//     cores.
//
// docs/SCALING.md gives the method and the measured table:
//
//	cd benchmarks && go test -run '^$' -bench ClusterScaling -benchtime 2s -timeout 0 .
func BenchmarkClusterScaling(b *testing.B) {
	for _, masters := range scalingMasters {
		b.Run("masters="+strconv.Itoa(masters), func(b *testing.B) {
			c := redistest.Cluster(b, redistest.WithMasters(masters))
			for _, pol := range scalingPolicies {
				b.Run("policy="+pol.name, func(b *testing.B) {
					for _, ss := range scalingStores {
						b.Run("impl="+ss.name, func(b *testing.B) { runScaling(b, c, pol, ss) })
					}
				})
			}
		})
	}
}

// runScaling measures one store and policy on Cluster c.
func runScaling(b *testing.B, c *redistest.ClusterServer, pol scalingPolicy, ss scalingStore) {
	masters := len(c.Masters)
	if masters > maxScalingMasters {
		b.Fatalf("%d masters, at most %d counted", masters, maxScalingMasters)
	}
	tgt := clusterTarget(c)
	for _, m := range c.Masters {
		flushAll(b, m)
	}
	var n sent
	st, key := ss.build(b, tgt, &n)
	p, err := core.NewPolicy(pol.rules...)
	if err != nil {
		b.Fatal(err)
	}
	l, err := core.NewLimiter(p, core.WithStore(st))
	if err != nil {
		b.Fatal(err)
	}
	im := &ours{l: l, tiers: len(pol.rules)}
	subs, served := scalingSubjects(pol.rules, key, masters)
	prime(b, im, subs, scalingGoroutines)
	warm(im, subs, scalingGoroutines)
	for _, m := range c.Masters {
		if _, err := m.Do("CONFIG", "RESETSTAT"); err != nil {
			b.Fatalf("CONFIG RESETSTAT: %v", err)
		}
	}
	sent0 := n.Load()
	switches0, switchesOK := mastersSwitches(c)
	before := sampleMasters(b, c)
	client0 := processCPU()
	b.ResetTimer()
	counts, errs := measureScaling(b, im, subs, served)
	b.StopTimer()
	after := sampleMasters(b, c)
	switches1, switchesOK1 := mastersSwitches(c)
	clientSpent := processCPU() - client0
	wall := b.Elapsed().Seconds()

	decisions := float64(b.N)
	b.ReportMetric((decisions-float64(errs))/wall, "decisions/s")
	b.ReportMetric(float64(errs)/decisions, "errors/op")
	var serverSpent, serverSys, busiest time.Duration
	for i := range masters {
		spent := after[i].cpu() - before[i].cpu()
		serverSpent += spent
		serverSys += after[i].sys - before[i].sys
		busiest = max(busiest, spent)
		perDecision := 0.0
		if counts[i] > 0 {
			perDecision = us(spent) / float64(counts[i])
		}
		b.ReportMetric(perDecision, "m"+strconv.Itoa(i)+"-cpu-us/decision")
		b.ReportMetric(float64(counts[i])/decisions, "m"+strconv.Itoa(i)+"-share")
	}
	if busiest > 0 {
		b.ReportMetric(decisions/busiest.Seconds(), "ceiling-decisions/s")
	}
	b.ReportMetric(us(serverSpent)/decisions, "server-cpu-us/decision")
	b.ReportMetric(serverSpent.Seconds()/wall, "server-cores")
	b.ReportMetric(float64(serverSys)/float64(max(serverSpent, 1)), "server-sys-fraction")
	b.ReportMetric(us(clientSpent)/decisions, "client-cpu-us/decision")
	b.ReportMetric(clientSpent.Seconds()/wall, "client-cores")
	b.ReportMetric(float64(n.Load()-sent0)/decisions, "cmds/decision")
	var ran int64
	for _, m := range c.Masters {
		for name, calls := range m.CommandCalls(b) {
			if name != "info" && !strings.HasPrefix(name, "config") {
				ran += calls
			}
		}
	}
	b.ReportMetric(float64(ran)/decisions, "redis-calls/decision")
	if switchesOK && switchesOK1 {
		b.ReportMetric(float64(switches1.voluntary-switches0.voluntary)/decisions, "server-wakeups/decision")
		b.ReportMetric(float64(switches1.involuntary-switches0.involuntary)/decisions, "server-preemptions/decision")
	}
}

// switches are context switches of a thread, from /proc/<pid>/status.
type switches struct{ voluntary, involuntary int64 }

// mastersSwitches sums the context switches of the main threads of c's
// masters. It returns false where /proc cannot tell (outside Linux).
func mastersSwitches(c *redistest.ClusterServer) (switches, bool) {
	var sum switches
	for _, m := range c.Masters {
		status, err := os.ReadFile("/proc/" + strconv.Itoa(m.Pid()) + "/status")
		if err != nil {
			return switches{}, false
		}
		found := 0
		for line := range strings.SplitSeq(string(status), "\n") {
			k, v, _ := strings.Cut(line, ":")
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			switch {
			case err != nil:
			case k == "voluntary_ctxt_switches":
				sum.voluntary += n
				found++
			case k == "nonvoluntary_ctxt_switches":
				sum.involuntary += n
				found++
			}
		}
		if found != 2 {
			return switches{}, false
		}
	}
	return sum, true
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// nodeSample is the CPU time a redis-server has used since it started, in
// user and system mode (INFO cpu: getrusage of the whole process). INFO
// commandstats's usec is not used: it is wall time, which on a machine with
// more processes than cores includes the time a server waited for a core.
type nodeSample struct {
	user, sys time.Duration
}

func (s nodeSample) cpu() time.Duration { return s.user + s.sys }

// sampleMasters samples every master of c, in order.
func sampleMasters(tb testing.TB, c *redistest.ClusterServer) []nodeSample {
	tb.Helper()
	samples := make([]nodeSample, len(c.Masters))
	for i, m := range c.Masters {
		v, err := m.Do("INFO", "cpu")
		text, ok := v.(string)
		if err != nil || !ok {
			tb.Fatalf("%s: INFO cpu = %v, %v", m.Addr, v, err)
		}
		samples[i], err = parseNodeSample(text)
		if err != nil {
			tb.Fatalf("%s: %v", m.Addr, err)
		}
	}
	return samples
}

// parseNodeSample reads the lines "used_cpu_user:1.234567" and
// "used_cpu_sys:0.5" of INFO cpu.
func parseNodeSample(info string) (nodeSample, error) {
	var s nodeSample
	found := 0
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k != "used_cpu_user" && k != "used_cpu_sys" {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return s, fmt.Errorf("INFO cpu: %q: %w", line, err)
		}
		d := time.Duration(f * float64(time.Second))
		if k == "used_cpu_user" {
			s.user = d
		} else {
			s.sys = d
		}
		found++
	}
	if found != 2 {
		return s, fmt.Errorf("INFO cpu: used_cpu_user or used_cpu_sys missing in %q", info)
	}
	return s, nil
}

// masterSet is a set of master indexes, bit i for Masters[i].
type masterSet uint8

// scalingSubjects returns the subjects of the scaling load, user i calling
// endpoint i mod scalingEndpoints, and for each the masters holding its
// keys under rules, as key names them, on a Cluster of masters masters laid
// out as redistest documents: master i owns slots
// [i*16384/masters, (i+1)*16384/masters).
func scalingSubjects(rules []core.Rule, key func(rule, id string) string, masters int) ([]subject, []masterSet) {
	subs := make([]subject, scalingUsers)
	served := make([]masterSet, scalingUsers)
	for i := range subs {
		subs[i] = subject{user: "u" + strconv.Itoa(i), endpoint: "GET /items/" + strconv.Itoa(i%scalingEndpoints)}
		req := core.Request{User: subs[i].user, Endpoint: subs[i].endpoint}
		for _, r := range rules {
			slot := redistest.KeySlot(key(r.Name, req.Identity(r.Scope)))
			served[i] |= 1 << masterOf(slot, masters)
		}
	}
	return subs, served
}

// masterOf returns the index of the master that owns slot in a Cluster of
// masters masters laid out by redistest.
func masterOf(slot, masters int) int {
	for i := range masters {
		if slot < (i+1)*redistest.SlotCount/masters {
			return i
		}
	}
	return masters - 1
}

// measureScaling runs b.N decisions on scalingGoroutines goroutines, which
// take subjects in turn from a shared counter, and returns how many
// decisions each master served and how many failed.
func measureScaling(b *testing.B, im impl, subs []subject, served []masterSet) (counts [maxScalingMasters]int64, errs int64) {
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((scalingGoroutines + procs - 1) / procs)
	var next atomic.Uint64
	var total [maxScalingMasters]atomic.Int64
	var failed atomic.Int64
	ctx := context.Background()
	n := uint64(len(subs))
	b.RunParallel(func(pb *testing.PB) {
		var mine [maxScalingMasters]int64
		var e int64
		for pb.Next() {
			i := next.Add(1) % n
			if _, err := im.allow(ctx, &subs[i]); err != nil {
				e++
			}
			for set, m := served[i], 0; set != 0; set, m = set>>1, m+1 {
				if set&1 != 0 {
					mine[m]++
				}
			}
		}
		for m, c := range mine {
			total[m].Add(c)
		}
		failed.Add(e)
	})
	for m := range counts {
		counts[m] = total[m].Load()
	}
	return counts, failed.Load()
}
