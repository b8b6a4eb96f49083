package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// A chart is a line chart: series over a shared x axis.
type chart struct {
	Title          string
	XLabel, YLabel string
	Series         []series
	// Shade marks an interval of x (an outage), drawn behind the lines;
	// ignored when ShadeTo <= ShadeFrom.
	ShadeFrom, ShadeTo float64
	ShadeLabel         string
}

// A series is one line of a chart.
type series struct {
	Name   string
	X, Y   []float64
	Dashed bool
}

// palette are the series' colours, in order; they repeat past the end.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// The chart's geometry, in SVG user units.
const (
	chartW, chartH = 760, 340
	padL, padR     = 70, 190
	padT, padB     = 36, 46
)

// writeSVG draws c as a standalone SVG document.
func (c *chart) writeSVG(w io.Writer) error {
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range c.Series {
		for i := range s.X {
			xmin, xmax = math.Min(xmin, s.X[i]), math.Max(xmax, s.X[i])
			if !math.IsNaN(s.Y[i]) {
				ymax = math.Max(ymax, s.Y[i])
			}
		}
	}
	if math.IsInf(xmin, 0) {
		xmin, xmax = 0, 1
	}
	if xmax <= xmin {
		xmax = xmin + 1
	}
	ystep := niceStep(ymax / 5)
	if ystep <= 0 {
		ystep = 1
	}
	ytop := math.Ceil(ymax/ystep) * ystep
	if ytop <= 0 {
		ytop = ystep
	}
	pw, ph := float64(chartW-padL-padR), float64(chartH-padT-padB)
	px := func(x float64) float64 { return padL + (x-xmin)/(xmax-xmin)*pw }
	py := func(y float64) float64 { return padT + ph - y/ytop*ph }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", padL, html.EscapeString(c.Title))
	if c.ShadeTo > c.ShadeFrom {
		x0, x1 := px(math.Max(c.ShadeFrom, xmin)), px(math.Min(c.ShadeTo, xmax))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%.1f" fill="#f3d5d5"/>`+"\n", x0, padT, x1-x0, ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#a33">%s</text>`+"\n", x0+3, padT+14, html.EscapeString(c.ShadeLabel))
	}
	// Grid and y ticks.
	for y := 0.0; y <= ytop+ystep/2; y += ystep {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", padL, py(y), padL+pw, py(y))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, py(y)+4, formatTick(y, ystep))
	}
	// x ticks.
	xstep := niceStep((xmax - xmin) / 8)
	for x := math.Ceil(xmin/xstep) * xstep; x <= xmax+xstep/1000; x += xstep {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`+"\n", px(x), padT+ph, px(x), padT+ph+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(x), padT+ph+17, formatTick(x, xstep))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", padL, padT, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", padL+pw/2, chartH-8, html.EscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", padT+ph/2, html.EscapeString(c.YLabel))
	// Lines, broken where y is NaN (no data).
	for i, s := range c.Series {
		color := palette[i%len(palette)]
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		var pts []string
		flush := func() {
			if len(pts) > 0 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6"%s points="%s"/>`+"\n", color, dash, strings.Join(pts, " "))
				pts = pts[:0]
			}
		}
		for j := range s.X {
			if math.IsNaN(s.Y[j]) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[j]), py(s.Y[j])))
		}
		flush()
		ly := padT + 10 + 18*i
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", padL+pw+12, ly, padL+pw+36, ly, color, dash)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", padL+pw+42, ly+4, html.EscapeString(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceStep returns the smallest of 1, 2 or 5 times a power of ten that is
// at least raw.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// formatTick writes a tick value with as many decimals as step needs.
func formatTick(v, step float64) string {
	dec := 0
	if step < 1 {
		dec = int(math.Ceil(-math.Log10(step)))
	}
	return strconv.FormatFloat(v, 'f', dec, 64)
}
