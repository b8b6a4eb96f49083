package main

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
)

// Metric units, as the benchmarks report them.
const (
	unitNs        = "ns/op"
	unitAllocs    = "allocs/op"
	unitBytes     = "B/op"
	unitDecisions = "decisions/s"
	unitErrors    = "errors/op"
	unitWrong     = "wrong/op"
	unitCmds      = "cmds/decision"
	unitRedisCmds = "redis-cmds/decision"
	unitLocal     = "local-share"
	unitRedisCPU  = "redis-cpu-ns/decision"
	unitClientCPU = "client-cpu-ns/decision"
)

// detailUnits are the metrics of the full tables, in order.
var detailUnits = []string{unitDecisions, unitNs, unitAllocs, unitBytes, unitPerKey, unitCmds, unitRedisCmds, unitLocal, unitRedisCPU, unitClientCPU, unitErrors, unitWrong}

// stat is the summary of one metric over the runs of one benchmark: the
// median and its confidence interval, as benchstat computes them.
type stat struct {
	center, lo, hi float64
	n              int
}

// spread is the half-width of the confidence interval relative to the
// median, as benchstat's ±x%; NaN when it is unknown (too few runs).
func (s stat) spread() float64 {
	if s.n < 2 || math.IsInf(s.lo, 0) || math.IsInf(s.hi, 0) || s.center == 0 {
		return math.NaN()
	}
	return math.Max(s.hi-s.center, s.center-s.lo) / math.Abs(s.center)
}

// kind is what an implementation is.
type kind int

const (
	kindPeer kind = iota
	kindOurs
	kindCeiling
)

func kindOf(impl string) kind {
	switch {
	case strings.HasPrefix(impl, "ours"):
		return kindOurs
	case strings.HasPrefix(impl, "ceiling_"), impl == implBare:
		// A ceiling or a baseline decides nothing: never a peer.
		return kindCeiling
	}
	return kindPeer
}

// entry is one implementation in one scenario.
type entry struct {
	impl    string
	metrics map[string]stat
	runs    map[string][]float64 // each metric's values, one per run, in the order they ran
}

// value returns the median of unit and whether it was measured.
// decisions/s falls back to 1e9/ns/op for benchmarks that do not report it.
func (e *entry) value(unit string) (float64, bool) {
	if s, ok := e.metrics[unit]; ok {
		return s.center, true
	}
	if unit == unitDecisions {
		if s, ok := e.metrics[unitNs]; ok && s.center > 0 {
			return 1e9 / s.center, true
		}
	}
	return 0, false
}

// scenario is one comparison: a benchmark name without its impl= part,
// such as "Redis/HotKeyAllow/g=64".
type scenario struct {
	name    string
	entries []*entry // in the order the benchmarks ran
}

func (s *scenario) entry(impl string) *entry {
	for _, e := range s.entries {
		if e.impl == impl {
			return e
		}
	}
	return nil
}

// best returns the entry of kind k with the highest median decisions/s,
// or nil.
func (s *scenario) best(k kind) *entry {
	var best *entry
	bestV := -1.0
	for _, e := range s.entries {
		if kindOf(e.impl) != k {
			continue
		}
		if v, ok := e.value(unitDecisions); ok && v > bestV {
			best, bestV = e, v
		}
	}
	return best
}

// least returns the entry of kind k with the lowest median of unit, or nil.
func (s *scenario) least(k kind, unit string) *entry {
	var least *entry
	var leastV float64
	for _, e := range s.entries {
		if kindOf(e.impl) != k {
			continue
		}
		if v, ok := e.value(unit); ok && (least == nil || v < leastV) {
			least, leastV = e, v
		}
	}
	return least
}

// group is every scenario of one top-level benchmark ("Memory", "Redis").
type group struct {
	name      string
	scenarios []*scenario
}

// results is everything read from the benchmark output.
type results struct {
	groups []*group
	config map[string]string // goos, goarch, pkg, cpu, from the output's header
	procs  string            // the GOMAXPROCS suffix of the benchmark names
}

