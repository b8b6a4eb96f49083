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

// fixture is two runs of a small comparison, as go test -bench writes them.
const fixture = `goos: linux
goarch: amd64
pkg: github.com/bucketry/ratelimit/benchmarks
cpu: Test CPU @ 1GHz
BenchmarkMemory/HotKeyAllow/impl=ours-2          	 1000	  20.0 ns/op	  50000000 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/HotKeyAllow/impl=xrate_syncmap-2 	 1000	  50.0 ns/op	  20000000 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/HotKeyAllow/impl=golimiter-2     	 1000	  40.0 ns/op	  25000000 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/Keys100k/impl=ours-2             	 1000	  100 ns/op	  10000000 decisions/s	 0 errors/op	 16 B/op	 1 allocs/op
BenchmarkMemory/Keys100k/impl=ulule-2            	 1000	  80 ns/op	  12500000 decisions/s	 0 errors/op	 32 B/op	 2 allocs/op
BenchmarkRedis/ThreeTier/g=1/impl=ours_goredis-2 	 1000	  50000 ns/op	  1.000 cmds/decision	 20000 decisions/s	 0 errors/op	 0 local-share	 8.000 redis-cmds/decision	 900 B/op	 9 allocs/op
BenchmarkRedis/ThreeTier/g=1/impl=redis_rate-2   	 1000	 150000 ns/op	  3.000 cmds/decision	  6667 decisions/s	 0 errors/op	 0 local-share	 12.00 redis-cmds/decision	 2000 B/op	 60 allocs/op
BenchmarkRedis/ThreeTier/g=1/impl=ceiling_ping-2 	 1000	  10000 ns/op	  1.000 cmds/decision	100000 decisions/s	 0 errors/op	 0 local-share	 1.000 redis-cmds/decision	 8 B/op	 1 allocs/op
BenchmarkRedis/DenyFlood/g=64/impl=ours_goredis-2	 1000	  300 ns/op	  0 cmds/decision	3000000 decisions/s	 0 errors/op	 0.9 local-share	 0 redis-cmds/decision	 40 B/op	 2 allocs/op
BenchmarkMemory/HotKeyAllow/impl=ours-2          	 1000	  22.0 ns/op	  45454545 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/HotKeyAllow/impl=xrate_syncmap-2 	 1000	  52.0 ns/op	  19230769 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkMemory/HotKeyAllow/impl=golimiter-2     	 1000	  42.0 ns/op	  23809523 decisions/s	 0 errors/op	 0 B/op	 0 allocs/op
BenchmarkOther-2                                 	 1000	  1.0 ns/op
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
	s := res.scenario("Memory/HotKeyAllow")
	if s == nil {
		t.Fatal("Memory/HotKeyAllow missing")
	}
	ours := s.entry("ours")
	st := ours.metrics[unitNs]
	if st.n != 2 || st.center != 21 {
		t.Errorf("ours ns/op = %+v, want the median of 20 and 22 over 2 runs", st)
	}
	if p := s.best(kindPeer); p == nil || p.impl != "golimiter" {
		t.Errorf("best peer = %v, want golimiter", p)
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
		missContain string
	}{
		// 47.7M / 24.4M = 1.96x: 2% short of 2x.
		{"memory-speed Memory/HotKeyAllow ours", true, false, "1.96x of the 2.0x asked"},
		// Slower than ulule and allocating.
		{"memory-speed Memory/Keys100k ours", true, false, "1.00 allocs/op, not 0"},
		{"redis-64 Redis/HotKeyAllow/g=64 ", false, false, ""},
		{"three-tier-one-trip Redis/ThreeTier/g=1 ours_goredis", true, true, ""},
		{"deny-flood-local Redis/DenyFlood/g=64 ours_goredis", true, false, "5.0 points short"},
	} {
		v, ok := got[tc.key]
		if !ok {
			t.Errorf("no verdict %q; have %v", tc.key, keys(got))
			continue
		}
		if v.known != tc.known || v.met != tc.met || !strings.Contains(v.miss, tc.missContain) {
			t.Errorf("%s: known %v, met %v, miss %q; want %v, %v, containing %q", tc.key, v.known, v.met, v.miss, tc.known, tc.met, tc.missContain)
		}
	}
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
	want := "| HotKeyAllow | `ours` | 47.7M | 0 | `golimiter` | 24.4M | 0 | **1.96x** |"
	if !strings.Contains(b.String(), want) {
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
	// Background, two legend swatches, and two bars for each of 4 scenarios
	// (DenyFlood has no peer: one bar).
	if want := 1 + 2 + 2*4 - 1; rects != want {
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
		"**missed: 1.96x of the 2.0x asked",
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
	if !strings.Contains(stdout.String(), "| HotKeyAllow | `ours` |") {
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
