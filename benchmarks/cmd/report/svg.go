package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// Chart layout, in pixels.
const (
	chartWidth  = 960
	labelWidth  = 200 // scenario names and ratios
	plotWidth   = 560
	barHeight   = 14
	barGap      = 3
	rowGap      = 12
	groupHeader = 30
	chartTop    = 64 // title and legend
	axisHeight  = 24

	colorOurs = "#2563eb"
	colorPeer = "#9ca3af"
	colorGood = "#15803d"
	colorBad  = "#b91c1c"
	colorGrid = "#e5e7eb"
	colorText = "#111827"
)

// chartRow is one scenario: our fastest and the fastest peer.
type chartRow struct {
	label      string
	ours, peer *entry
}

// writeChart draws, for every scenario, our fastest implementation's median
// decisions/s beside the fastest peer's, on a log scale, with the ratio.
func writeChart(w io.Writer, r *results, runs int) error {
	type section struct {
		name string
		rows []chartRow
	}
	var sections []section
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, g := range r.groups {
		sec := section{name: g.name}
		for _, s := range g.scenarios {
			row := chartRow{label: shortName(s.name), ours: s.best(kindOurs), peer: s.best(kindPeer)}
			if row.ours == nil && row.peer == nil {
				continue
			}
			for _, e := range []*entry{row.ours, row.peer} {
				if e == nil {
					continue
				}
				if v, ok := e.value(unitDecisions); ok && v > 0 {
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
			sec.rows = append(sec.rows, row)
		}
		if len(sec.rows) > 0 {
			sections = append(sections, sec)
		}
	}
	if len(sections) == 0 || math.IsInf(lo, 0) {
		return fmt.Errorf("report: nothing to chart")
	}
	decLo, decHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if decHi <= decLo {
		decHi = decLo + 1
	}
	x := func(v float64) float64 {
		return labelWidth + plotWidth*(math.Log10(v)-decLo)/(decHi-decLo)
	}
	rowHeight := 2*barHeight + barGap + rowGap
	height := chartTop + axisHeight
	for _, s := range sections {
		height += groupHeader + len(s.rows)*rowHeight
	}
	height += axisHeight

	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12" fill="%s">`+"\n",
		chartWidth, height, chartWidth, height, colorText)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	p(`<text x="%d" y="22" font-size="15" font-weight="bold">Decisions per second, median of %d runs (log scale): ours and the fastest peer</text>`+"\n", 10, runs)
	p(`<rect x="%d" y="34" width="14" height="12" fill="%s"/><text x="%d" y="44">ours (fastest of our implementations)</text>`+"\n", 10, colorOurs, 30)
	p(`<rect x="%d" y="34" width="14" height="12" fill="%s"/><text x="%d" y="44">fastest peer</text>`+"\n", 290, colorPeer, 310)
	p(`<text x="%d" y="44"><tspan font-weight="bold" fill="%s">1.00x</tspan> ours / peer, left of the bars</text>`+"\n", 420, colorGood)

	top, bottom := chartTop+axisHeight, height-axisHeight
	for d := decLo; d <= decHi; d++ {
		gx := x(math.Pow(10, d))
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", gx, top-4, gx, bottom+4, colorGrid)
		label := html.EscapeString(decade(d))
		p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#6b7280">%s</text>`+"\n", gx, top-8, label)
		p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#6b7280">%s</text>`+"\n", gx, bottom+18, label)
	}

	y := top
	for _, s := range sections {
		p(`<text x="10" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", y+20, html.EscapeString(s.name))
		y += groupHeader
		for _, row := range s.rows {
			p(`<text x="10" y="%d">%s</text>`+"\n", y+barHeight+barGap/2+4, html.EscapeString(row.label))
			for i, e := range []*entry{row.ours, row.peer} {
				by := y + i*(barHeight+barGap)
				if e == nil {
					continue
				}
				v, ok := e.value(unitDecisions)
				if !ok || v <= 0 {
					continue
				}
				color := colorOurs
				if i == 1 {
					color = colorPeer
				}
				bw := math.Max(1, x(v)-labelWidth)
				p(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %s decisions/s</title></rect>`+"\n",
					labelWidth, by, bw, barHeight, color, html.EscapeString(e.impl), si(v))
				p(`<text x="%.1f" y="%d" font-size="11">%s %s</text>`+"\n", labelWidth+bw+4, by+barHeight-3,
					si(v), html.EscapeString(e.impl))
			}
			if row.ours != nil && row.peer != nil {
				a, ok1 := row.ours.value(unitDecisions)
				b, ok2 := row.peer.value(unitDecisions)
				if ok1 && ok2 && b > 0 {
					color := colorGood
					if a < b {
						color = colorBad
					}
					p(`<text x="%d" y="%d" text-anchor="end" font-weight="bold" fill="%s">%.2fx</text>`+"\n",
						labelWidth-8, y+barHeight+barGap/2+4, color, a/b)
				}
			}
			y += rowHeight
		}
	}
	p("</svg>\n")
	return nil
}

// decade labels 10^d on the axis: 1k, 10k, 100k, 1M.
func decade(d float64) string {
	n := int(d)
	sfx := ""
	switch {
	case n >= 9:
		n, sfx = n-9, "G"
	case n >= 6:
		n, sfx = n-6, "M"
	case n >= 3:
		n, sfx = n-3, "k"
	}
	return "1" + strings.Repeat("0", max(n, 0)) + sfx
}
