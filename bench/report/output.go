package report

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ThisMachine describes the machine the process runs on.
func ThisMachine() Machine {
	h, _ := os.Hostname()
	return Machine{
		CPU:       cpuModel(),
		Cores:     runtime.NumCPU(),
		Kernel:    kernelRelease(),
		GoVersion: runtime.Version(),
		Hostname:  h,
	}
}

// cpuModel is the first "model name" of /proc/cpuinfo; some arm64 kernels
// have none, and then the architecture is all we say.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "model name" {
				if v = strings.TrimSpace(v); v != "" {
					return v
				}
			}
		}
	}
	return runtime.GOARCH
}

// String is the machine on one line.
func (m Machine) String() string {
	parts := []string{}
	add := func(s string) {
		if s != "" {
			parts = append(parts, s)
		}
	}
	add(m.CPU)
	if m.Cores > 0 {
		add(fmt.Sprintf("%d cores", m.Cores))
	}
	if m.Kernel != "" {
		add("kernel " + m.Kernel)
	}
	add(m.GoVersion)
	if m.Hostname != "" {
		add("host " + m.Hostname)
	}
	return strings.Join(parts, ", ")
}

// Print writes r as readable text: a header, the tables, the targets and
// the notes. Numbers are right-aligned so that columns of figures compare
// at a glance.
func Print(w io.Writer, r Report) {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	head := "lbbench " + r.Command
	if !r.Started.IsZero() {
		head += "  " + r.Started.Format("2006-01-02 15:04:05 MST")
	}
	fmt.Fprintln(bw, head)
	if m := r.Machine.String(); m != "" {
		fmt.Fprintln(bw, "machine: "+m)
	}
	for _, t := range r.Tables {
		fmt.Fprintln(bw)
		printTable(bw, t)
	}
	if len(r.Targets) > 0 {
		t := Table{Title: "Targets", Columns: []string{"target", "want", "measured", "result"}}
		for _, g := range r.Targets {
			res := "MISSED"
			if g.Met {
				res = "met"
			}
			t.Rows = append(t.Rows, []string{g.Name, g.Want, strings.TrimSpace(G(g.Measured) + " " + g.Unit), res})
		}
		fmt.Fprintln(bw)
		printTable(bw, t)
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(bw)
		fmt.Fprintln(bw, "Notes")
		for _, n := range r.Notes {
			fmt.Fprintln(bw, "  - "+n)
		}
	}
}

// printTable writes t's title and its grid, indented by two spaces,
// columns two spaces apart.
func printTable(w io.Writer, t Table) {
	if t.Title != "" {
		fmt.Fprintln(w, t.Title)
	}
	ncol := len(t.Columns)
	for _, row := range t.Rows {
		ncol = max(ncol, len(row))
	}
	cell := func(row []string, j int) string {
		if j < len(row) {
			return row[j]
		}
		return ""
	}
	width := make([]int, ncol)
	numCol := make([]bool, ncol)
	for j := range ncol {
		width[j] = utf8.RuneCountInString(cell(t.Columns, j))
		figures, others := 0, 0
		for _, row := range t.Rows {
			c := cell(row, j)
			width[j] = max(width[j], utf8.RuneCountInString(c))
			switch {
			case isNumeric(c):
				figures++
			case !isPlaceholder(c):
				others++
			}
		}
		numCol[j] = figures > 0 && others == 0
	}
	line := func(cells []string, right func(j int, c string) bool) {
		var b strings.Builder
		b.WriteString("  ")
		for j := range ncol {
			c := cell(cells, j)
			pad := strings.Repeat(" ", width[j]-utf8.RuneCountInString(c))
			if j > 0 {
				b.WriteString("  ")
			}
			if right(j, c) {
				b.WriteString(pad + c)
			} else {
				b.WriteString(c + pad)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	if len(t.Columns) > 0 {
		line(t.Columns, func(j int, _ string) bool { return numCol[j] })
		rule := make([]string, ncol)
		for j := range rule {
			rule[j] = strings.Repeat("-", width[j])
		}
		line(rule, func(int, string) bool { return false })
	}
	for _, row := range t.Rows {
		line(row, func(j int, c string) bool { return numCol[j] || isNumeric(c) })
	}
}

// isNumeric says whether a cell starts with a number ("12.5", "-3",
// "1.52x", "97%", "40 ns"): such cells are right-aligned.
func isNumeric(s string) bool {
	s = strings.TrimLeft(s, "+-")
	s = strings.TrimPrefix(s, ".")
	return s != "" && s[0] >= '0' && s[0] <= '9'
}

// isPlaceholder is a cell that stands for a missing figure.
func isPlaceholder(s string) bool {
	switch strings.TrimSpace(s) {
	case "", "-", "—", "n/a":
		return true
	}
	return false
}

// F formats v with prec decimals; NaN (no figure) is "-".
func F(v float64, prec int) string {
	if s, ok := special(v); ok {
		return s
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// G formats v with about three significant digits and no exponent: 1234,
// 123, 12.3, 1.23, 0.0123. NaN (no figure) is "-".
func G(v float64) string {
	if s, ok := special(v); ok {
		return s
	}
	a := math.Abs(v)
	switch {
	case a == 0 || a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	dec := 2 - int(math.Floor(math.Log10(a)))
	return strconv.FormatFloat(v, 'f', dec, 64)
}

// Ratio is a/b as a factor ("1.52x"), "-" when b is zero or either is not
// a figure.
func Ratio(a, b float64) string {
	r := a / b
	if b == 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return "-"
	}
	switch a := math.Abs(r); {
	case a >= 100:
		return strconv.FormatFloat(r, 'f', 0, 64) + "x"
	case a >= 10:
		return strconv.FormatFloat(r, 'f', 1, 64) + "x"
	}
	return strconv.FormatFloat(r, 'f', 2, 64) + "x"
}

func special(v float64) (string, bool) {
	switch {
	case math.IsNaN(v):
		return "-", true
	case math.IsInf(v, 1):
		return "inf", true
	case math.IsInf(v, -1):
		return "-inf", true
	}
	return "", false
}
