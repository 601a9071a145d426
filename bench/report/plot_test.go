package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// parsed is what the tests read back from an SVG: each series' polyline
// points in pixels and marker count, and all the text.
type parsed struct {
	lines   map[string][]pt
	markers map[string]int
	text    []string
}

// parseSVG decodes the whole file with encoding/xml, failing the test on
// any malformed XML.
func parseSVG(t *testing.T, data []byte) parsed {
	t.Helper()
	p := parsed{lines: map[string][]pt{}, markers: map[string]int{}}
	d := xml.NewDecoder(bytes.NewReader(data))
	series := ""
	depth, seriesDepth := 0, -1
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
			depth++
			attr := func(name string) string {
				for _, a := range e.Attr {
					if a.Name.Local == name {
						return a.Value
					}
				}
				return ""
			}
			switch {
			case e.Name.Local == "g" && attr("class") == "series":
				series, seriesDepth = attr("data-series"), depth
			case series != "" && e.Name.Local == "polyline":
				for _, xy := range strings.Fields(attr("points")) {
					xs, ys, _ := strings.Cut(xy, ",")
					x, err1 := strconv.ParseFloat(xs, 64)
					y, err2 := strconv.ParseFloat(ys, 64)
					if err1 != nil || err2 != nil {
						t.Fatalf("bad point %q", xy)
					}
					p.lines[series] = append(p.lines[series], pt{x, y})
				}
			case series != "":
				p.markers[series]++
			}
		case xml.EndElement:
			if depth == seriesDepth {
				series, seriesDepth = "", -1
			}
			depth--
		case xml.CharData:
			if s := strings.TrimSpace(string(e)); s != "" {
				p.text = append(p.text, s)
			}
		}
	}
	return p
}

func render(t *testing.T, c Chart) parsed {
	t.Helper()
	svg, err := renderSVG(c)
	if err != nil {
		t.Fatal(err)
	}
	return parseSVG(t, svg)
}

func samePoints(t *testing.T, name string, got, want []pt) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d points %v, want %v", name, len(got), got, want)
	}
	for i := range got {
		if math.Abs(got[i].x-want[i].x) > 0.01 || math.Abs(got[i].y-want[i].y) > 0.01 {
			t.Errorf("%s: point %d at %v, want %v", name, i, got[i], want[i])
		}
	}
}

// The plot area's corners, for the expected coordinates below.
const (
	left, right = plotLeft, plotLeft + plotWidth
	top, bottom = plotTop, plotTop + plotHeight
)

// TestPlotLinePixels: a known series lands where the axes say: x 0..10
// and y 0..100 are nice ranges already, so the ends are the plot area's
// corners and the middle point its centre. A second series on the same
// axes, and the NaN point skipped.
func TestPlotLinePixels(t *testing.T) {
	p := render(t, Chart{Title: "t", Series: []Series{
		{Name: "a", X: []float64{0, 5, 10}, Y: []float64{0, 50, 100}},
		{Name: "b", X: []float64{2, 4, 8}, Y: []float64{20, math.NaN(), 80}},
	}})
	midX, midY := (left+right)/2, (top+bottom)/2
	samePoints(t, "a", p.lines["a"], []pt{{left, bottom}, {midX, midY}, {right, top}})
	samePoints(t, "b", p.lines["b"], []pt{{left + 0.2*plotWidth, bottom - 0.2*plotHeight}, {left + 0.8*plotWidth, bottom - 0.8*plotHeight}})
	if p.markers["a"] != 3 || p.markers["b"] != 2 {
		t.Errorf("markers %v, want one per drawn point", p.markers)
	}
	for _, l := range []string{"0", "2", "10", "20", "100"} {
		if !contains(p.text, l) {
			t.Errorf("tick label %q missing from %v", l, p.text)
		}
	}
}

// TestPlotWholeX: an x axis of counts (workers 1 and 2) is labelled with
// whole numbers only, its ends at the plot's edges.
func TestPlotWholeX(t *testing.T) {
	p := render(t, Chart{Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{0, 10}}}})
	samePoints(t, "a", p.lines["a"], []pt{{left, bottom}, {right, top}})
	for _, l := range []string{"1.2", "1.5", "1.0"} {
		if contains(p.text, l) {
			t.Errorf("tick label %q on an axis of whole numbers: %v", l, p.text)
		}
	}
}

