// Package report is what every lbbench command produces and how it is
// shown: readable tables on the terminal, JSON for machines, SVG charts for
// a folder (drawn with gonum.org/v1/plot, which only lbbench links), and a
// progress bar on stderr for long runs. Commands fill a Report; they never
// print on their own.
package report

import "time"

// Report is one lbbench command's result.
type Report struct {
	Command string    `json:"command"` // core, xdp, maglev
	Started time.Time `json:"started"`
	Machine Machine   `json:"machine"`
	// Tables are printed in order; each also goes into the JSON.
	Tables []Table `json:"tables"`
	// Charts are drawn by --plot DIR, one SVG file per chart.
	Charts []Chart `json:"charts,omitempty"`
	// Targets compares figures with our targets (met or not;
	// docs/performance-targets.md lists them).
	Targets []Target `json:"targets,omitempty"`
	// Notes are free lines printed after the tables (where the time goes,
	// what was skipped and why).
	Notes []string `json:"notes,omitempty"`
	// Data is the command's own structured result for --json.
	Data any `json:"data,omitempty"`
}

// Machine says where the figures come from.
type Machine struct {
	CPU       string `json:"cpu"`
	Cores     int    `json:"cores"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	Hostname  string `json:"hostname"`
}

// Table is a titled grid of cells; Columns name them.
type Table struct {
	Title   string     `json:"title"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Chart is one SVG: lines (Kind "line") or cumulative distributions
// (Kind "cdf", each series' Y being the samples, in any order, and X
// unused).
type Chart struct {
	File   string   `json:"file"` // base name without .svg
	Title  string   `json:"title"`
	Kind   string   `json:"kind"` // line, cdf
	XLabel string   `json:"x_label"`
	YLabel string   `json:"y_label"`
	LogX   bool     `json:"log_x,omitempty"`
	Series []Series `json:"series"`
}

// Series is one line of a chart. A line chart's series without X is drawn
// at x = 0, 1, 2...
type Series struct {
	Name string    `json:"name"`
	X    []float64 `json:"x,omitempty"`
	Y    []float64 `json:"y"`
}

// Target is one of our targets next to the measured figure.
type Target struct {
	Name     string  `json:"name"`     // "engine ns/pkt, established, 1M flows"
	Want     string  `json:"want"`     // "<= 60"
	Measured float64 `json:"measured"` // the figure
	Unit     string  `json:"unit"`
	Met      bool    `json:"met"`
}
