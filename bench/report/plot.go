package report

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Plot writes one SVG per chart of r into dir (created if missing) and
// returns the paths it wrote; gonum.org/v1/plot draws them. A chart that
// cannot be drawn (bad file name, unknown kind, X and Y of different
// lengths) is left out and named in the error; the others are still
// written. Points that are not finite, or not positive on a log axis, are
// skipped.
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

const (
	// A chart's size in points (1/72 inch), axes and title included; the
	// legend comes on its right, with a gap either side.
	plotWidth, plotHeight = vg.Length(540), vg.Length(340)
	legendGap             = vg.Length(16)
	// cdfPoints bounds the steps drawn per CDF: a million latency samples
	// would otherwise make a file of megabytes that looks the same.
	cdfPoints = 400
	// markerMax: beyond this many points per series markers are clutter.
	markerMax = 60
)

// Okabe–Ito colours, told apart also by most colour-blind readers; shapes
// as well as colours tell series apart, also in print.
var (
	palette = []color.RGBA{
		{0x00, 0x72, 0xB2, 0xFF}, {0xD5, 0x5E, 0x00, 0xFF}, {0x00, 0x9E, 0x73, 0xFF}, {0xCC, 0x79, 0xA7, 0xFF},
		{0xE6, 0x9F, 0x00, 0xFF}, {0x56, 0xB4, 0xE9, 0xFF}, {0x00, 0x00, 0x00, 0xFF}, {0x99, 0x99, 0x99, 0xFF},
	}
	shapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}, draw.RingGlyph{}}
)

// line is one series ready to draw: the polyline and where its markers go,
// in data units.
type line struct {
	name          string
	path, markers plotter.XYs
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
					l.path = append(l.path, plotter.XY{X: x, Y: y})
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
func cdf(samples []float64, logX bool) (path, steps plotter.XYs) {
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
		path = append(path, plotter.XY{X: x, Y: prev}, plotter.XY{X: x, Y: y})
		steps = append(steps, plotter.XY{X: x, Y: y})
		prev = y
	}
	return path, steps
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// renderSVG draws one chart: the plot on the left, the legend on its
// right, where it hides no line.
func renderSVG(c Chart) ([]byte, error) {
	lines, err := seriesLines(c)
	if err != nil {
		return nil, err
	}
	p := plot.New()
	p.Title.Text, p.Title.Padding = c.Title, 8
	p.X.Label.Text, p.Y.Label.Text = c.XLabel, c.YLabel
	if c.Kind == "cdf" && c.YLabel == "" {
		p.Y.Label.Text = "fraction ≤ x"
	}
	grid := plotter.NewGrid()
	grid.Vertical.Color, grid.Horizontal.Color = color.Gray{0xE0}, color.Gray{0xE0}
	p.Add(grid)
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	empty, wholeX := true, c.Kind != "cdf"
	for i, l := range lines {
		sty := draw.LineStyle{Color: palette[i%len(palette)], Width: 1.5}
		ln := &plotter.Line{XYs: l.path, LineStyle: sty}
		thumbs := []plot.Thumbnailer{ln}
		name := l.name
		if len(l.path) == 0 {
			name += " (no data)"
		} else {
			p.Add(ln)
		}
		for _, xy := range l.path {
			empty, wholeX = false, wholeX && xy.X == math.Trunc(xy.X)
		}
		if len(l.markers) > 0 {
			// Shapes cycle with a shift each round of colours, so that no
			// two of the first 32 series look alike.
			sc := &plotter.Scatter{XYs: l.markers, GlyphStyle: draw.GlyphStyle{
				Color: sty.Color, Radius: 3, Shape: shapes[(i+i/len(palette))%len(shapes)]}}
			p.Add(sc)
			thumbs = append(thumbs, sc)
		}
		legend.Add(name, thumbs...)
	}

	// Line charts start at zero, an honest baseline; a log axis spans
	// whole decades, with a label at each end.
	if c.Kind == "cdf" || empty {
		p.Y.Min, p.Y.Max = 0, 1
	} else {
		p.Y.Min = math.Min(p.Y.Min, 0)
	}
	if empty {
		p.X.Min, p.X.Max = 1, 10
		if !c.LogX {
			p.X.Min = 0
		}
		mid := (p.X.Min + p.X.Max) / 2
		if c.LogX {
			mid = math.Sqrt(p.X.Min * p.X.Max)
		}
		lb, _ := plotter.NewLabels(plotter.XYLabels{XYs: []plotter.XY{{X: mid, Y: 0.5}}, Labels: []string{"no data"}})
		lb.TextStyle[0].XAlign, lb.TextStyle[0].YAlign = draw.XCenter, draw.YCenter
		lb.TextStyle[0].Color, lb.TextStyle[0].Font.Variant = color.Gray{0x99}, "Sans"
		p.Add(lb)
	}
	if c.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Min = math.Pow(10, decade(p.X.Min, math.Floor))
		p.X.Max = math.Max(math.Pow(10, decade(p.X.Max, math.Ceil)), 10*p.X.Min)
	}
	p.X.Tick.Marker, p.X.AutoRescale = ticks{log: c.LogX, whole: wholeX}, true
	p.Y.Tick.Marker, p.Y.AutoRescale = ticks{}, true
	p.X.Padding, p.Y.Padding = 0, 0
	for _, s := range []struct {
		sty  *text.Style
		size vg.Length
	}{{&p.Title.TextStyle, 13}, {&p.X.Label.TextStyle, 11}, {&p.Y.Label.TextStyle, 11},
		{&p.X.Tick.Label, 10}, {&p.Y.Tick.Label, 10}, {&legend.TextStyle, 10}} {
		s.sty.Font.Variant, s.sty.Font.Size = "Sans", s.size
	}
	legend.Padding = 4

	// Room for the legend: a viewer may set it in a wider font.
	r := legend.Rectangle(draw.Canvas{})
	legendW := (r.Max.X - r.Min.X) * 1.15
	cv := vgsvg.New(plotWidth+legendGap+legendW+legendGap, plotHeight)
	dc := draw.New(cv)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	// A margin left and below for the same reason.
	p.Draw(draw.Crop(dc, 8, -(legendGap + legendW + legendGap), 4, 0))
	// The legend's top is level with the plot area's.
	titleH := vg.Length(0)
	if c.Title != "" {
		titleH = p.Title.TextStyle.Rectangle(c.Title).Size().Y + p.Title.Padding
	}
	legend.Draw(draw.Crop(dc, plotWidth+legendGap, -legendGap, 0, -titleH))

	var b bytes.Buffer
	if _, err := cv.WriteTo(&b); err != nil {
		return nil, err
	}
	// Liberation Sans has Arial's metrics: a viewer without it lays the
	// text out the same in Arial or its own sans-serif.
	return bytes.ReplaceAll(b.Bytes(), []byte("font-family:Liberation Sans;"),
		[]byte("font-family:Liberation Sans,Arial,sans-serif;")), nil
}

