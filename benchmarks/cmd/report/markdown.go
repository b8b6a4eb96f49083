package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// si formats v with three significant digits and an SI suffix: 12.3M.
func si(v float64) string {
	a := math.Abs(v)
	for _, u := range []struct {
		div float64
		sfx string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if a >= u.div {
			return sig3(v/u.div) + u.sfx
		}
	}
	return sig3(v)
}

// sig3 formats v with three significant digits, no exponent.
func sig3(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	case a >= 0.01:
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

// formatValue formats a median of unit.
func formatValue(unit string, v float64) string {
	switch unit {
	case unitDecisions:
		return si(v)
	case unitLocal:
		return fmt.Sprintf("%.1f%%", 100*v)
	case unitAllocs, unitBytes:
		if v == math.Trunc(v) {
			return fmt.Sprintf("%.0f", v)
		}
		return sig3(v)
	}
	return sig3(v)
}

// formatStat formats a summary as benchstat does: the median, then ±x% when
// the confidence interval is known.
func formatStat(unit string, s stat) string {
	out := formatValue(unit, s.center)
	if sp := s.spread(); !math.IsNaN(sp) && s.center != 0 {
		out += fmt.Sprintf(" ±%.0f%%", 100*sp)
	}
	return out
}

// shortName is a scenario's name without its group.
func shortName(sc string) string {
	_, rest, _ := strings.Cut(sc, "/")
	return rest
}

// hasUnit reports whether any entry of g measured unit.
func hasUnit(g *group, unit string) bool {
	for _, s := range g.scenarios {
		for _, e := range s.entries {
			if _, ok := e.metrics[unit]; ok {
				return true
			}
		}
	}
	return false
}

func cell(e *entry, unit string) string {
	if e == nil {
		return "–"
	}
	if s, ok := e.metrics[unit]; ok {
		return formatStat(unit, s)
	}
	if v, ok := e.value(unit); ok {
		return formatValue(unit, v)
	}
	return "–"
}

func implCell(e *entry) string {
	if e == nil {
		return "–"
	}
	return "`" + e.impl + "`"
}

// ratio returns ours/peer decisions/s, formatted, or "–".
func ratio(ours, peer *entry) string {
	if ours == nil || peer == nil {
		return "–"
	}
	a, ok1 := ours.value(unitDecisions)
	b, ok2 := peer.value(unitDecisions)
	if !ok1 || !ok2 || b == 0 {
		return "–"
	}
	return fmt.Sprintf("**%.2fx**", a/b)
}

// writeSummary writes the table of the issue for group g: per scenario, our
// fastest implementation's median, the fastest peer's, and the ratio; with
// allocations, B/key where measured, and for Redis commands per decision
// and the local share.
func writeSummary(w io.Writer, g *group) {
	cmds := hasUnit(g, unitCmds)
	local := hasUnit(g, unitLocal)
	perKey := hasUnit(g, unitPerKey)
	head := []string{"scenario", "ours", "decisions/s", "allocs/op"}
	if perKey {
		head = append(head, unitPerKey)
	}
	if cmds {
		head = append(head, "cmds/decision")
	}
	if local {
		head = append(head, "local")
	}
	head = append(head, "best peer", "decisions/s", "allocs/op")
	if perKey {
		head = append(head, unitPerKey)
	}
	if cmds {
		head = append(head, "cmds/decision")
	}
	head = append(head, "ours / peer")
	writeRow(w, head)
	writeRule(w, len(head))
	for _, s := range g.scenarios {
		o, p := s.best(kindOurs), s.best(kindPeer)
		row := []string{shortName(s.name), implCell(o), cell(o, unitDecisions), cell(o, unitAllocs)}
		if perKey {
			row = append(row, cell(o, unitPerKey))
		}
		if cmds {
			row = append(row, cell(o, unitCmds))
		}
		if local {
			row = append(row, cell(o, unitLocal))
		}
		row = append(row, implCell(p), cell(p, unitDecisions), cell(p, unitAllocs))
		if perKey {
			row = append(row, cell(p, unitPerKey))
		}
		if cmds {
			row = append(row, cell(p, unitCmds))
		}
		row = append(row, ratio(o, p))
		writeRow(w, row)
	}
}

// writeDetail writes every implementation of every scenario of g with every
// metric measured.
func writeDetail(w io.Writer, g *group) {
	var units []string
	for _, u := range detailUnits {
		if hasUnit(g, u) || (u == unitDecisions && hasUnit(g, unitNs)) {
			units = append(units, u)
		}
	}
	head := append([]string{"scenario", "impl"}, units...)
	writeRow(w, head)
	writeRule(w, len(head))
	for _, s := range g.scenarios {
		for _, e := range s.entries {
			row := []string{shortName(s.name), implCell(e)}
			for _, u := range units {
				row = append(row, cell(e, u))
			}
			writeRow(w, row)
		}
	}
}

// writeCeilings writes, for the scenarios that have them, the ceilings
// beside our fastest implementation.
func writeCeilings(w io.Writer, g *group) bool {
	var names []string
	for _, s := range g.scenarios {
		for _, e := range s.entries {
			if kindOf(e.impl) == kindCeiling && !contains(names, e.impl) {
				names = append(names, e.impl)
			}
		}
	}
	if len(names) == 0 {
		return false
	}
	head := []string{"scenario", "ours", "decisions/s"}
	for _, n := range names {
		head = append(head, "`"+n+"`")
	}
	writeRow(w, head)
	writeRule(w, len(head))
	for _, s := range g.scenarios {
		o := s.best(kindOurs)
		row := []string{shortName(s.name), implCell(o), cell(o, unitDecisions)}
		for _, n := range names {
			row = append(row, cell(s.entry(n), unitDecisions))
		}
		writeRow(w, row)
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// writeVerdicts writes the targets with what was measured.
func writeVerdicts(w io.Writer, vs []verdict) {
	writeRow(w, []string{"target", "scenario", "impl", "required", "measured", "verdict"})
	writeRule(w, 6)
	for _, v := range vs {
		impl := "–"
		if v.impl != "" {
			impl = "`" + v.impl + "`"
		}
		verdict := verdictText(v)
		if v.known && v.met {
			verdict = "**met**"
		} else if v.known {
			verdict = "**" + verdict + "**"
		}
		writeRow(w, []string{v.target, shortName(v.scenario), impl, v.required, v.measured, verdict})
	}
}

// writeAdmission writes the admission test's results.
func writeAdmission(w io.Writer, rows []admissionRow) {
	writeRow(w, []string{"store", "impl", "advertised limit", "attempts", "admitted", "over the limit", "errors"})
	writeRule(w, 7)
	for _, r := range rows {
		over := r.admitted - r.limit
		overText := "0"
		switch {
		case over > 0:
			overText = fmt.Sprintf("**+%d**", over)
		case over < 0:
			overText = fmt.Sprintf("%d (under)", over)
		}
		if r.refill {
			overText += " (ran longer than one refill: inconclusive)"
		}
		errs := fmt.Sprint(r.errors)
		if r.errors > 0 {
			errs = "**" + errs + "**"
		}
		writeRow(w, []string{r.store, "`" + r.impl + "`", fmt.Sprint(r.limit), fmt.Sprint(r.attempts), fmt.Sprint(r.admitted), overText, errs})
	}
}

func writeRow(w io.Writer, cells []string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

func writeRule(w io.Writer, n int) {
	fmt.Fprintf(w, "|%s\n", strings.Repeat(" --- |", n))
}
