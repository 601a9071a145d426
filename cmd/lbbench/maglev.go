package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"xlb/bench/maglevbench"
	"xlb/bench/report"
)

// runMaglev is `lbbench maglev`: table build time, balance, disruption and
// lookup cost of our Maglev tables (bench/maglevbench).
func runMaglev(args []string, c *common, stderr io.Writer) (report.Report, error) {
	fs := flag.NewFlagSet("maglev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	var (
		cpuprofile string
		seed       uint64
	)
	fs.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	fs.Uint64Var(&seed, "seed", 1, "seed of the random weights and of the choice of affected backends")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: lbbench maglev [flags]\n\n"+
			"Build time over backends x table size, unweighted and weighted balance,\n"+
			"disruption on removing, adding or re-weighting one backend, lookup cost.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return report.Report{}, err
	}
	if fs.NArg() > 0 {
		return report.Report{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}

	cfg := maglevbench.Full()
	if c.quick {
		cfg = maglevbench.Quick()
	}
	cfg.Seed = seed

	stop, err := startCPUProfile(cpuprofile)
	if err != nil {
		return report.Report{}, err
	}
	defer stop()

	p := report.NewProgress(stderr, "maglev", maglevbench.Steps(cfg))
	res, err := maglevbench.Run(cfg, p.Add)
	p.Done()
	if err != nil {
		return report.Report{}, err
	}
	return res.Report(), nil
}

// startCPUProfile writes a CPU profile of what follows to path ("" for
// none) until the returned stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