// TestPlotLogX: on a log axis each decade takes the same width, and points
// at or below zero are skipped.
func TestPlotLogX(t *testing.T) {
	p := render(t, Chart{LogX: true, Series: []Series{
		{Name: "a", X: []float64{0, 1, 10, 100}, Y: []float64{9, 1, 2, 3}},
	}})
	samePoints(t, "a", p.lines["a"], []pt{
		{left, bottom - plotHeight/3},
		{(left + right) / 2, bottom - 2*plotHeight/3},
		{right, top},
	})
}

// TestPlotCDF: the empirical CDF of [3 1 2 2] is a staircase up to 1 at
// the largest sample; the x axis 1..3 spans the plot.
func TestPlotCDF(t *testing.T) {
	p := render(t, Chart{Kind: "cdf", Series: []Series{{Name: "lat", Y: []float64{3, 1, 2, 2}}}})
	y := func(f float64) float64 { return bottom - f*plotHeight }
	mid := (left + right) / 2
	samePoints(t, "lat", p.lines["lat"], []pt{
		{left, y(0)}, {left, y(0.25)},
		{mid, y(0.25)}, {mid, y(0.75)},
		{right, y(0.75)}, {right, y(1)},
	})
	if !contains(p.text, "fraction ≤ x") {
		t.Errorf("default y label missing: %v", p.text)
	}
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
	if last := path[len(path)-1]; last.y != 1 || last.x != 100_002 {
		t.Errorf("last point %v, want (100002, 1)", last)
	}
	for i := 1; i < len(path); i++ {
		if path[i].x < path[i-1].x || path[i].y < path[i-1].y {
			t.Fatalf("not monotone at %d: %v then %v", i, path[i-1], path[i])
		}
	}
	// On a log axis the zero is not drawn but still counted.
	path, _ = cdf([]float64{0, 10}, true)
	if len(path) != 2 || path[0] != (pt{10, 0.5}) || path[1] != (pt{10, 1}) {
		t.Errorf("log cdf %v", path)
	}
}

func TestAxes(t *testing.T) {
	labels := func(a axis) string {
		var s []string
		for _, v := range a.ticks {
			s = append(s, a.label(v))
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct {
		a    axis
		want string
	}{
		{linearAxis(0, 7.3), "0 1 2 3 4 5 6 7 8"},
		{linearAxis(0, 1), "0 0.2 0.4 0.6 0.8 1.0"},
		{linearAxis(-0.3, 0.25), "-0.3 -0.2 -0.1 0 0.1 0.2 0.3"},
		{linearAxis(0, 100_000), "0 20k 40k 60k 80k 100k"},
		{linearAxis(1_200_000, 3_100_000), "1.0M 1.5M 2.0M 2.5M 3.0M 3.5M"},
		{linearAxis(0, 2500), "0 500 1000 1500 2000 2500"},
		{linearAxis(5, 5), "4.4 4.6 4.8 5.0 5.2 5.4 5.6"},
		{stepAxis(1, 2, 1), "1 2"},
		{stepAxis(2, 2, 1), "1 2 3"},
		{logAxis(0.5, 2000), "0.1 1 10 100 1k 10k"},
		{logAxis(3, 8), "1 10"},
		{logAxis(1, 1e8), "1 10 100 1k 10k 100k 1M 10M 100M"},
		// Beyond 8 decades only every other (third...) is labelled.
		{logAxis(1, 1e12), "1 100 10k 1M 100M 10G 1T"},
	} {
		if got := labels(c.a); got != c.want {
			t.Errorf("ticks %q, want %q", got, c.want)
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
	want := []string{filepath.Join(dir, "mpps.svg"), filepath.Join(dir, "nan.svg")}
	if strings.Join(files, ",") != strings.Join(want, ",") {
		t.Fatalf("files %v, want %v", files, want)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	p := parseSVG(t, data)
	for _, s := range []string{`Mpps <&> "quoted"`, "xlb <1>", "empty (no data)", "workers", "Mpps"} {
		if !contains(p.text, s) {
			t.Errorf("text %q missing from %v", s, p.text)
		}
	}
	if len(p.lines["xlb <1>"]) != 2 {
		t.Errorf("series lines %v", p.lines)
	}
	data, err = os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	if p := parseSVG(t, data); !contains(p.text, "no data") || len(p.lines) != 0 {
		t.Errorf("all-NaN chart: text %v, lines %v", p.text, p.lines)
	}
	if files, err := Plot(dir, Report{}); files != nil || err != nil {
		t.Errorf("no charts: %v, %v", files, err)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
