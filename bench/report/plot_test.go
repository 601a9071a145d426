package report

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"
)

// svgDoc is what the tests read back from a chart: its text and every
// path with its colours and vertices, in one frame (the SVG's own, y
// flipped: y grows upwards).
type svgDoc struct {
	text  []svgText
	paths []svgPath
}

type svgText struct {
	s       string
	x, y    float64
	rotated bool // the y axis' label
}

type svgPath struct {
	stroke, fill string       // #RRGGBB, "" where the style names none
	pts          []plotter.XY // the M and L vertices
	glyph        bool         // closed or made of arcs: a marker, not a line
}

var pathCmd = regexp.MustCompile(`([MLAZ])([^MLAZ]*)`)

// parseSVG decodes the whole file with encoding/xml, failing the test on
// malformed XML, on an element outside the SVG namespace or on a root
// that is not one SVG element with a size.
func parseSVG(t testing.TB, data []byte) svgDoc {
	t.Helper()
	var doc svgDoc
	d := xml.NewDecoder(bytes.NewReader(data))
	var groups []bool // per open element: whether it rotates
	roots := 0
	var text *svgText
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("invalid XML: %v\n%s", err, data)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			attr := map[string]string{}
			for _, a := range e.Attr {
				attr[a.Name.Local] = a.Value
			}
			if len(groups) == 0 {
				roots++
				vb := strings.Fields(attr["viewBox"])
				if e.Name.Local != "svg" || len(vb) != 4 ||
					!strings.HasSuffix(attr["width"], "pt") || !strings.HasSuffix(attr["height"], "pt") {
					t.Fatalf("root element %v %v is not an SVG with a size", e.Name, attr)
				}
			}
			if e.Name.Space != "http://www.w3.org/2000/svg" {
				t.Fatalf("element %v outside the SVG namespace", e.Name)
			}
			rotated := strings.Contains(attr["transform"], "rotate") || len(groups) > 0 && groups[len(groups)-1]
			groups = append(groups, rotated)
			switch e.Name.Local {
			case "text":
				x, err1 := strconv.ParseFloat(attr["x"], 64)
				y, err2 := strconv.ParseFloat(attr["y"], 64)
				if err1 != nil || err2 != nil || attr["transform"] != "scale(1, -1)" {
					t.Fatalf("text at %v", attr)
				}
				text = &svgText{x: x, y: -y, rotated: rotated}
			case "path":
				doc.paths = append(doc.paths, parsePath(t, attr["d"], attr["style"]))
			}
		case xml.EndElement:
			groups = groups[:len(groups)-1]
			if e.Name.Local == "text" && text != nil {
				text.s = strings.TrimSpace(text.s)
				doc.text = append(doc.text, *text)
				text = nil
			}
		case xml.CharData:
			if text != nil {
				text.s += string(e)
			}
		}
	}
	if roots != 1 {
		t.Fatalf("%d root elements", roots)
	}
	return doc
}

func (d svgDoc) strings() []string {
	var s []string
	for _, t := range d.text {
		s = append(s, t.s)
	}
	return s
}

func parsePath(t testing.TB, d, style string) svgPath {
	t.Helper()
	var p svgPath
	for _, kv := range strings.Split(style, ";") {
		k, v, _ := strings.Cut(kv, ":")
		switch k {
		case "stroke":
			p.stroke = v
		case "fill":
			p.fill = v
		}
	}
	for _, m := range pathCmd.FindAllStringSubmatch(d, -1) {
		switch m[1] {
		case "M", "L":
			xs, ys, _ := strings.Cut(m[2], ",")
			x, err1 := strconv.ParseFloat(xs, 64)
			y, err2 := strconv.ParseFloat(ys, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("bad path %q", d)
			}
			p.pts = append(p.pts, plotter.XY{X: x, Y: y})
		default:
			p.glyph = true
		}
	}
	return p
}