// ticks marks an axis: decades on a log axis (gonum's), on a linear one
// about six steps of 1, 2 or 5 times a power of ten, whole numbers only on
// an axis of counts (workers, backends); large values are written short,
// 20k or 1.5M. With the axis' AutoRescale the ends round out to ticks.
type ticks struct{ log, whole bool }

func (t ticks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	if t.log {
		// Decades labelled, 2..9 times each unlabelled.
		for d := decade(lo, math.Floor); d <= decade(hi, math.Ceil); d++ {
			v := math.Pow(10, d)
			ts = append(ts, plot.Tick{Value: v, Label: short(v)})
			for m := 2.0; m <= 9 && m*v <= hi; m++ {
				ts = append(ts, plot.Tick{Value: m * v})
			}
		}
		return ts
	}
	step := niceNum((hi - lo) / 5)
	if t.whole {
		step = math.Max(step, 1)
	}
	first, n := math.Floor(lo/step), math.Ceil(hi/step)-math.Floor(lo/step)
	dec := max(0, -int(math.Floor(math.Log10(step)+1e-9)))
	for i := 0.0; i <= n; i++ {
		v := (first + i) * step
		l := strconv.FormatFloat(v, 'f', dec, 64)
		if math.Max(math.Abs(lo), math.Abs(hi)) >= 1e4 {
			l = short(v)
		}
		ts = append(ts, plot.Tick{Value: v, Label: l})
	}
	return ts
}

// decade is log10 v rounded down or up, but exact where v is a power of
// ten: math.Log10(0.1) is a little more than -1.
func decade(v float64, round func(float64) float64) float64 {
	l := math.Log10(v)
	if r := math.Round(l); math.Abs(l-r) < 1e-9 {
		return r
	}
	return round(l)
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

// short writes v with k, M, G or T for thousands and up, at most three
// decimals.
func short(v float64) string {
	for _, u := range []struct {
		s string
		d float64
	}{{"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"k", 1e3}} {
		if math.Abs(v) >= u.d {
			return strconv.FormatFloat(math.Round(v/u.d*1e3)/1e3, 'f', -1, 64) + u.s
		}
	}
	return strconv.FormatFloat(math.Round(v*1e3)/1e3, 'f', -1, 64)
}
