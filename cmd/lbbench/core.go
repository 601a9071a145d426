package main

import (
	"errors"
	"io"

	"xlb/bench/report"
)

// runCore is `lbbench core`. Not built yet: a placeholder so the command
// table compiles while it is written.
func runCore(args []string, c *common, stderr io.Writer) (report.Report, error) {
	return report.Report{}, errors.New("not implemented yet")
}
