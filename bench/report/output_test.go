package report

import (
	"bytes"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestPrint: the header, a table with numeric columns right-aligned and
// text left-aligned, the targets with met/MISSED, and the notes, exactly.
func TestPrint(t *testing.T) {
	r := Report{
		Command: "core",
		Started: time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC),
		Machine: Machine{CPU: "Test CPU", Cores: 2, Kernel: "6.1.0", GoVersion: "go1.26", Hostname: "h1"},
		Tables: []Table{{
			Title:   "Throughput",
			Columns: []string{"workers", "mix", "Mpps", "vs base"},
			Rows: [][]string{
				{"1", "established", "12.5", "1.52x"},
				{"16", "syn", "3", "-"},
				{"2", "µ-mix", "100.25"}, // short row: padded
			},
		}},
		Targets: []Target{
			{Name: "ns/pkt", Want: "<= 60", Measured: 41.234, Unit: "ns", Met: true},
			{Name: "Mpps per core", Want: ">= 10", Measured: 8.5, Unit: "Mpps"},
		},
		Notes: []string{"a note", "another"},
	}
	var b bytes.Buffer
	Print(&b, r)
	want := `lbbench core  2025-03-04 05:06:07 UTC
machine: Test CPU, 2 cores, kernel 6.1.0, go1.26, host h1

Throughput
  workers  mix            Mpps  vs base
  -------  -----------  ------  -------
        1  established    12.5    1.52x
       16  syn               3        -
        2  µ-mix        100.25

Targets
  target         want    measured  result
  -------------  -----  ---------  ------
  ns/pkt         <= 60    41.2 ns  met
  Mpps per core  >= 10  8.50 Mpps  MISSED

Notes
  - a note
  - another
`
	if got := b.String(); got != want {
		t.Errorf("Print:\n%s\nwant:\n%s", got, want)
	}
}

// TestPrintMinimal: a report with nothing but its command prints only the
// header, no empty sections.
func TestPrintMinimal(t *testing.T) {
	var b bytes.Buffer
	Print(&b, Report{Command: "maglev"})
	if got := b.String(); got != "lbbench maglev\n" {
		t.Errorf("Print = %q", got)
	}
}

func TestFormatters(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{F(3.14159, 2), "3.14"},
		{F(math.NaN(), 2), "-"},
		{F(math.Inf(1), 1), "inf"},
		{G(0), "0"},
		{G(1234.6), "1235"},
		{G(123.4), "123"},
		{G(12.34), "12.3"},
		{G(1.234), "1.23"},
		{G(0.01234), "0.0123"},
		{G(-0.5), "-0.500"},
		{G(math.NaN()), "-"},
		{Ratio(3, 2), "1.50x"},
		{Ratio(250, 2), "125x"},
		{Ratio(25, 2), "12.5x"},
		{Ratio(1, 0), "-"},
		{Ratio(math.NaN(), 1), "-"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestIsNumeric(t *testing.T) {
	for s, want := range map[string]bool{
		"12": true, "-3.5": true, ".5": true, "1.52x": true, "97%": true, "40 ns": true,
		"": false, "-": false, "abc": false, "x2": false, "inf": false,
	} {
		if got := isNumeric(s); got != want {
			t.Errorf("isNumeric(%q) = %v", s, got)
		}
	}
}

func TestThisMachine(t *testing.T) {
	m := ThisMachine()
	if m.Cores != runtime.NumCPU() || m.GoVersion != runtime.Version() || m.CPU == "" {
		t.Errorf("ThisMachine = %+v", m)
	}
	if runtime.GOOS == "linux" {
		rel, err := os.ReadFile("/proc/sys/kernel/osrelease")
		if err != nil {
			t.Fatal(err)
		}
		if m.Kernel != strings.TrimSpace(string(rel)) {
			t.Errorf("kernel %q, /proc says %q", m.Kernel, rel)
		}
	}
}
