package main

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"time"
)

// report is everything LOADTEST.md says.
type report struct {
	Config   config
	Argv     []string
	Started  time.Time
	Took     time.Duration
	Bins     map[string]string
	Runs     []*summary
	Failures []string
}

// The hand-written analysis between these markers survives a rewrite of
// the report.
const (
	analysisBegin = "<!-- analysis:begin -->"
	analysisEnd   = "<!-- analysis:end -->"
)

// write writes the report to path and its plots to plots (relative to
// path's directory).
func (r *report) write(path, plots string) error {
	plotDir := filepath.Join(filepath.Dir(path), plots)
	if err := os.MkdirAll(plotDir, 0o755); err != nil {
		return err
	}
	charts := r.charts()
	names := make([]string, 0, len(charts))
	for name := range charts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		var b bytes.Buffer
		if err := charts[name].writeSVG(&b); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(plotDir, name), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	analysis := analysisBegin + "\n" + analysisEnd
	if old, err := os.ReadFile(path); err == nil {
		if i := bytes.Index(old, []byte(analysisBegin)); i >= 0 {
			if j := bytes.Index(old[i:], []byte(analysisEnd)); j >= 0 {
				analysis = string(old[i : i+j+len(analysisEnd)])
			}
		}
	}
	var b bytes.Buffer
	r.markdown(&b, filepath.ToSlash(plots), analysis)
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond))
}

// baseline returns the baseline run of a framework at a rate (0: the
// run's), or nil.
func (r *report) baseline(fw string, rate int) *summary {
	for _, s := range r.Runs {
		if s.Target.Framework == fw && !s.Target.limited() && s.Target.Rate == rate {
			return s
		}
	}
	return nil
}

