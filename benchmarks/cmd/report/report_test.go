package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixture is a small comparison as go test -bench writes it: one run of
// most benchmarks, two of the first three, with a scenario for every target.
const fixture = `goos: linux
goarch: amd64
pkg: github.com/bucketry/ratelimit/benchmarks
cpu: Test CPU @ 1GHz
BenchmarkMemory/HotKeyAllow/g=1/impl=ours-2          	 1000	  20.0 ns/op	  50000000 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/HotKeyAllow/g=1/impl=xrate_single-2  	 1000	  30.0 ns/op	  33333333 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/HotKeyAllow/g=1/impl=golimiter-2     	 1000	  40.0 ns/op	  25000000 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/HotKeyAllow/g=2/impl=ours-2          	 1000	  25.0 ns/op	  40000000 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/HotKeyAllow/g=2/impl=xrate_single-2  	 1000	  20.0 ns/op	  50000000 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/HotKeyAllow/g=2/impl=ceiling_gcra-2  	 1000	  10.0 ns/op	 100000000 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/Keys100k/g=2/impl=ours-2             	 1000	  100 ns/op	  10000000 decisions/s	 0 errors/op	 16 B/op	 1 allocs/op
BenchmarkMemory/Keys100k/g=2/impl=ulule-2            	 1000	  80 ns/op	  12500000 decisions/s	 0 errors/op	 32 B/op	 2 allocs/op
BenchmarkMemory/ThreeTier/g=1/impl=ours-2            	 1000	  50 ns/op	  20000000 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/ThreeTier/g=1/impl=golimiter-2       	 1000	  125 ns/op	   8000000 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/ThreeTier/g=2/impl=ours-2            	 1000	  50 ns/op	  20000000 decisions/s	 0 errors/op	 64 B/op	 2 allocs/op
BenchmarkMemory/ThreeTier/g=2/impl=golimiter-2       	 1000	  100 ns/op	  10000000 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/EightTier/g=1/impl=ours-2            	 1000	  400 ns/op	   2500000 decisions/s	 0 errors/op	 1216 B/op	 4 allocs/op
BenchmarkMemory/EightTier/g=1/impl=golimiter-2       	 1000	  800 ns/op	   1250000 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/Keys1M/g=2/impl=ours-2               	 1000	  300 ns/op	  91.4 B/key	   3333333 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/Keys1M/g=2/impl=golimiter-2          	 1000	  500 ns/op	  121 B/key	   2000000 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/Keys1M/g=2/impl=ulule-2              	 1000	  600 ns/op	  208 B/key	   1666667 decisions/s	 0 errors/op	 32 B/op	 2 allocs/op
BenchmarkRedis/HotKeyAllow/g=64/impl=ours_goredis-2  	 1000	  5682 ns/op	 176000 decisions/s	 2500 redis-cpu-ns/decision	 900 B/op	 8 allocs/op
BenchmarkRedis/HotKeyAllow/g=64/impl=ours_rueidis-2  	 1000	  3663 ns/op	 273000 decisions/s	 1800 redis-cpu-ns/decision	 300 B/op	 3 allocs/op
BenchmarkRedis/HotKeyAllow/g=64/impl=ulule_redis-2   	 1000	 11364 ns/op	  88000 decisions/s	 7300 redis-cpu-ns/decision	 2000 B/op	 40 allocs/op
BenchmarkRedis/HotKeyAllow/g=64/impl=ceiling_ping-2  	 1000	  2000 ns/op	 500000 decisions/s	 1000 redis-cpu-ns/decision	 8 B/op	 1 allocs/op
BenchmarkRedis/Keys10k/g=64/impl=ours_rueidis-2      	 1000	  6849 ns/op	 146000 decisions/s	 300 B/op	 3 allocs/op
BenchmarkRedis/Keys10k/g=64/impl=ulule_redis-2       	 1000	 11905 ns/op	  84000 decisions/s	 2000 B/op	 40 allocs/op
BenchmarkRedis/ThreeTier/g=64/impl=ours_rueidis-2    	 1000	  4785 ns/op	 209000 decisions/s	 3100 redis-cpu-ns/decision	 300 B/op	 3 allocs/op
BenchmarkRedis/ThreeTier/g=64/impl=ulule_redis-2     	 1000	 36364 ns/op	  27500 decisions/s	 17100 redis-cpu-ns/decision	 2000 B/op	 40 allocs/op
BenchmarkRedis/ThreeTierCluster/g=64/impl=ours_rueidis-2	 1000	  6667 ns/op	 150000 decisions/s	 300 B/op	 3 allocs/op
BenchmarkRedis/ThreeTierCluster/g=64/impl=ours_goredis-2	 1000	  6667 ns/op	 150000 decisions/s	 700 B/op	 7 allocs/op
BenchmarkRedis/ThreeTierCluster/g=64/impl=ulule_redis-2 	 1000	 50000 ns/op	  20000 decisions/s	 2000 B/op	 40 allocs/op
BenchmarkRedis/ThreeTier/g=1/impl=ours_goredis-2     	 1000	  50000 ns/op	  1.000 cmds/decision	 20000 decisions/s	 0 errors/op	 0 local-share	 8.000 redis-cmds/decision	 900 B/op	 9 allocs/op
BenchmarkRedis/ThreeTier/g=1/impl=redis_rate-2       	 1000	 150000 ns/op	  3.000 cmds/decision	  6667 decisions/s	 0 errors/op	 0 local-share	 12.00 redis-cmds/decision	 2000 B/op	 60 allocs/op
BenchmarkRedis/ThreeTier/g=1/impl=ceiling_ping-2     	 1000	  10000 ns/op	  1.000 cmds/decision	100000 decisions/s	 0 errors/op	 0 local-share	 1.000 redis-cmds/decision	 8 B/op	 1 allocs/op
BenchmarkRedis/DenyFlood/g=64/impl=ours_goredis-2    	 1000	  300 ns/op	  0 cmds/decision	3000000 decisions/s	 0 errors/op	 0.9 local-share	 0 redis-cmds/decision	 40 B/op	 2 allocs/op
BenchmarkMemory/HotKeyAllow/g=1/impl=ours-2          	 1000	  22.0 ns/op	  45454545 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/HotKeyAllow/g=1/impl=xrate_single-2  	 1000	  30.0 ns/op	  33333333 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/HotKeyAllow/g=1/impl=golimiter-2     	 1000	  42.0 ns/op	  23809523 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkOther-2                                     	 1000	  1.0 ns/op
PASS
`