// axisScale reads one axis back: its major tick marks (black, 8 long)
// paired in order with its numeric labels, and returns the map from a
// value to its coordinate that they agree on.
func axisScale(t testing.TB, doc svgDoc, horizontal, logAxis bool) func(float64) float64 {
	t.Helper()
	name := "y"
	if horizontal {
		name = "x"
	}
	var marks []float64
	far := math.Inf(1) // the tick marks' outer end: the labels lie beyond it
	for _, p := range doc.paths {
		if p.stroke != "#000000" || p.glyph || len(p.pts) != 2 {
			continue
		}
		a, b := p.pts[0], p.pts[1]
		if along, across := math.Abs(a.X-b.X), math.Abs(a.Y-b.Y); horizontal {
			along, across = across, along
			if across == 0 && math.Abs(along-8) < 0.01 {
				marks, far = append(marks, a.X), math.Min(far, math.Min(a.Y, b.Y))
			}
		} else if across == 0 && math.Abs(along-8) < 0.01 {
			marks, far = append(marks, a.Y), math.Min(far, math.Min(a.X, b.X))
		}
	}
	type label struct{ at, v float64 }
	var labels []label
	for _, tx := range doc.text {
		pos, out := tx.y, tx.x
		if horizontal {
			pos, out = tx.x, tx.y
		}
		if tx.rotated || out >= far || tx.x > float64(plotWidth) {
			continue
		}
		num, mult := tx.s, 1.0
		for suffix, m := range map[string]float64{"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12} {
			if n, ok := strings.CutSuffix(num, suffix); ok {
				num, mult = n, m
			}
		}
		if v, err := strconv.ParseFloat(num, 64); err == nil {
			labels = append(labels, label{pos, v * mult})
		}
	}
	slices.Sort(marks)
	slices.SortFunc(labels, func(a, b label) int { return cmp.Compare(a.at, b.at) })
	if len(marks) < 2 || len(marks) != len(labels) {
		t.Fatalf("%s axis: %d tick marks %v, %d labels %v", name, len(marks), marks, len(labels), labels)
	}
	f := func(v float64) float64 {
		if logAxis {
			return math.Log10(v)
		}
		return v
	}
	lo, hi := labels[0].v, labels[len(labels)-1].v
	scale := func(v float64) float64 {
		return marks[0] + (f(v)-f(lo))/(f(hi)-f(lo))*(marks[len(marks)-1]-marks[0])
	}
	for i, l := range labels {
		if i > 0 && l.v <= labels[i-1].v {
			t.Errorf("%s axis: labels %v not increasing", name, labels)
		}
		if math.Abs(scale(l.v)-marks[i]) > 0.05 {
			t.Errorf("%s axis: tick %v at %v, not where the other ticks put it (%v)", name, l.v, marks[i], scale(l.v))
		}
	}
	return scale
}

func hex(i int) string {
	c := palette[i%len(palette)]
	return fmt.Sprintf("#%02X%02X%02X", c.R, c.G, c.B)
}

// want is what one series must look like: the points that must be drawn,
// in data units, and its markers.
type want struct {
	name    string
	pts     []plotter.XY
	markers int
}

