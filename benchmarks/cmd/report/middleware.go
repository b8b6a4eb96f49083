package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// The middleware comparisons (BenchmarkMiddleware/<Framework>/<mode>/impl=)
// have, beside ours and the peers, an implementation named bare: the same
// route with no limiter. What a middleware costs is what it adds to bare,
// its ns/op minus bare's from the same run, and the middleware target (see
// targets.go) compares those differences rather than decisions/s, which
// would count the framework's own cost on both sides.

// implBare is the baseline of a middleware scenario: no limiter at all.
const implBare = "bare"

// added returns e's median of unit minus bare's, and whether both were
// measured.
func added(e, bare *entry, unit string) (float64, bool) {
	if e == nil || bare == nil {
		return 0, false
	}
	a, ok1 := e.value(unit)
	b, ok2 := bare.value(unit)
	return a - b, ok1 && ok2
}

// addedCostVerdicts checks that each of our implementations in scenario sc
// adds at most max times the ns/op that peer adds to the bare route.
func addedCostVerdicts(r *results, name, sc, peer string, max float64) []verdict {
	var bare, theirs *entry
	if s := r.scenario(sc); s != nil {
		bare, theirs = s.entry(implBare), s.entry(peer)
	}
	required := fmt.Sprintf("added ns/op <= %.2fx `%s`'s", max, peer)
	return eachOurs(r, name, sc, required, func(v *verdict, e *entry) {
		ours, ok1 := added(e, bare, unitNs)
		their, ok2 := added(theirs, bare, unitNs)
		if !ok1 || !ok2 || their <= 0 {
			return
		}
		ratio := ours / their
		v.known = true
		v.measured = fmt.Sprintf("+%s vs +%s ns/op: %.2fx", sig3(ours), sig3(their), ratio)
		v.met = ratio <= max
		if !v.met {
			v.miss = fmt.Sprintf("%.2fx of the %.2fx asked: %.0f ns/op to cut", ratio, max, ours-max*their)
		}
	})
}

// leastAdded returns the entry of kind k, bare excluded, that adds the
// least ns/op to bare, or nil.
func leastAdded(s *scenario, k kind, bare *entry) *entry {
	var best *entry
	var bestV float64
	for _, e := range s.entries {
		if e.impl == implBare || kindOf(e.impl) != k {
			continue
		}
		if v, ok := added(e, bare, unitNs); ok && (best == nil || v < bestV) {
			best, bestV = e, v
		}
	}
	return best
}

// writeAddedCost writes, for every scenario of g that has a bare
// implementation, what our cheapest middleware and the cheapest peer add to
// it (ns/op and allocs/op), and the ratio of the added ns/op (below 1: ours
// costs less); then what the cheapest ceiling adds (the least our limiter
// costs as middleware, see BenchmarkMiddleware), and its ratio to the
// peer's, which shows how much of a target the limiter's decision and
// header fields alone leave room for ("–" where the scenario has none).
func writeAddedCost(w io.Writer, g *group) {
	head := []string{"scenario", "bare ns/op", "ours", "added ns/op", "added allocs/op", "cheapest peer", "added ns/op", "added allocs/op", "ours / peer added", "ceiling", "added ns/op", "ceiling / peer added"}
	writeRow(w, head)
	writeRule(w, len(head))
	for _, s := range g.scenarios {
		bare := s.entry(implBare)
		if bare == nil {
			continue
		}
		o, p := leastAdded(s, kindOurs, bare), leastAdded(s, kindPeer, bare)
		addedCell := func(e *entry, unit string) string {
			if v, ok := added(e, bare, unit); ok {
				if v < 0 {
					return formatValue(unit, v)
				}
				return "+" + formatValue(unit, v)
			}
			return "–"
		}
		c := leastAdded(s, kindCeiling, bare)
		vsPeer := func(e *entry, bold bool) string {
			a, ok1 := added(e, bare, unitNs)
			b, ok2 := added(p, bare, unitNs)
			switch {
			case !ok1 || !ok2 || b <= 0:
				return "–"
			case bold:
				return fmt.Sprintf("**%.2fx**", a/b)
			}
			return fmt.Sprintf("%.2fx", a/b)
		}
		writeRow(w, []string{
			shortName(s.name), cell(bare, unitNs),
			implCell(o), addedCell(o, unitNs), addedCell(o, unitAllocs),
			implCell(p), addedCell(p, unitNs), addedCell(p, unitAllocs),
			vsPeer(o, true),
			implCell(c), addedCell(c, unitNs), vsPeer(c, false),
		})
	}
}

// roundRatios returns, for each run, what o added to bare in that run over
// what p added in it (NaN where p added nothing), and their median over the
// runs where it is known; ok is false unless all three ran as often. The
// benchmarks run in rounds, each running every implementation one after
// another, so a run of o, p and bare with the same index share a round and
// the machine's state of that moment.
func roundRatios(o, p, bare *entry) (ratios []float64, median float64, ok bool) {
	if o == nil || p == nil || bare == nil {
		return nil, 0, false
	}
	ro, rp, rb := o.runs[unitNs], p.runs[unitNs], bare.runs[unitNs]
	if len(ro) == 0 || len(ro) != len(rp) || len(ro) != len(rb) {
		return nil, 0, false
	}
	var known []float64
	for i := range ro {
		r := math.NaN()
		if their := rp[i] - rb[i]; their > 0 {
			r = (ro[i] - rb[i]) / their
			known = append(known, r)
		}
		ratios = append(ratios, r)
	}
	if len(known) == 0 {
		return ratios, 0, false
	}
	return ratios, summarize(known).center, true
}

// writeRoundRatios writes, after a blank line and roundsNote, for every
// scenario of g that has a bare implementation, our cheapest middleware's
// added ns/op over the cheapest peer's round by round, and the median of
// those ratios: what the ratio of the medians in writeAddedCost (which the
// targets use) hides of how the rounds spread. It writes nothing without
// such a scenario.
func writeRoundRatios(w io.Writer, g *group) {
	rounds := 0
	type row struct {
		name   string
		o, p   *entry
		ratios []float64
		median float64
	}
	var rows []row
	for _, s := range g.scenarios {
		bare := s.entry(implBare)
		if bare == nil {
			continue
		}
		o, p := leastAdded(s, kindOurs, bare), leastAdded(s, kindPeer, bare)
		ratios, median, ok := roundRatios(o, p, bare)
		if !ok {
			continue
		}
		rounds = max(rounds, len(ratios))
		rows = append(rows, row{shortName(s.name), o, p, ratios, median})
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s\n\n", roundsNote)
	head := []string{"scenario", "ours", "peer"}
	for i := range rounds {
		head = append(head, fmt.Sprintf("round %d", i+1))
	}
	head = append(head, "median of the rounds")
	writeRow(w, head)
	writeRule(w, len(head))
	for _, r := range rows {
		cells := []string{r.name, implCell(r.o), implCell(r.p)}
		for i := range rounds {
			c := "–"
			if i < len(r.ratios) && !math.IsNaN(r.ratios[i]) {
				c = fmt.Sprintf("%.2f", r.ratios[i])
			}
			cells = append(cells, c)
		}
		cells = append(cells, fmt.Sprintf("**%.2fx**", r.median))
		writeRow(w, cells)
	}
}

// roundsNote introduces writeRoundRatios' table.
var roundsNote = strings.Join([]string{
	"Round by round: each round runs every implementation one after the other, so the runs of one round share the machine's state of that moment.",
	"Our added ns/op over the peer's in each round, and the median of those ratios; the targets above use the ratio of the medians instead.",
}, " ")