func read(t *testing.T, text string) *results {
	t.Helper()
	res, warnings, err := readResults(map[string]io.Reader{"fixture": strings.NewReader(text)}, []string{"fixture"})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Fatalf("warnings: %v", warnings)
	}
	return res
}

func TestSplitName(t *testing.T) {
	for _, tc := range []struct {
		in                           string
		group, scenario, impl, procs string
		ok                           bool
	}{
		{"BenchmarkRedis/HotKeyAllow/g=64/impl=ours_goredis-2", "Redis", "Redis/HotKeyAllow/g=64", "ours_goredis", "2", true},
		{"Memory/Keys100k/impl=xrate_syncmap-16", "Memory", "Memory/Keys100k", "xrate_syncmap", "16", true},
		{"Memory/Keys100k/impl=ours", "Memory", "Memory/Keys100k", "ours", "", true},
		{"BenchmarkOther-2", "", "", "", "2", false},
	} {
		g, sc, impl, procs, ok := splitName(tc.in)
		if g != tc.group || sc != tc.scenario || impl != tc.impl || procs != tc.procs || ok != tc.ok {
			t.Errorf("splitName(%q) = %q, %q, %q, %q, %v; want %q, %q, %q, %q, %v",
				tc.in, g, sc, impl, procs, ok, tc.group, tc.scenario, tc.impl, tc.procs, tc.ok)
		}
	}
}

