package main

import (
	"flag"
	"fmt"
	"io"

	"xlb/bench/control"
	"xlb/bench/report"
)

// runControl is `lbbench control`: the control plane's time and memory
// against the number of VIPs and backends (bench/control).
func runControl(args []string, c *common, stderr io.Writer) (report.Report, error) {
	fs := flag.NewFlagSet("control", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	var (
		cpuprofile string
		vips       string
		tableSize  uint
		targets    int
	)
	fs.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	fs.StringVar(&vips, "vips", "", "configuration sizes in VIPs, e.g. 1k,2k,20k (default: 1k..20k, quick: 1k,4k)")
	fs.UintVar(&tableSize, "table-size", 0, "maglev_table_size of every service (default: 65537, quick: 1021)")
	fs.IntVar(&targets, "health-targets", -1, "health-check targets of the drift measurement, 0 to skip (default: 80000, quick: 4000)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: lbbench control [flags]\n\n"+
			"Validation, first snapshot, snapshot rebuild and reload time, memory beyond the\n"+
			"Maglev tables, against the number of VIPs (one service of 4 backends each);\n"+
			"the drift of health-check probes of many targets from their schedule.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return report.Report{}, err
	}
	if fs.NArg() > 0 {
		return report.Report{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg := control.Full()
	if c.quick {
		cfg = control.Quick()
	}
	if vips != "" {
		n, err := parseCounts(vips)
		if err != nil {
			return report.Report{}, fmt.Errorf("--vips: %w", err)
		}
		cfg.VIPs = n
	}
	if tableSize != 0 {
		cfg.TableSize = uint32(tableSize)
	}
	if targets >= 0 {
		cfg.HealthTargets = targets
	}
	stop, err := startCPUProfile(cpuprofile)
	if err != nil {
		return report.Report{}, err
	}
	defer stop()
	p := report.NewProgress(stderr, "control", control.Steps(cfg))
	res, err := control.Run(cfg, p.Add)
	p.Done()
	if err != nil {
		return report.Report{}, err
	}
	return res.Report(), nil
}