func (r *report) markdown(w io.Writer, plots, analysis string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# Load test\n\n")
	p("Written by `make loadtest` (`benchmarks/loadtest/`): the example servers (`examples/gin`, `examples/nethttp`) driven over\n")
	p("real HTTP by [vegeta](https://github.com/tsenart/vegeta) used as a library, at a constant rate, on every store,\n")
	p("beside a baseline of the same servers without the middleware. Every admitted request is checked against the exact\n")
	p("math of every bucket it took from.\n\n")
	p("Run on %s, in %v:\n\n```\n", r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Took.Round(time.Second))
	p("%s\n```\n\n", commandLine(r.Argv))
	if len(r.Failures) > 0 {
		p("**This run failed:**\n\n")
		for _, f := range r.Failures {
			p("- %s\n", f)
		}
		p("\n")
	}
	r.machine(w)
	p("\n## The setup\n\n")
	p("- **Targets**: each framework's example server with `-rules` (the policy below) and `-metrics`, as two\n")
	p("  instances on 127.0.0.1 sharing one store, requests spread round-robin between them; in memory a single instance\n")
	p("  (memory is not shared). Stores: a standalone redis-server and a 3-master Redis Cluster (no replicas), both\n")
	p("  started by `internal/redistest` and emptied before each run, through go-redis and rueidis, with the examples'\n")
	p("  `-redis-timeout 100ms` (fail open past it). The baseline runs the same binaries with `-no-limit`.\n")
	p("- **Traffic**: %d requests/s, constant (vegeta's open model: a slow server does not slow the sender), for %v per\n", r.Config.Rate, r.Config.Duration)
	p("  target; %d users (every %dth on the pro plan, the rest free) sending %.0f%% of the requests, a hot user (pro)\n", r.Config.Users, proEvery, 100*(1-hotUserShare-anonymousShare))
	p("  sending %.0f%%, and anonymous clients from %d loopback addresses (127.0.1.1-%d) sending %.0f%%; %.0f%% of all\n", 100*hotUserShare, anonymousIPs, anonymousIPs, 100*anonymousShare, 100*searchShare)
	p("  requests go to `GET /search` (the hot endpoint), the rest to `GET /items/{id}`. Keep-alive connections, a 5s\n")
	p("  timeout per request. The sender shares the machine's cores with the servers and Redis.\n")
	if r.Config.Peak {
		p("- **Peak runs** (`@2000/s`, `@3000/s`): gin on the Cluster at 2,000 requests/s and on standalone Redis at 3,000\n")
		p("  (go-redis), %v each, each beside the baseline at its rate: what this machine sustains beyond the main rate.\n", peakDuration)
	}
	p("- **Latency** is vegeta's: from sending the request to the end of the response body, at the client.\n")
	p("- **Exact math**: a bucket of burst b and rate r admits at most b + ⌊r·T⌋ requests over T, starting full; T runs\n")
	p("  from the attack's start to the end of its last response, which holds every decision. Over-admission is any\n")
	p("  bucket above that; a run with any exits non-zero (the outage run excepted, where failing open is the point).\n\n")
	p("The policy (`-rules`, all tiers of a request decided at once, all or nothing):\n\n")
	p("| rule | scope | plan | routes | burst | rate |\n|---|---|---|---|---:|---|\n")
	for _, t := range tiers {
		plan, routes := t.Plan, "every route"
		if plan == "" {
			plan = "every plan"
		}
		if t.Search {
			routes = "GET /search"
		}
		p("| %s | %s | %s | %s | %d | %d per %v |\n", t.Name, t.Scope, plan, routes, t.Burst, t.Rate, t.Period)
	}

	p("\n## Latency and cost\n\n")
	p("| target | requests | sent/s | 200 | 429 | failed | degraded | p50 ms | p99 ms | p99.9 ms | added p50 / p99 ms | server CPU / 1k req | Redis CPU | Redis CPU / 1k req | scripts / req | Redis cmds / req | denials answered locally | load avg |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, s := range r.Runs {
		if s.Target.Outage {
			continue
		}
		added := "—"
		if b := r.baseline(s.Target.Framework, s.Target.Rate); b != nil && s.Target.limited() {
			added = fmt.Sprintf("%+.2f / %+.2f", float64(s.Latency.P50-b.Latency.P50)/1e6, float64(s.Latency.P99-b.Latency.P99)/1e6)
		}
		redisCPU, per1k, scripts, cmds, local, degraded := "—", "—", "—", "—", "—", "—"
		if s.Target.limited() {
			degraded = fmt.Sprintf("%.0f", s.Degraded)
		}
		if s.Target.Store == "redis" || s.Target.Store == "cluster" {
			redisCPU = fmt.Sprintf("%.1f%%", s.RedisCPUPercent())
			per1k = ms(s.RedisCPUPer1k()) + " ms"
			scripts = fmt.Sprintf("%.3f", s.ScriptsPerRequest())
			cmds = fmt.Sprintf("%.2f", s.CommandsPerRequest())
			local = fmt.Sprintf("%.1f%%", 100*s.LocalShare())
		}
		p("| %s | %d | %.0f | %d | %d | %d | %s | %s | %s | %s | %s | %s ms | %s | %s | %s | %s | %s | %s → %s |\n",
			s.Name, s.Requests, s.Rate, s.OK, s.Denied, s.Failed, degraded, ms(s.Latency.P50), ms(s.Latency.P99), ms(s.Latency.P999),
			added, ms(s.AppCPUPer1k()), redisCPU, per1k, scripts, cmds, local, s.Load[0], s.Load[1])
	}
	p("\nServer CPU is the instances' user + system time (/proc) per 1,000 requests; Redis CPU is `INFO` `used_cpu_sys` +\n")
	p("`used_cpu_user` over the run (summed over the Cluster's masters: %% of one core). Scripts are the `EVALSHA`/`EVAL`\n")
	p("calls of `INFO commandstats`, one per round trip that decides buckets (a batch of concurrent requests shares\n")
	p("one); Redis commands are `total_commands_processed`, which counts the `GET`, `SET` and `TIME` a script runs too.\n")
	p("Degraded decisions are the limiter's `rate_limiter_errors_total`: a store failure, here a decision that took\n")
	p("longer than the servers' `-redis-timeout` (1s; 100ms in the outage run), which the limiter fails open. Denials\n")
	p("answered locally are the stores' `rate_limiter_redis_takes_total{via=\"local\"}` over `rate_limiter_rejected_total`,\n")
	p("scraped from the instances' `-metrics`.\n")

	p("\n## Admission against the exact math\n\n")
	p("| target | buckets | over the math | hot user per-user | hot user search | search endpoint | global |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Runs {
		if !s.Target.limited() {
			continue
		}
		cells := map[string]string{}
		for _, b := range s.Saturated {
			name := b.Tier.Name
			if b.Tier.Scope == "user" {
				name = "hot user " + b.Tier.Name
			}
			cells[name] = fmt.Sprintf("%d / %d (%.1f%%)", b.Admitted, b.Allowed, 100*float64(b.Admitted)/float64(max(b.Allowed, 1)))
		}
		over := fmt.Sprintf("%d", s.Over)
		if s.Target.Outage {
			over += " (outage: fails open)"
		}
		p("| %s | %d | %s | %s | %s | %s | %s |\n", s.Name, len(s.Buckets), over,
			cell(cells, "hot user per-user"), cell(cells, "hot user search"), cell(cells, "search-endpoint"), cell(cells, "global"))
	}
	p("\nBy tier: the buckets whose demand reached the math's allowance (offered >= b + ⌊r·T⌋), and what they admitted\n")
	p("of what the math allowed them, summed; the other buckets admitted everything they were asked and are not under-\n")
	p("admitted by definition.\n\n")
	p("| target |")
	for _, t := range tiers {
		name := t.Name
		if t.Plan != "" {
			name += " (" + t.Plan + ")"
		}
		p(" %s |", name)
	}
	p("\n|---|")
	for range tiers {
		p("---:|")
	}
	p("\n")
	for _, s := range r.Runs {
		if !s.Target.limited() || s.Target.Outage {
			continue
		}
		p("| %s |", s.Name)
		for _, tt := range s.Tiers {
			if tt.Saturated == 0 {
				p(" %d buckets, none saturated |", tt.Buckets)
				continue
			}
			p(" %d of %d saturated: %d / %d (%.1f%%) |", tt.Saturated, tt.Buckets, tt.SatAdmitted, tt.SatAllow, 100*float64(tt.SatAdmitted)/float64(tt.SatAllow))
		}
		p("\n")
	}
	p("\nEach cell of the first table is admitted / allowed by the exact math over the run. Over the math counts every bucket of the run\n")
	p("(each user's, each anonymous IP's, the endpoint's, the global one): the requests admitted beyond b + ⌊r·T⌋, summed.\n")
	p("Below 100%% is under-admission: all-or-nothing decisions (a request another tier denies takes nothing from this\n")
	p("one), demand that pauses, and, on Redis, each bucket's time running from its first request rather than the run's\n")
	p("start.\n")

	p("\n## Plots\n\n")
	for _, fw := range []string{"gin", "nethttp"} {
		if r.baseline(fw, 0) != nil {
			p("![%s latency over time](%s/latency-%s.svg)\n\n", fw, plots, fw)
		}
	}
	if r.find("gin", "redis", "go-redis", false) != nil {
		p("![admitted vs allowed](%s/admitted.svg)\n\n", plots)
	}
	if o := r.outage(); o != nil {
		p("\n## Through a Redis outage\n\n")
		p("`%s`: the standalone redis-server killed (SIGKILL) %.1fs into the run and restarted, empty, at %.1fs. The servers\n", o.Name, o.Outage[0].Seconds(), o.Outage[1].Seconds())
		p("fail open after `-redis-timeout 100ms`, and the stores' circuit breakers stop asking Redis while it is down.\n\n")
		p("![outage](%s/outage.svg)\n\n![outage latency](%s/outage-latency.svg)\n\n", plots, plots)
		p("| second | requests | 200 | 429 | failed | p50 ms | p99 ms |\n|---:|---:|---:|---:|---:|---:|---:|\n")
		for i, sec := range o.Seconds {
			mark := ""
			if t := time.Duration(i) * time.Second; t+time.Second > o.Outage[0] && t < o.Outage[1] {
				mark = " (down)"
			}
			p("| %d%s | %d | %d | %d | %d | %s | %s |\n", i, mark, sec.Requests, sec.OK, sec.Denied, sec.Failed, ms(sec.Latency.P50), ms(sec.Latency.P99))
		}
	}
	p("\n## Analysis\n\n%s\n", analysis)
}