func TestReadResults(t *testing.T) {
	res := read(t, fixture)
	if got := len(res.groups); got != 2 {
		t.Fatalf("%d groups, want 2 (Memory, Redis)", got)
	}
	if res.procs != "2" || res.config["cpu"] != "Test CPU @ 1GHz" {
		t.Errorf("procs %q, cpu %q", res.procs, res.config["cpu"])
	}
	s := res.scenario("Memory/HotKeyAllow/g=1")
	if s == nil {
		t.Fatal("Memory/HotKeyAllow/g=1 missing")
	}
	ours := s.entry("ours")
	st := ours.metrics[unitNs]
	if st.n != 2 || st.center != 21 {
		t.Errorf("ours ns/op = %+v, want the median of 20 and 22 over 2 runs", st)
	}
	if p := s.best(kindPeer); p == nil || p.impl != "xrate_single" {
		t.Errorf("best peer = %v, want xrate_single", p)
	}
	if p := res.scenario("Memory/Keys1M/g=2").least(kindPeer, unitPerKey); p == nil || p.impl != "golimiter" {
		t.Errorf("least B/key of the peers = %v, want golimiter", p)
	}
	if p := res.scenario("Memory/HotKeyAllow/g=2").best(kindPeer); p == nil || p.impl != "xrate_single" {
		t.Errorf("best peer at g=2 = %v, want xrate_single (ceiling_gcra, faster, is no peer)", p)
	}
	if c := res.scenario("Redis/ThreeTier/g=1").best(kindPeer); c == nil || c.impl != "redis_rate" {
		t.Errorf("best Redis peer = %v, want redis_rate (ceilings are not peers)", c)
	}
}

func TestTargets(t *testing.T) {
	res := read(t, fixture)
	got := map[string]verdict{}
	for _, v := range checkTargets(res) {
		got[v.target+" "+v.scenario+" "+v.impl] = v
	}
	for _, tc := range []struct {
		key         string
		known, met  bool
		missContain string // in the miss, or when met in what was measured
	}{
		// 47.7M / 24.4M = 1.96x go-limiter, the peer the target names,
		// though xrate_single is faster.
		{"memory-hot-1 Memory/HotKeyAllow/g=1 ours", true, true, "1.96x `golimiter`"},
		// 40M against xrate_single's 50M.
		{"memory-hot-2 Memory/HotKeyAllow/g=2 ours", true, false, "0.80x of the 2.0x asked: 150% more decisions/s needed"},
		{"memory-keys-100k Memory/Keys100k/g=2 ours", true, false, "0.80x of the 1.0x asked: 25% more"},
		{"memory-tiers Memory/ThreeTier/g=1 ours", true, true, "2.50x `golimiter` (20.0M vs 8.00M decisions/s), 0 allocs/op"},
		// Both short and allocating.
		{"memory-tiers Memory/ThreeTier/g=2 ours", true, false, "2.00x of the 2.2x asked: 10% more decisions/s needed; 2 allocs/op, not 0"},
		{"memory-tiers Memory/EightTier/g=1 ours", true, false, "4 allocs/op, not 0"},
		{"memory-per-key Memory/Keys1M/g=2 ours", true, true, "least peer: `golimiter` 121"},
		// The peer is ulule, not the fastest peer.
		{"redis-64 Redis/HotKeyAllow/g=64 ours_rueidis", true, true, "3.10x `ulule_redis`"},
		{"redis-64 Redis/HotKeyAllow/g=64 ours_goredis", true, false, "2.00x of the 2.8x asked: 40% more decisions/s needed"},
		{"redis-64 Redis/Keys10k/g=64 ours_rueidis", true, true, ""},
		{"redis-64 Redis/ThreeTier/g=64 ours_rueidis", true, true, "7.60x"},
		{"redis-64 Redis/ThreeTierCluster/g=64 ours_rueidis", true, true, "7.50x"},
		{"redis-cpu Redis/HotKeyAllow/g=64 ours_rueidis", true, true, ""},
		{"redis-cpu Redis/HotKeyAllow/g=64 ours_goredis", true, false, "1.25x the bound: 500 ns of redis-server CPU/decision to cut"},
		// Keys10k reported no CPU time.
		{"redis-cpu Redis/Keys10k/g=64 ours_rueidis", false, false, ""},
		{"redis-cpu Redis/ThreeTier/g=64 ours_rueidis", true, false, "1.03x the bound"},
		{"redis-allocs Redis/HotKeyAllow/g=64 ours_rueidis", true, true, ""},
		{"redis-allocs Redis/HotKeyAllow/g=64 ours_goredis", true, false, "1.33x the bound: 2 allocs/op to cut"},
		// The Cluster's multi-slot path is held to the same bounds.
		{"redis-allocs Redis/ThreeTierCluster/g=64 ours_rueidis", true, true, ""},
		{"redis-allocs Redis/ThreeTierCluster/g=64 ours_goredis", true, false, "1.17x the bound: 1 allocs/op to cut"},
		// No middleware was run.
		{"middleware Middleware/Gin/serial ", false, false, ""},
		{"three-tier-one-trip Redis/ThreeTier/g=1 ours_goredis", true, true, ""},
		{"deny-flood-local Redis/DenyFlood/g=64 ours_goredis", true, false, "5.0 points short"},
	} {
		v, ok := got[tc.key]
		if !ok {
			t.Errorf("no verdict %q; have %v", tc.key, keys(got))
			continue
		}
		text := v.miss
		if v.met {
			text = v.measured
		}
		if v.known != tc.known || v.met != tc.met || !strings.Contains(text, tc.missContain) {
			t.Errorf("%s: known %v, met %v, miss %q, measured %q; want %v, %v, containing %q",
				tc.key, v.known, v.met, v.miss, v.measured, tc.known, tc.met, tc.missContain)
		}
	}
	// Every target gives at least one verdict, and only the allocation and
	// memory misses ask for a memory profile.
	for _, tg := range targets {
		n := 0
		for _, v := range got {
			if v.target == tg.name {
				n++
			}
		}
		if n == 0 {
			t.Errorf("target %s gave no verdict", tg.name)
		}
	}
	for key, want := range map[string]string{
		"memory-tiers Memory/EightTier/g=1 ours":             "allocs",
		"memory-tiers Memory/ThreeTier/g=2 ours":             "", // the speed missed too: CPU
		"redis-allocs Redis/HotKeyAllow/g=64 ours_goredis":   "allocs",
		"redis-cpu Redis/HotKeyAllow/g=64 ours_goredis":      "",
		"memory-hot-2 Memory/HotKeyAllow/g=2 ours":           "",
		"memory-keys-100k Memory/Keys100k/g=2 ours":          "",
		"redis-64 Redis/HotKeyAllow/g=64 ours_goredis":       "",
		"deny-flood-local Redis/DenyFlood/g=64 ours_goredis": "",
	} {
		if v := got[key]; v.profile != want {
			t.Errorf("%s: profile %q, want %q", key, v.profile, want)
		}
	}
}