// checkChart asserts the chart's title and axis labels are there, and for
// each series (told apart by colour) its legend entry, its markers and one
// line through exactly its points, each where the axes' tick labels put
// it, inside the plot area. It returns the text, for more checks.
func checkChart(t testing.TB, data []byte, title, xlabel, ylabel string, logX bool, series ...want) []string {
	t.Helper()
	doc := parseSVG(t, data)
	text := doc.strings()
	for _, s := range []string{title, xlabel, ylabel} {
		if s != "" && !slices.Contains(text, s) {
			t.Errorf("text %q missing from %q", s, text)
		}
	}
	sx, sy := axisScale(t, doc, true, logX), axisScale(t, doc, false, false)
	for i, w := range series {
		var lines [][]plotter.XY
		markers, legendMarkers, legendLines := 0, 0, 0
		for _, p := range doc.paths {
			if p.stroke != hex(i) && p.fill != hex(i) {
				continue
			}
			inLegend := len(p.pts) > 0 && p.pts[0].X > float64(plotWidth+legendGap/2)
			switch {
			case p.glyph && inLegend:
				legendMarkers++
			case p.glyph:
				markers++
			case inLegend:
				legendLines++
			default:
				lines = append(lines, p.pts)
			}
		}
		name := w.name
		if len(w.pts) == 0 {
			name += " (no data)"
		}
		if !slices.Contains(text, name) || legendLines != 1 || legendMarkers != min(w.markers, 1) {
			t.Errorf("series %q: legend text %v, %d lines, %d markers in the legend", name, slices.Contains(text, name), legendLines, legendMarkers)
		}
		if markers != w.markers {
			t.Errorf("series %q: %d markers, want %d", w.name, markers, w.markers)
		}
		if len(w.pts) == 0 {
			if len(lines) != 0 {
				t.Errorf("series %q: lines %v for no points", w.name, lines)
			}
			continue
		}
		if len(lines) != 1 || len(lines[0]) != len(w.pts) {
			t.Errorf("series %q: lines %v, want one of %d points", w.name, lines, len(w.pts))
			continue
		}
		for j, d := range w.pts {
			got, want := lines[0][j], plotter.XY{X: sx(d.X), Y: sy(d.Y)}
			if math.Abs(got.X-want.X) > 0.05 || math.Abs(got.Y-want.Y) > 0.05 ||
				got.X < 0 || got.X > float64(plotWidth) || got.Y < 0 || got.Y > float64(plotHeight) {
				t.Errorf("series %q: %v drawn at %v, want %v", w.name, d, got, want)
			}
		}
	}
	return text
}

func render(t *testing.T, c Chart) []byte {
	t.Helper()
	svg, err := renderSVG(c)
	if err != nil {
		t.Fatal(err)
	}
	return svg
}

func xys(v ...float64) []plotter.XY {
	var p []plotter.XY
	for i := 0; i+1 < len(v); i += 2 {
		p = append(p, plotter.XY{X: v[i], Y: v[i+1]})
	}
	return p
}

// TestPlotLine: every series is drawn through its finite points (the NaN
// left out), on shared axes that start at zero; a series of more than
// markerMax points has no markers; the tick labels are round.
func TestPlotLine(t *testing.T) {
	var long Series
	for i := range 100 {
		long.X, long.Y = append(long.X, float64(i)/10), append(long.Y, float64(i%7))
	}
	long.Name = "long"
	c := Chart{Title: "the title", XLabel: "the x", YLabel: "the y", Series: []Series{
		{Name: "a", X: []float64{0, 5, 10}, Y: []float64{0, 50, 100}},
		{Name: "b", X: []float64{2, 4, 8}, Y: []float64{20, math.NaN(), 80}},
		{Name: "no x", Y: []float64{30, 40}},
		long,
	}}
	var longPts []plotter.XY
	for i := range long.X {
		longPts = append(longPts, plotter.XY{X: long.X[i], Y: long.Y[i]})
	}
	text := checkChart(t, render(t, c), "the title", "the x", "the y", false,
		want{"a", xys(0, 0, 5, 50, 10, 100), 3},
		want{"b", xys(2, 20, 8, 80), 2},
		want{"no x", xys(0, 30, 1, 40), 2},
		want{"long", longPts, 0})
	for _, l := range []string{"0", "2", "10", "20", "100"} {
		if !slices.Contains(text, l) {
			t.Errorf("tick label %q missing from %q", l, text)
		}
	}
}

