package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Plot writes one SVG per chart of r into dir (created if missing) and
// returns the paths it wrote. A chart that cannot be drawn (bad file name,
// unknown kind, X and Y of different lengths) is left out and named in the
// error; the others are still written. Points that are not finite, or not
// positive on a log axis, are skipped.
func Plot(dir string, r Report) ([]string, error) {
	if len(r.Charts) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	var errs []error
	for _, c := range r.Charts {
		if c.File == "" || strings.ContainsAny(c.File, `/\`) || c.File == "." || c.File == ".." {
			errs = append(errs, fmt.Errorf("chart %q: bad file name %q", c.Title, c.File))
			continue
		}
		svg, err := renderSVG(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("chart %q: %w", c.File, err))
			continue
		}
		path := filepath.Join(dir, c.File+".svg")
		if err := os.WriteFile(path, svg, 0o644); err != nil {
			errs = append(errs, err)
			continue
		}
		files = append(files, path)
	}
	return files, errors.Join(errs...)
}

// The layout, in pixels: the plot area, with room for tick labels and axis
// labels around it and for the legend on its right.
const (
	plotLeft   = 80.0
	plotTop    = 40.0
	plotWidth  = 560.0
	plotHeight = 360.0
	svgHeight  = plotTop + plotHeight + 60
	// cdfPoints bounds the steps drawn per CDF: a million latency samples
	// would otherwise make a file of megabytes that looks the same.
	cdfPoints = 400
	// markerMax: beyond this many points per series markers are clutter.
	markerMax = 60
)

// Okabe–Ito colours, told apart also by most colour-blind readers.
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999"}

type pt struct{ x, y float64 }

// line is one series ready to draw: the polyline and where its markers go.
type line struct {
	name    string
	path    []pt
	markers []pt
}

// seriesLines turns a chart's series into points in data units.
func seriesLines(c Chart) ([]line, error) {
	if c.Kind != "" && c.Kind != "line" && c.Kind != "cdf" {
		return nil, fmt.Errorf("unknown kind %q", c.Kind)
	}
	lines := make([]line, 0, len(c.Series))
	for _, s := range c.Series {
		l := line{name: s.Name}
		switch c.Kind {
		case "", "line":
			if s.X != nil && len(s.X) != len(s.Y) {
				return nil, fmt.Errorf("series %q: %d x for %d y", s.Name, len(s.X), len(s.Y))
			}
			for i, y := range s.Y {
				x := float64(i)
				if s.X != nil {
					x = s.X[i]
				}
				if finite(x) && finite(y) && (!c.LogX || x > 0) {
					l.path = append(l.path, pt{x, y})
				}
			}
			l.markers = l.path
		case "cdf":
			l.path, l.markers = cdf(s.Y, c.LogX)
		}
		if len(l.markers) > markerMax {
			l.markers = nil
		}
		lines = append(lines, l)
	}
	return lines, nil
}

// cdf is the empirical distribution of samples as a staircase: at each
// sample's value the fraction of samples at or below it. Beyond cdfPoints
// samples it steps through evenly spaced ranks only; the last rank, at
// fraction 1, is always drawn.
func cdf(samples []float64, logX bool) (path, steps []pt) {
	s := make([]float64, 0, len(samples))
	for _, v := range samples {
		if finite(v) {
			s = append(s, v)
		}
	}
	slices.Sort(s)
	n := len(s)
	k := min(n, cdfPoints)
	prev := math.NaN() // fraction reached before the current step
	for i := 1; i <= k; i++ {
		rank := (i*n+k-1)/k - 1 // ceil(i*n/k) - 1: the last is n-1
		x, y := s[rank], float64(rank+1)/float64(n)
		if i < k && s[rank+1] == x {
			continue // equal samples make one step, up to the last of them
		}
		if logX && x <= 0 {
			prev = y
			continue
		}
		if math.IsNaN(prev) {
			prev = float64(rank) / float64(n)
		}
		path = append(path, pt{x, prev}, pt{x, y})
		steps = append(steps, pt{x, y})
		prev = y
	}
	return path, steps
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// axis maps data values to a fraction of the plot's width or height.
type axis struct {
	lo, hi float64
	log    bool
	ticks  []float64 // labelled, with a grid line
	minor  []float64 // log axes: 2..9 times each decade, unlabelled
	step   float64   // linear: the tick step, for the labels' decimals
}

func (a axis) frac(v float64) float64 {
	if a.log {
		return (math.Log10(v) - math.Log10(a.lo)) / (math.Log10(a.hi) - math.Log10(a.lo))
	}
	return (v - a.lo) / (a.hi - a.lo)
}

// linearAxis spans lo..hi with about 6 ticks at 1, 2 or 5 times a power
// of ten, the ends rounded out to ticks.
func linearAxis(lo, hi float64) axis {
	if hi <= lo {
		d := math.Abs(lo) / 10
		if d == 0 {
			d = 1
		}
		lo, hi = lo-d, hi+d
	}
	return stepAxis(lo, hi, niceNum((hi-lo)/5))
}

// stepAxis spans lo..hi (hi > lo) with ticks every step, the ends rounded
// out to ticks.
func stepAxis(lo, hi, step float64) axis {
	if hi <= lo {
		lo, hi = lo-step, hi+step
	}
	a := axis{lo: math.Floor(lo/step) * step, hi: math.Ceil(hi/step) * step, step: step}
	n := int(math.Round((a.hi - a.lo) / step))
	for i := 0; i <= n; i++ {
		a.ticks = append(a.ticks, a.lo+float64(i)*step)
	}
	return a
}

// niceNum rounds x to 1, 2 or 5 times a power of ten.
func niceNum(x float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(x)))
	switch f := x / p; {
	case f < 1.5:
		return p
	case f < 3:
		return 2 * p
	case f < 7:
		return 5 * p
	}
	return 10 * p
}

// logAxis spans whole decades around lo..hi (lo > 0), labelling at most
// about 8 of them.
func logAxis(lo, hi float64) axis {
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	a := axis{lo: math.Pow(10, dlo), hi: math.Pow(10, dhi), log: true}
	every := int(math.Ceil((dhi - dlo) / 8))
	for d := dlo; d <= dhi; d++ {
		p := math.Pow(10, d)
		if int(d-dlo)%every == 0 {
			a.ticks = append(a.ticks, p)
		}
		for m := 2.0; m <= 9 && d < dhi; m++ {
			a.minor = append(a.minor, m*p)
		}
	}
	return a
}

// label writes a tick value short: decimals as the step needs, thousands
// and up with k, M, G.
func (a axis) label(v float64) string {
	if v == 0 {
		return "0"
	}
	step := a.step
	if a.log {
		step = v
	}
	big := math.Max(math.Abs(a.lo), math.Abs(a.hi))
	if a.log {
		big = math.Abs(v)
	}
	suffix, div := "", 1.0
	for _, u := range []struct {
		s string
		d float64
	}{{"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"k", 1e3}} {
		// Linear axes keep plain figures up to 9999: "2500", not "2.5k".
		if big >= u.d && (a.log || big >= 1e4) {
			suffix, div = u.s, u.d
			break
		}
	}
	dec := max(0, -int(math.Floor(math.Log10(step/div)+1e-9)))
	return strconv.FormatFloat(v/div, 'f', dec, 64) + suffix
}

// renderSVG draws one chart.
func renderSVG(c Chart) ([]byte, error) {
	lines, err := seriesLines(c)
	if err != nil {
		return nil, err
	}
	xlo, xhi := math.Inf(1), math.Inf(-1)
	ylo, yhi := 0.0, 0.0 // line charts start at zero: an honest baseline
	empty, wholeX := true, c.Kind != "cdf"
	for _, l := range lines {
		for _, p := range l.path {
			empty = false
			wholeX = wholeX && p.x == math.Trunc(p.x)
			xlo, xhi = math.Min(xlo, p.x), math.Max(xhi, p.x)
			ylo, yhi = math.Min(ylo, p.y), math.Max(yhi, p.y)
		}
	}
	if empty {
		xlo, xhi, ylo, yhi = 1, 1, 0, 1
	}
	var xa, ya axis
	if c.LogX {
		xa = logAxis(xlo, xhi)
	} else {
		xa = linearAxis(xlo, xhi)
		if wholeX && xa.step < 1 {
			// Counts (workers, backends) get whole-number ticks.
			xa = stepAxis(xlo, xhi, 1)
		}
	}
	ylabel := c.YLabel
	if c.Kind == "cdf" {
		ya = linearAxis(0, 1)
		if ylabel == "" {
			ylabel = "fraction ≤ x"
		}
	} else {
		ya = linearAxis(ylo, yhi)
	}
	px := func(x float64) float64 { return plotLeft + xa.frac(x)*plotWidth }
	py := func(y float64) float64 { return plotTop + plotHeight - ya.frac(y)*plotHeight }

	legendW := 0
	for _, l := range lines {
		legendW = max(legendW, len([]rune(l.name)))
	}
	width := plotLeft + plotWidth + 40 + float64(legendW)*7 + 80

	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %[1]s %[2]s" font-family="sans-serif" font-size="12">
<rect width="100%%" height="100%%" fill="white"/>
`, num(width), num(svgHeight))
	fmt.Fprintf(&b, "<text x=\"%s\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">%s</text>\n", num(plotLeft+plotWidth/2), esc(c.Title))

	// Grid, ticks and their labels.
	b.WriteString(`<g class="grid" stroke="#e0e0e0">` + "\n")
	for _, t := range xa.ticks {
		fmt.Fprintf(&b, "<line x1=\"%s\" y1=\"%s\" x2=\"%[1]s\" y2=\"%s\"/>\n", num(px(t)), num(plotTop), num(plotTop+plotHeight))
	}
	for _, t := range ya.ticks {
		fmt.Fprintf(&b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%[2]s\"/>\n", num(plotLeft), num(py(t)), num(plotLeft+plotWidth))
	}
	b.WriteString("</g>\n<g class=\"axes\" stroke=\"#444\">\n")
	fmt.Fprintf(&b, "<rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\" fill=\"none\"/>\n", num(plotLeft), num(plotTop), num(plotWidth), num(plotHeight))
	bottom := plotTop + plotHeight
	for _, t := range xa.ticks {
		fmt.Fprintf(&b, "<line x1=\"%s\" y1=\"%s\" x2=\"%[1]s\" y2=\"%s\"/>\n", num(px(t)), num(bottom), num(bottom+6))
	}
	for _, t := range xa.minor {
		fmt.Fprintf(&b, "<line x1=\"%s\" y1=\"%s\" x2=\"%[1]s\" y2=\"%s\"/>\n", num(px(t)), num(bottom), num(bottom+3))
	}
	for _, t := range ya.ticks {
		fmt.Fprintf(&b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%[2]s\"/>\n", num(plotLeft-6), num(py(t)), num(plotLeft))
	}
	b.WriteString("</g>\n<g class=\"labels\" fill=\"#222\">\n")
	for _, t := range xa.ticks {
		fmt.Fprintf(&b, "<text x=\"%s\" y=\"%s\" text-anchor=\"middle\">%s</text>\n", num(px(t)), num(bottom+20), esc(xa.label(t)))
	}
	for _, t := range ya.ticks {
		fmt.Fprintf(&b, "<text x=\"%s\" y=\"%s\" text-anchor=\"end\">%s</text>\n", num(plotLeft-9), num(py(t)+4), esc(ya.label(t)))
	}
	fmt.Fprintf(&b, "<text x=\"%s\" y=\"%s\" text-anchor=\"middle\">%s</text>\n", num(plotLeft+plotWidth/2), num(bottom+44), esc(c.XLabel))
	fmt.Fprintf(&b, "<text transform=\"translate(20 %s) rotate(-90)\" text-anchor=\"middle\">%s</text>\n", num(plotTop+plotHeight/2), esc(ylabel))
	if empty {
		fmt.Fprintf(&b, "<text x=\"%s\" y=\"%s\" text-anchor=\"middle\" fill=\"#999\">no data</text>\n", num(plotLeft+plotWidth/2), num(plotTop+plotHeight/2))
	}
	b.WriteString("</g>\n")

	// Series, then the legend.
	for i, l := range lines {
		color := palette[i%len(palette)]
		fmt.Fprintf(&b, "<g class=\"series\" data-series=\"%s\" stroke=\"%s\" fill=\"%[2]s\">\n", esc(l.name), color)
		if len(l.path) > 0 {
			b.WriteString(`<polyline fill="none" stroke-width="1.8" points="`)
			for j, p := range l.path {
				if j > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(num(px(p.x)) + "," + num(py(p.y)))
			}
			b.WriteString("\"/>\n")
		}
		for _, p := range l.markers {
			marker(&b, i, px(p.x), py(p.y))
		}
		b.WriteString("</g>\n")
	}
	b.WriteString("<g class=\"legend\">\n")
	lx := plotLeft + plotWidth + 20
	for i, l := range lines {
		y := plotTop + 10 + float64(i)*20
		color := palette[i%len(palette)]
		name := l.name
		if len(l.path) == 0 {
			name += " (no data)"
		}
		fmt.Fprintf(&b, "<g stroke=\"%s\" fill=\"%[1]s\"><line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%[3]s\" stroke-width=\"1.8\"/>", color, num(lx), num(y), num(lx+24))
		marker(&b, i, lx+12, y)
		fmt.Fprintf(&b, "</g><text x=\"%s\" y=\"%s\" fill=\"#222\">%s</text>\n", num(lx+30), num(y+4), esc(name))
	}
	b.WriteString("</g>\n</svg>\n")
	return b.Bytes(), nil
}

// marker draws series i's point shape at x, y: shapes as well as colours
// tell series apart, also in print.
func marker(b *bytes.Buffer, i int, x, y float64) {
	const r = 3.5
	// Shapes cycle with a shift each round of colours, so that no two of
	// the first 32 series look alike.
	switch (i + i/len(palette)) % 4 {
	case 0:
		fmt.Fprintf(b, "<circle cx=\"%s\" cy=\"%s\" r=\"%s\"/>", num(x), num(y), num(r))
	case 1:
		fmt.Fprintf(b, "<rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%[3]s\"/>", num(x-r), num(y-r), num(2*r))
	case 2:
		fmt.Fprintf(b, "<polygon points=\"%s,%s %s,%s %s,%[4]s\"/>", num(x), num(y-r-1), num(x+r+0.5), num(y+r), num(x-r-0.5))
	default:
		fmt.Fprintf(b, "<polygon points=\"%s,%s %s,%s %[1]s,%s %s,%[4]s\"/>", num(x), num(y-r-1), num(x+r+1), num(y), num(y+r+1), num(x-r-1))
	}
	b.WriteByte('\n')
}

// num writes a coordinate with two decimals at most.
func num(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
