package main

import (
	"errors"
	"io"

	"xlb/bench/report"
)

// runMaglev is `lbbench maglev`. Not built yet: a placeholder so the command
// table compiles while it is written.
func runMaglev(args []string, c *common, stderr io.Writer) (report.Report, error) {
	return report.Report{}, errors.New("not implemented yet")
}