// TestPlotDropsNothing: the check above fails when a series is not drawn:
// a chart of two series read as one of three, or with a point too few.
func TestPlotDropsNothing(t *testing.T) {
	svg := render(t, Chart{Series: []Series{{Name: "a", Y: []float64{1, 2}}, {Name: "b", Y: []float64{3, 4, 5}}}})
	a, b := want{"a", xys(0, 1, 1, 2), 2}, want{"b", xys(0, 3, 1, 4, 2, 5), 3}
	check := func(series ...want) bool {
		r := &recorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			checkChart(r, svg, "", "", "", false, series...)
		}()
		<-done
		return r.failed
	}
	if check(a, b) {
		t.Fatal("the chart as drawn fails the check")
	}
	if !check(a, b, want{"c", xys(0, 5, 1, 6), 2}) {
		t.Error("a missing series passed the check")
	}
	if !check(a, want{"b", xys(0, 3, 1, 4, 2, 5, 3, 6), 4}) {
		t.Error("a missing point passed the check")
	}
	if !check(a, want{"b", xys(0, 3, 1, 4, 2, 6), 3}) {
		t.Error("a point out of place passed the check")
	}
}

// recorder is a testing.TB that notes failures instead of reporting them.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }

// TestPlotWholeX: an x axis of counts (workers 1 and 2) is labelled with
// whole numbers only.
func TestPlotWholeX(t *testing.T) {
	text := checkChart(t, render(t, Chart{Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{0, 10}}}}),
		"", "", "", false, want{"a", xys(1, 0, 2, 10), 2})
	for _, l := range []string{"1", "2"} {
		if !slices.Contains(text, l) {
			t.Errorf("tick label %q missing from %q", l, text)
		}
	}
	for _, l := range []string{"1.2", "1.5", "1.0"} {
		if slices.Contains(text, l) {
			t.Errorf("tick label %q on an axis of whole numbers: %q", l, text)
		}
	}
}

// TestPlotLogX: on a log axis each decade takes the same width, points at
// or below zero are skipped, and the decades are labelled.
func TestPlotLogX(t *testing.T) {
	text := checkChart(t, render(t, Chart{LogX: true, Series: []Series{
		{Name: "a", X: []float64{0, 1, 10, 100, 1000}, Y: []float64{9, 1, 2, 3, 4}},
	}}), "", "", "", true, want{"a", xys(1, 1, 10, 2, 100, 3, 1000, 4), 4})
	for _, l := range []string{"1", "10", "100", "1k"} {
		if !slices.Contains(text, l) {
			t.Errorf("tick label %q missing from %q", l, text)
		}
	}
}

// TestPlotCDF: the empirical CDF of [3 1 2 2] is a staircase up to 1 at
// the largest sample, with a marker at each step; the y axis has its
// default label.
func TestPlotCDF(t *testing.T) {
	checkChart(t, render(t, Chart{Kind: "cdf", Title: "lat", XLabel: "µs", Series: []Series{{Name: "lat", Y: []float64{3, 1, 2, 2}}}}),
		"lat", "µs", "fraction ≤ x", false,
		want{"lat", xys(1, 0, 1, 0.25, 2, 0.25, 2, 0.75, 3, 0.75, 3, 1), 3})
}

// TestPlotCDFLarge: many samples (and NaNs, left out) are drawn with at
// most cdfPoints steps, the last at fraction 1, and x never decreasing.
func TestPlotCDFLarge(t *testing.T) {
	s := make([]float64, 100_003)
	for i := range s {
		s[i] = float64((i * 7919) % len(s)) // a permutation of 0..n-1
	}
	s = append(s, math.NaN(), math.Inf(1))
	path, steps := cdf(s, false)
	if len(steps) == 0 || len(steps) > cdfPoints || len(path) != 2*len(steps) {
		t.Fatalf("%d steps, %d path points", len(steps), len(path))
	}
	if last := path[len(path)-1]; last.Y != 1 || last.X != 100_002 {
		t.Errorf("last point %v, want (100002, 1)", last)
	}
	for i := 1; i < len(path); i++ {
		if path[i].X < path[i-1].X || path[i].Y < path[i-1].Y {
			t.Fatalf("not monotone at %d: %v then %v", i, path[i-1], path[i])
		}
	}
	// Drawn: the whole staircase, no markers (too many).
	checkChart(t, render(t, Chart{Kind: "cdf", LogX: true, Series: []Series{{Name: "big", Y: s}}}),
		"", "", "", true, want{"big", slices.DeleteFunc(slices.Clone(path), func(p plotter.XY) bool { return p.X <= 0 }), 0})
	// On a log axis the zero is not drawn but still counted.
	path, _ = cdf([]float64{0, 10}, true)
	if len(path) != 2 || path[0] != (plotter.XY{X: 10, Y: 0.5}) || path[1] != (plotter.XY{X: 10, Y: 1}) {
		t.Errorf("log cdf %v", path)
	}
}