func cell(m map[string]string, k string) string {
	if v, ok := m[k]; ok {
		return v
	}
	return "—"
}

// find returns the run of that target, or nil.
func (r *report) find(fw, store, client string, outage bool) *summary {
	for _, s := range r.Runs {
		t := s.Target
		if t.Framework == fw && t.Store == store && t.Client == client && t.Outage == outage && t.Rate == 0 {
			return s
		}
	}
	return nil
}

func (r *report) outage() *summary {
	for _, s := range r.Runs {
		if s.Target.Outage {
			return s
		}
	}
	return nil
}

// charts returns the plots by file name.
func (r *report) charts() map[string]*chart {
	out := make(map[string]*chart)
	nan := math.NaN()
	perSecond := func(s *summary, f func(second) float64) ([]float64, []float64) {
		var xs, ys []float64
		// The last second is partial: left out.
		for i := 0; i+1 < len(s.Seconds); i++ {
			xs = append(xs, float64(i)+0.5)
			y := nan
			if s.Seconds[i].Requests > 0 {
				y = f(s.Seconds[i])
			}
			ys = append(ys, y)
		}
		return xs, ys
	}
	msOf := func(d time.Duration) float64 { return float64(d) / 1e6 }
	for _, fw := range []string{"gin", "nethttp"} {
		base := r.baseline(fw, 0)
		if base == nil {
			continue
		}
		c := &chart{Title: fw + ": latency per second, with and without the limiter", XLabel: "seconds into the run", YLabel: "ms"}
		for _, s := range []*summary{base, r.find(fw, "memory", "", false), r.find(fw, "redis", "go-redis", false), r.find(fw, "cluster", "go-redis", false)} {
			if s == nil {
				continue
			}
			label := strings.TrimPrefix(s.Name, fw+" ")
			if !s.Target.limited() {
				label = "no limiter"
			}
			x, y := perSecond(s, func(sec second) float64 { return msOf(sec.Latency.P99) })
			c.Series = append(c.Series, series{Name: label + " p99", X: x, Y: y})
			x, y = perSecond(s, func(sec second) float64 { return msOf(sec.Latency.P50) })
			c.Series = append(c.Series, series{Name: label + " p50", X: x, Y: y, Dashed: true})
		}
		out["latency-"+fw+".svg"] = c
	}
	if s := r.find("gin", "redis", "go-redis", false); s != nil {
		c := &chart{Title: "gin redis/go-redis: admitted vs allowed, cumulative", XLabel: "seconds into the run", YLabel: "requests"}
		for _, b := range []struct{ key, tier string }{{"search endpoint", "search-endpoint"}, {"hot user", "per-user"}} {
			var t tier
			for _, x := range tiers {
				if x.Name == b.tier && (x.Plan == "" || x.Plan == planPro) {
					t = x
				}
			}
			var xs, adm, allowed []float64
			sum := 0
			// The last second is partial: left out.
			for i, sec := range s.Seconds[:max(len(s.Seconds)-1, 0)] {
				sum += sec.Admitted[b.key]
				xs = append(xs, float64(i+1))
				adm = append(adm, float64(sum))
				allowed = append(allowed, float64(t.allowed(time.Duration(i+1)*time.Second)))
			}
			if b.key == "hot user" {
				// Scaled to share the axis with the endpoint's bucket.
				f := 30.0
				for i := range adm {
					adm[i] *= f
					allowed[i] *= f
				}
				b.key += " ×30"
			}
			c.Series = append(c.Series, series{Name: b.key + " admitted", X: xs, Y: adm}, series{Name: b.key + " allowed", X: xs, Y: allowed, Dashed: true})
		}
		out["admitted.svg"] = c
	}
	if o := r.outage(); o != nil {
		c := &chart{Title: o.Name + ": outcomes per second", XLabel: "seconds into the run", YLabel: "requests per second",
			ShadeFrom: o.Outage[0].Seconds(), ShadeTo: o.Outage[1].Seconds(), ShadeLabel: "redis-server down"}
		for _, f := range []struct {
			name string
			get  func(second) float64
		}{
			{"200", func(s second) float64 { return float64(s.OK) }},
			{"429", func(s second) float64 { return float64(s.Denied) }},
			{"failed", func(s second) float64 { return float64(s.Failed) }},
		} {
			x, y := perSecond(o, f.get)
			c.Series = append(c.Series, series{Name: f.name, X: x, Y: y})
		}
		out["outage.svg"] = c
		l := &chart{Title: o.Name + ": latency per second", XLabel: "seconds into the run", YLabel: "ms",
			ShadeFrom: o.Outage[0].Seconds(), ShadeTo: o.Outage[1].Seconds(), ShadeLabel: "redis-server down"}
		x, y := perSecond(o, func(s second) float64 { return msOf(s.Latency.P99) })
		l.Series = append(l.Series, series{Name: "p99", X: x, Y: y})
		x, y = perSecond(o, func(s second) float64 { return msOf(s.Latency.P50) })
		l.Series = append(l.Series, series{Name: "p50", X: x, Y: y, Dashed: true})
		out["outage-latency.svg"] = l
	}
	return out
}

