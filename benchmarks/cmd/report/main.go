// Command report turns the output of the comparison benchmarks (go test
// -bench, several runs of each with -count) into tables: per scenario, the
// median decisions/s of our fastest implementation, of the fastest peer,
// and their ratio, with the targets of the benchmark issue checked against
// them. Medians and their 95% confidence intervals are computed as
// benchstat computes them (golang.org/x/perf/benchmath).
//
// Usage:
//
//	go run ./cmd/report [flags] [bench.txt ...]
//
// With no file and no -bench it reads standard input. It prints the tables
// as markdown. With -o it also writes a full report (machine, versions,
// commands, every implementation's numbers, the admission test's results,
// the targets, profiles of missed targets with -profile, and an SVG chart
// written to -svg and linked from the report).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// stringsFlag is a flag that may be given several times.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ", ") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

type options struct {
	bench       stringsFlag
	admission   string
	benchstat   string
	out         string
	svg         string
	gomod       string
	commands    stringsFlag
	profile     bool
	profileDir  string
	profileTime string
}

func main() {
	var o options
	flag.Var(&o.bench, "bench", "a file of go test -bench output (repeatable; also positional; standard input if none)")
	flag.StringVar(&o.admission, "admission", "", "go test -v output of TestAdmission*, for the correctness table")
	flag.StringVar(&o.benchstat, "benchstat", "", "benchstat output to append to the report")
	flag.StringVar(&o.out, "o", "", "write the full report (BENCHMARKS.md) to this file")
	flag.StringVar(&o.svg, "svg", "chart.svg", "with -o, write the chart to this file")
	flag.StringVar(&o.gomod, "gomod", "go.mod", "the benchmarks module's go.mod, for the libraries' versions")
	flag.Var(&o.commands, "command", "a command that produced the results, shown in the report (repeatable)")
	flag.BoolVar(&o.profile, "profile", false, "with -o, profile our implementation on every missed target and include pprof's top functions")
	flag.StringVar(&o.profileDir, "profile-dir", "results/profiles", "with -profile, where profiles go")
	flag.StringVar(&o.profileTime, "profile-benchtime", "2s", "with -profile, the -benchtime of each profiled run")
	flag.Parse()
	o.bench = append(o.bench, flag.Args()...)
	if err := run(o, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(o options, stdin io.Reader, stdout io.Writer) error {
	files := map[string]io.Reader{}
	var order []string
	if len(o.bench) == 0 {
		files["stdin"] = stdin
		order = []string{"stdin"}
	}
	for _, name := range o.bench {
		b, err := os.ReadFile(name)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		files[name] = bytes.NewReader(b)
		order = append(order, name)
	}
	res, warnings, err := readResults(files, order)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintln(os.Stderr, "report: warning:", w)
	}
	if len(res.groups) == 0 {
		return fmt.Errorf("report: no benchmark named Benchmark<Group>/.../impl=<name> in %s", strings.Join(order, ", "))
	}
	verdicts := checkTargets(res)
	for _, g := range res.groups {
		fmt.Fprintf(stdout, "\n### %s\n\n", g.name)
		writeSummary(stdout, g)
	}
	fmt.Fprintf(stdout, "\n### Targets\n\n")
	writeVerdicts(stdout, verdicts)
	if o.out == "" {
		return nil
	}
	return writeReport(o, res, verdicts)
}

// Markers around the hand-written analysis, which a new report keeps.
const (
	analysisBegin = "<!-- analysis:begin -->"
	analysisEnd   = "<!-- analysis:end -->"
)

// keptAnalysis returns the hand-written analysis of an existing report.
func keptAnalysis(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	_, rest, ok := strings.Cut(string(b), analysisBegin)
	if !ok {
		return ""
	}
	text, _, ok := strings.Cut(rest, analysisEnd)
	if !ok {
		return ""
	}
	return strings.Trim(text, "\n")
}

// runs is the most runs any benchmark had.
func runs(r *results) int {
	n := 0
	for _, g := range r.groups {
		for _, s := range g.scenarios {
			for _, e := range s.entries {
				for _, st := range e.metrics {
					n = max(n, st.n)
				}
			}
		}
	}
	return n
}

func writeReport(o options, res *results, verdicts []verdict) error {
	var admission []admissionRow
	if o.admission != "" {
		f, err := os.Open(o.admission)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		admission, err = readAdmission(f)
		f.Close()
		if err != nil {
			return err
		}
	}
	var benchstat []byte
	if o.benchstat != "" {
		var err error
		if benchstat, err = os.ReadFile(o.benchstat); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	mods, err := readRequirements(o.gomod)
	if err != nil {
		return fmt.Errorf("report: versions: %w", err)
	}
	var svg bytes.Buffer
	if err := writeChart(&svg, res, runs(res)); err != nil {
		return err
	}
	if err := os.WriteFile(o.svg, svg.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	chartLink, err := relPath(filepath.Dir(o.out), o.svg)
	if err != nil {
		return err
	}
	m := readMachine()
	analysis := keptAnalysis(o.out)

	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Benchmarks\n\n")
	p("This project's limiter against peer Go libraries, in memory and on Redis: speed, allocations, Redis commands per decision, the share of decisions answered without a round trip, and whether each admits what its own limit allows under concurrency. ")
	p("Written by `make bench-report` (`benchmarks/cmd/report`) on %s; rerun it rather than editing the numbers. ", m.written.Format("2006-01-02 15:04 UTC"))
	p("Every number is the median of %d runs, with benchstat's 95%% confidence interval as ±x%% where there were enough runs.\n\n", runs(res))
	p("![decisions per second, ours and the fastest peer](%s)\n\n", chartLink)

	p("## Targets\n\n")
	for _, t := range targets {
		p("- **%s**: %s\n", t.name, t.text)
	}
	p("\n")
	writeVerdicts(&b, verdicts)
	p("\n")

	p("## Analysis\n\n")
	p("%s\n", analysisBegin)
	if analysis != "" {
		p("%s\n", analysis)
	} else {
		p("_Not written yet: for every missed target, why, from the profiles below._\n")
	}
	p("%s\n\n", analysisEnd)

	for _, g := range res.groups {
		p("## %s\n\n", g.name)
		p("Our fastest implementation and the fastest peer, per scenario:\n\n")
		writeSummary(&b, g)
		p("\n")
		if g.name == "Middleware" {
			p("Added cost: each implementation's ns/op less that of `bare`, the same route with no limiter, in the same run. The ceilings `ceiling_gin`, `ceiling_fiber` and `ceiling_nethttp` are the least our limiter costs as middleware: the decision of the same limiter as ours, keyed by the peer's address, and the same five header fields stored the same way, with none of the middleware's other work (key functions, skip, plan and cost functions, routes, the record that keeps a middleware installed twice from charging a request twice, error handling).\n\n")
			writeAddedCost(&b, g)
			writeRoundRatios(&b, g)
			p("\n")
		}
		if g.name == "Memory" {
			p("Ceilings, where a scenario has one subject: `ceiling_clock` reads the monotonic clock once per decision, as our store does, and decides nothing; `ceiling_gcra` decides exactly, with nothing else: one clock read, and per tier a table slot found by hashing the key and one integer (the bucket's theoretical arrival time) changed by compare-and-swap, several tiers locked in order and written only if all allow, the remaining tokens computed. It holds that subject's buckets only: no bucket is created, reclaimed or found among many, and it reports no rule, reset or tier. `ceiling_store` makes the same decisions among 100,000 other buckets, in a table 38%% full (the memory store keeps its tables 3/8 to 3/4 full), and reports each one to the caller: the tier that decided, its rule, scope and limit, the tokens left, the reset and retry times, what a response's header fields are made from. It is still no store: it creates, grows and reclaims nothing, checks no identity and has no layer above the table.\n\n")
			writeCeilings(&b, g)
			p("\n")
		}
		if g.name == "Redis" {
			p("Ceilings, which decide nothing: `ceiling_evalsha` sends our script alone, one EVALSHA per decision with arguments encoded once; `ceiling_ping` is one PING per decision. Both go through rueidis.\n\n")
			writeCeilings(&b, g)
			p("\n")
		}
		p("<details><summary>Every implementation, every metric</summary>\n\n")
		writeDetail(&b, g)
		p("\n</details>\n\n")
	}

	p("## Admitted under concurrency\n\n")
	p("Each implementation gets a limit of 100 an hour (no refill while the test runs) and one key; 64 goroutines make 10 attempts each, all at once. An exact limiter admits 100. A request that returned an error counts as an error, not as admitted, whatever the library answered beside it. From `TestAdmissionMemory` and `TestAdmissionRedis`; ours must admit exactly 100 with no error for the test to pass.\n\n")
	if len(admission) > 0 {
		writeAdmission(&b, admission)
	} else {
		p("_Not run for this report._\n")
	}
	p("\n")

	p("## Setup\n\n")
	p("| | |\n| --- | --- |\n")
	p("| CPU | %s |\n", orUnknown(m.cpu))
	p("| logical CPUs (nproc) | %d |\n", m.cpus)
	if res.procs != "" {
		p("| GOMAXPROCS | %s |\n", res.procs)
	}
	p("| memory | %s |\n", orUnknown(m.memory))
	p("| OS | %s |\n", m.kernel)
	p("| Go | %s |\n", m.goVer)
	p("| Redis | %s |\n", m.redis)
	p("| commit | %s |\n", m.commit)
	p("\nLibraries (the benchmarks module's direct requirements):\n\n")
	p("| module | version |\n| --- | --- |\n")
	for _, mod := range mods {
		p("| `%s` | %s |\n", mod.path, mod.version)
	}
	p("\nCommands, run from the repository root:\n\n```sh\n")
	if len(o.commands) == 0 {
		p("# not given to the report (-command)\n")
	}
	for _, c := range o.commands {
		p("%s\n", c)
	}
	p("```\n\n")

	p("## Method\n\n")
	p("%s\n", method)

	if o.profile {
		p("## Profiles of missed targets\n\n")
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		done := map[string]bool{}
		missed := 0
		for _, v := range verdicts {
			key := v.scenario + " " + v.impl + " " + v.profile
			if !v.known || v.met || v.impl == "" || done[key] {
				continue
			}
			done[key] = true
			missed++
			kindText := map[string]string{"": "CPU", "heap": "bytes allocated", "allocs": "objects allocated"}[v.profile]
			fmt.Fprintf(os.Stderr, "report: profiling %s, impl=%s (%s)\n", v.scenario, v.impl, kindText)
			cmdline, top, err := profile(v, o.profileDir, o.profileTime)
			p("### %s, `%s` (%s; %s)\n\n", v.scenario, v.impl, v.target, kindText)
			p("Missed: %s.\n\n```sh\ncd benchmarks && %s\n```\n\n", v.miss, cmdline)
			if err != nil {
				p("The profile failed: `%v`\n\n", err)
				continue
			}
			p("```\n%s```\n\n", top)
		}
		if missed == 0 {
			p("No target was missed.\n\n")
		}
	}

	if len(benchstat) > 0 {
		p("## benchstat\n\n<details><summary>benchstat -col /impl</summary>\n\n```\n%s```\n\n</details>\n", benchstat)
	}
	return os.WriteFile(o.out, b.Bytes(), 0o644)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// relPath returns target relative to dir, with forward slashes, for a
// markdown link.
func relPath(dir, target string) (string, error) {
	a, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	t, err := filepath.Abs(target)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(a, t)
	if err != nil {
		return "", err
	}
	return filepath.ToSlash(rel), nil
}

// method explains what the numbers mean; it is the same for every report.
var method = strings.Join([]string{
	"- **Names.** Each benchmark is `Benchmark<Group>/<Scenario>[/g=<goroutines>]/impl=<name>`. `ours*` is this project (`ours_goredis` and `ours_rueidis` are our two Redis stores, with local denials on, as their documentation recommends); `ceiling_*` are reference points, not peers (in Redis and `ceiling_clock` they decide nothing; `ceiling_gcra` is the least an exact in-memory decision costs, `ceiling_store` the least one found among many buckets and reported to the caller costs; `ceiling_gin`, `ceiling_fiber` and `ceiling_nethttp` the least our limiter costs as middleware); every other name is a peer library. `xrate_single` is one x/time/rate Limiter per tier with no key at all: the floor of what a token bucket costs, run only where there is one key, and counted as a peer.",
	"- **Same work for everyone.** Every implementation sits behind one interface: one call decides one request against one or three tiers. Each gets the same quota, the same keys (built before the timed loop) and the configuration its documentation recommends; where a default would break a scenario (throttled's 65536-key LRU below the 100k keys, go-redis's pool of 10 per CPU below 64 goroutines), it is raised for everyone and said in the code. Peers check three tiers with three calls in order, stopping at the first denial; none can do it atomically, so a denial by a later tier has already consumed from the earlier ones.",
	"- **Quotas.** Allow scenarios never deny within a run, and no bucket is full again when its key comes back (a full bucket is reclaimed by our memory store and expires in Redis for ours and redis_rate, while others keep it): one hot key gets 2^29 at once refilled over 50 days, the many-key scenarios 2^18 at once refilled over 50 days (a token every 16s). Deny scenarios allow one request an hour, taken before the run.",
	"- **Goroutines.** `g=1` is a plain loop; `g=n` for n > 1 is RunParallel with SetParallelism, n goroutines when GOMAXPROCS divides n. **Memory** scenarios run at g=1 and g=2 (100k and 1M keys at g=2, eight tiers at g=1). **Redis** scenarios run at 1, 16 and 64 goroutines against one redis-server on loopback started by `internal/redistest`, emptied before each run; `ThreeTierCluster` runs at 1 and 64 against a local Cluster of 3 masters, where each implementation's three keys are checked to lie in three hash slots (the ceilings do not run there).",
	"- **B/key** (Keys1M) is the heap in use (`runtime.MemStats.HeapInuse` after two collections) once the implementation holds its million buckets, less the heap in use before it was built, per key: what a key costs it, its own copy of the key string and any fragmentation included. Bounds that would evict below a million keys are raised (our store's by a quarter, throttled's LRU to 2^20).",
	"- **Eight tiers** (EightTier) add per-ip and four custom dimensions to the per-user, per-endpoint and global tiers; the peers make eight calls. It is there for the allocation target.",
	"- **decisions/s** counts decisions without error per second of wall time. **errors/op** is the share of calls that returned an error. **wrong/op**, when present, counts answers against the scenario (a denial where everything should pass): it means a harness or configuration problem, not speed.",
	"- **cmds/decision** counts the commands an implementation's clients sent (a go-redis hook, a rueidis wrapper): a script call is one, a pipeline of n is n, a read served from rueidis's client-side cache is none. **redis-cmds/decision** is every command Redis ran, including those inside scripts, from `INFO commandstats`. **local** (local-share) is the share of decisions answered without a round trip, from the store's own counters.",
	"- **redis-cpu-ns/decision** and **client-cpu-ns/decision** are the CPU time (user + system) of redis-server (`INFO cpu`) and of the benchmark process (getrusage) per decision: on a small machine they show which side is the bottleneck.",
	"- **Ratios** compare medians of decisions/s. The medians and ±x% (95% confidence interval) are computed as benchstat computes them; with fewer than 6 runs benchstat gives no interval.",
}, "\n")