func TestTicks(t *testing.T) {
	for _, c := range []struct {
		t      ticks
		lo, hi float64
		want   string
	}{
		{ticks{}, 0, 7.3, "0 1 2 3 4 5 6 7 8"},
		{ticks{}, 0, 1, "0.0 0.2 0.4 0.6 0.8 1.0"},
		{ticks{}, -0.3, 0.25, "-0.3 -0.2 -0.1 0.0 0.1 0.2 0.3"},
		{ticks{}, 0, 100_000, "0 20k 40k 60k 80k 100k"},
		{ticks{}, 1_200_000, 3_100_000, "1M 1.5M 2M 2.5M 3M 3.5M"},
		{ticks{}, 0, 2500, "0 500 1000 1500 2000 2500"},
		{ticks{}, 4, 6, "4.0 4.5 5.0 5.5 6.0"},
		{ticks{whole: true}, 1, 2, "1 2"},
		{ticks{whole: true}, 1, 3, "1 2 3"},
		{ticks{log: true}, 0.1, 10_000, "0.1 1 10 100 1k 10k"},
		{ticks{log: true}, 1, 1e8, "1 10 100 1k 10k 100k 1M 10M 100M"},
	} {
		var labels []string
		for _, k := range c.t.Ticks(c.lo, c.hi) {
			if !k.IsMinor() {
				labels = append(labels, k.Label)
			}
		}
		if got := strings.Join(labels, " "); got != c.want {
			t.Errorf("%+v over %v..%v: ticks %q, want %q", c.t, c.lo, c.hi, got, c.want)
		}
	}
}

// TestPlotFiles: Plot writes one well-formed file per chart into a folder
// it creates, escapes text, draws empty and all-NaN charts with "no
// data", and names the charts it could not draw while writing the rest.
func TestPlotFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "charts")
	r := Report{Charts: []Chart{
		{File: "mpps", Title: `Mpps <&> "quoted"`, XLabel: "workers", YLabel: "Mpps", Series: []Series{
			{Name: "xlb <1>", X: []float64{1, 2}, Y: []float64{10, 19}},
			{Name: "empty"},
		}},
		{File: "nan", Kind: "cdf", LogX: true, Series: []Series{{Name: "n", Y: []float64{math.NaN(), -1}}}},
		{File: "mismatch", Series: []Series{{Name: "m", X: []float64{1}, Y: []float64{1, 2}}}},
		{File: "kind", Kind: "pie"},
		{File: "../escape"},
	}}
	files, err := Plot(dir, r)
	if err == nil {
		t.Fatal("no error for the bad charts")
	}
	for _, s := range []string{"mismatch", "kind", "escape"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %q", err, s)
		}
	}
	want0 := []string{filepath.Join(dir, "mpps.svg"), filepath.Join(dir, "nan.svg")}
	if !slices.Equal(files, want0) {
		t.Fatalf("files %v, want %v", files, want0)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	// A line chart's y axis starts at zero, an honest baseline.
	text := checkChart(t, data, `Mpps <&> "quoted"`, "workers", "Mpps", false,
		want{"xlb <1>", xys(1, 10, 2, 19), 2}, want{"empty", nil, 0})
	if !slices.Contains(text, "0") {
		t.Errorf("no 0 on the y axis: %q", text)
	}
	data, err = os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	if text := checkChart(t, data, "", "", "fraction ≤ x", true, want{"n", nil, 0}); !slices.Contains(text, "no data") {
		t.Errorf("all-NaN chart: text %q", text)
	}
	if files, err := Plot(dir, Report{}); files != nil || err != nil {
		t.Errorf("no charts: %v, %v", files, err)
	}
}