// machine writes what the run ran on.
func (r *report) machine(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## The machine\n\n")
	p("| | |\n|---|---|\n")
	p("| CPU | %s, %d logical CPUs |\n", cpuModel(), runtime.NumCPU())
	p("| memory | %s |\n", memTotal())
	p("| OS | %s %s |\n", runtime.GOOS, firstLine("/proc/sys/kernel/osrelease"))
	p("| Go | %s |\n", runtime.Version())
	if out, err := exec.Command("redis-server", "--version").Output(); err == nil {
		p("| redis-server | %s |\n", strings.TrimSpace(string(out)))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tsenart/vegeta/v12" {
				p("| vegeta | %s |\n", d.Version)
			}
		}
	}
	fws := make([]string, 0, len(r.Bins))
	for fw := range r.Bins {
		fws = append(fws, fw)
	}
	sort.Strings(fws)
	for _, fw := range fws {
		bi, err := buildinfo.ReadFile(r.Bins[fw])
		if err != nil {
			continue
		}
		var deps []string
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/gin-gonic/gin", "github.com/redis/go-redis/v9", "github.com/redis/rueidis":
				deps = append(deps, d.Path+" "+d.Version)
			}
		}
		p("| examples/%s | %s |\n", fw, strings.Join(deps, ", "))
	}
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return "?"
}

func firstLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
}

// commandLine is how the run was started, as a shell would read it.
func commandLine(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	parts := []string{"loadtest"}
	for _, a := range argv[1:] {
		if strings.ContainsAny(a, " |()'\"*?$") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return "cd benchmarks/loadtest && go run . " + strings.Join(parts[1:], " ")
}

// printSummary writes one line per run.
func (r *report) printSummary(w io.Writer) {
	for _, s := range r.Runs {
		fmt.Fprintf(w, "%-28s %6d req %6.0f/s  200 %6d  429 %6d  failed %4d  p50 %6s  p99 %6s  p99.9 %6s ms  over %d\n",
			s.Name, s.Requests, s.Rate, s.OK, s.Denied, s.Failed, ms(s.Latency.P50), ms(s.Latency.P99), ms(s.Latency.P999), s.Over)
	}
}