func TestPerKeyProfile(t *testing.T) {
	res := read(t, strings.ReplaceAll(fixture, "91.4 B/key", "150 B/key"))
	for _, v := range checkTargets(res) {
		if v.target != "memory-per-key" {
			continue
		}
		if !v.known || v.met || v.profile != "heap" || !strings.Contains(v.miss, "1.50x the bound: 50.0 B/key to cut") {
			t.Errorf("150 B/key: %+v, want a miss by 50 B/key with a heap profile", v)
		}
		return
	}
	t.Error("no memory-per-key verdict")
}

func keys(m map[string]verdict) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	return k
}

func TestSummaryTable(t *testing.T) {
	res := read(t, fixture)
	var b bytes.Buffer
	writeSummary(&b, res.group("Memory"))
	want := "| HotKeyAllow/g=1 | `ours` | 47.7M | 0 | – | `xrate_single` | 33.3M | 0 | – | **1.43x** |"
	if !strings.Contains(b.String(), want) {
		t.Errorf("summary:\n%s\nwant a row\n%s", b.String(), want)
	}
	if want := "| Keys1M/g=2 | `ours` | 3.33M | 0 | 91.4 | `golimiter` | 2.00M | 0 | 121 | **1.67x** |"; !strings.Contains(b.String(), want) {
		t.Errorf("summary:\n%s\nwant a row\n%s", b.String(), want)
	}
}

