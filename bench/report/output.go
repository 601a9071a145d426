package report

import (
	"errors"
	"io"
	"os"
	"runtime"
)

// ThisMachine describes the machine the process runs on.
// PLACEHOLDER: to be completed (CPU model, kernel).
func ThisMachine() Machine {
	h, _ := os.Hostname()
	return Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), Hostname: h}
}

// Print writes r as readable tables. PLACEHOLDER: to be written.
func Print(w io.Writer, r Report) {}

// Plot writes one SVG per chart of r into dir and returns their paths.
// PLACEHOLDER: to be written.
func Plot(dir string, r Report) ([]string, error) { return nil, errors.New("not implemented yet") }