func (r *results) group(name string) *group {
	for _, g := range r.groups {
		if g.name == name {
			return g
		}
	}
	return nil
}

func (r *results) scenario(name string) *scenario {
	group, _, _ := strings.Cut(name, "/")
	if g := r.group(group); g != nil {
		for _, s := range g.scenarios {
			if s.name == name {
				return s
			}
		}
	}
	return nil
}

var procsSuffix = regexp.MustCompile(`-(\d+)$`)

// splitName turns "BenchmarkRedis/HotKeyAllow/g=64/impl=ours_goredis-2"
// into its group, scenario, impl and GOMAXPROCS suffix. ok is false for a
// benchmark without an impl= part, which has no peer to pair with.
func splitName(full string) (groupName, scenarioName, impl, procs string, ok bool) {
	full = strings.TrimPrefix(full, "Benchmark")
	if m := procsSuffix.FindStringSubmatch(full); m != nil {
		procs = m[1]
		full = full[:len(full)-len(m[0])]
	}
	i := strings.LastIndex(full, "/impl=")
	if i < 0 {
		return "", "", "", procs, false
	}
	scenarioName, impl = full[:i], full[i+len("/impl="):]
	groupName, _, _ = strings.Cut(scenarioName, "/")
	return groupName, scenarioName, impl, procs, true
}

// readResults reads go test -bench output, any number of runs of each
// benchmark, and summarizes every metric.
func readResults(files map[string]io.Reader, order []string) (*results, []string, error) {
	type key struct{ scenario, impl string }
	samples := map[key]map[string][]float64{}
	var keys []key
	res := &results{config: map[string]string{}}
	var warnings []string
	for _, name := range order {
		rd := benchfmt.NewReader(files[name], name)
		for rd.Scan() {
			switch rec := rd.Result().(type) {
			case *benchfmt.SyntaxError:
				warnings = append(warnings, rec.Error())
			case *benchfmt.Result:
				for _, c := range rec.Config {
					if c.File {
						res.config[c.Key] = string(c.Value)
					}
				}
				g, sc, impl, procs, ok := splitName(rec.Name.String())
				if !ok {
					continue
				}
				if procs != "" {
					res.procs = procs
				}
				k := key{sc, impl}
				if samples[k] == nil {
					samples[k] = map[string][]float64{}
					keys = append(keys, k)
					grp := res.group(g)
					if grp == nil {
						grp = &group{name: g}
						res.groups = append(res.groups, grp)
					}
					s := res.scenario(sc)
					if s == nil {
						s = &scenario{name: sc}
						grp.scenarios = append(grp.scenarios, s)
					}
					s.entries = append(s.entries, &entry{impl: impl, metrics: map[string]stat{}, runs: map[string][]float64{}})
				}
				for _, v := range rec.Values {
					unit, val := v.Unit, v.Value
					if v.OrigUnit != "" {
						unit, val = v.OrigUnit, v.OrigValue
					}
					samples[k][unit] = append(samples[k][unit], val)
				}
			}
		}
		if err := rd.Err(); err != nil {
			return nil, warnings, fmt.Errorf("report: %s: %w", name, err)
		}
	}
	for _, k := range keys {
		e := res.scenario(k.scenario).entry(k.impl)
		for unit, vals := range samples[k] {
			e.metrics[unit] = summarize(vals)
			e.runs[unit] = vals
		}
	}
	return res, warnings, nil
}

// summarize computes the median and its 95% confidence interval, with no
// assumption about the distribution: what benchstat reports by default.
func summarize(vals []float64) stat {
	vals = slices.Clone(vals)
	s := benchmath.AssumeNothing.Summary(benchmath.NewSample(vals, &benchmath.DefaultThresholds), 0.95)
	return stat{center: s.Center, lo: s.Lo, hi: s.Hi, n: len(vals)}
}