func TestChartIsWellFormed(t *testing.T) {
	res := read(t, fixture)
	var b bytes.Buffer
	if err := writeChart(&b, res, 2); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&b)
	rects := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	// Background, two legend swatches, and two bars for each of 13
	// scenarios (DenyFlood has no peer: one bar).
	if want := 1 + 2 + 2*13 - 1; rects != want {
		t.Errorf("%d rects, want %d", rects, want)
	}
}

func TestReadAdmission(t *testing.T) {
	in := `=== NAME  TestAdmissionMemory
    admission_test.go:79:
        admission: store=memory impl=ours limit=100 attempts=640 admitted=100 errors=0 elapsed=258µs refill=false
        admission: store=redis impl=throttled_goredis limit=100 attempts=640 admitted=100 errors=103 elapsed=92.5ms refill=false
--- PASS: TestAdmissionMemory (0.00s)
`
	rows, err := readAdmission(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[1].impl != "throttled_goredis" || rows[1].errors != 103 || rows[0].admitted != 100 {
		t.Errorf("rows = %+v", rows)
	}
	if _, err := readAdmission(strings.NewReader("admission: store=memory impl=x limit=abc")); err == nil {
		t.Error("a malformed limit was accepted")
	}
}

func TestWriteReport(t *testing.T) {
	dir := t.TempDir()
	bench := filepath.Join(dir, "bench.txt")
	gomod := filepath.Join(dir, "go.mod")
	out := filepath.Join(dir, "BENCHMARKS.md")
	must(t, os.WriteFile(bench, []byte(fixture), 0o644))
	must(t, os.WriteFile(gomod, []byte("module x\n\nrequire (\n\tgolang.org/x/time v0.16.0\n\tgithub.com/bucketry/ratelimit/core v0.0.0\n\tgithub.com/pkg/errors v0.9.1 // indirect\n)\n"), 0o644))
	// A hand-written analysis survives a new report.
	must(t, os.WriteFile(out, []byte("old\n"+analysisBegin+"\nWhy: a lock.\n"+analysisEnd+"\n"), 0o644))
	o := options{bench: stringsFlag{bench}, out: out, svg: filepath.Join(dir, "sub", "chart.svg"), gomod: gomod,
		commands: stringsFlag{"make bench-report"}}
	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	var stdout bytes.Buffer
	must(t, run(o, nil, &stdout))
	b, err := os.ReadFile(out)
	must(t, err)
	report := string(b)
	for _, want := range []string{
		"![decisions per second, ours and the fastest peer](sub/chart.svg)",
		"Why: a lock.",
		"| `golang.org/x/time` | v0.16.0 |",
		"make bench-report",
		"**missed: 0.80x of the 2.0x asked",
		"| memory-hot-1 | HotKeyAllow/g=1 | `ours` | >= 1.5x `golimiter`, 0 allocs/op |",
		// The memory ceilings' table, beside our fastest.
		"| scenario | ours | decisions/s | `ceiling_gcra` |",
		"| HotKeyAllow/g=2 | `ours` | 40.0M | 100M |",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, unwanted := range []string{"bucketry/ratelimit/core", "pkg/errors"} {
		if strings.Contains(report, unwanted) {
			t.Errorf("report lists %q", unwanted)
		}
	}
	if !strings.Contains(stdout.String(), "| HotKeyAllow/g=1 | `ours` |") {
		t.Errorf("stdout lacks the summary table:\n%s", stdout.String())
	}
}

func TestStatSpread(t *testing.T) {
	if s := (stat{center: 10, lo: 9, hi: 12, n: 6}).spread(); math.Abs(s-0.2) > 1e-9 {
		t.Errorf("spread = %v, want 0.2", s)
	}
	if s := (stat{center: 10, lo: math.Inf(-1), hi: math.Inf(1), n: 2}).spread(); !math.IsNaN(s) {
		t.Errorf("spread with an unknown interval = %v, want NaN", s)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestDecade(t *testing.T) {
	for d, want := range map[float64]string{0: "1", 2: "100", 3: "1k", 4: "10k", 6: "1M", 8: "100M", 9: "1G"} {
		if got := decade(d); got != want {
			t.Errorf("decade(%v) = %q, want %q", d, got, want)
		}
	}
}
