package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"xlb/bench/core"
	"xlb/bench/report"
)

// runCore is `lbbench core`: the decision engine over in-memory frame ports
// (bench/core).
func runCore(args []string, c *common, stderr io.Writer) (report.Report, error) {
	fs := flag.NewFlagSet("core", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	var (
		workers    int
		flowList   string
		cpuprofile string
		noProfile  bool
		baseline   string
		flowSync   bool
	)
	fs.IntVar(&workers, "workers", 0, "most workers of the scaling sweep (default: the number of CPUs)")
	fs.StringVar(&flowList, "flows", "", "live-flow counts, e.g. 1k,100k,1M (default: 1k,10k,100k,1M,4M; --quick: 1k,10k,100k)")
	duration := fs.Duration("duration", 0, "measured time per case (default 400ms; --quick: 40ms)")
	fs.StringVar(&cpuprofile, "cpuprofile", "", "keep the CPU profile of established-v4 at the headline table in this file (go tool pprof)")
	fs.StringVar(&baseline, "baseline", "", "a saved `lbbench core --json` of this machine: check the in-cache cost (established-v4, 1k flows) against it (target: down by a third)")
	fs.BoolVar(&flowSync, "flowsync", false, "measure established-v4, realistic and syn at the headline table with flow sync on too (a ring per worker, drained), right after each with it off")
	fs.BoolVar(&noProfile, "noprofile", false, "take no CPU profile (a full run takes one and summarises it with go tool pprof)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: lbbench core [flags]\n\n"+
			"The engine over in-memory frame ports, 1..N workers sharing one conntrack: Mpps per core,\n"+
			"ns/packet (wall and thread CPU), allocations, against live flows, mixes and frame sizes.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return report.Report{}, err
	}
	if fs.NArg() > 0 {
		return report.Report{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o := core.Defaults(c.quick)
	if workers < 0 {
		return report.Report{}, fmt.Errorf("--workers %d: want at least 1", workers)
	}
	if workers > 0 {
		o.Workers = workers
	}
	if flowList != "" {
		fl, err := parseCounts(flowList)
		if err != nil {
			return report.Report{}, fmt.Errorf("--flows: %w", err)
		}
		o.Flows = fl
	}
	if *duration < 0 {
		return report.Report{}, fmt.Errorf("--duration %v: want a positive duration", *duration)
	}
	if *duration > 0 {
		o.Duration = *duration
	}
	o.ProfileFile = cpuprofile
	o.FlowSync = flowSync
	if noProfile {
		o.Profile = false
	}
	var ref *core.InCacheRef
	if baseline != "" {
		if !slices.Contains(o.Flows, 1_000) {
			return report.Report{}, errors.New("--baseline compares the in-cache cost at 1k live flows: --flows must include 1k")
		}
		var err error
		if ref, err = readBaseline(baseline); err != nil {
			return report.Report{}, err
		}
	}
	p := report.NewProgress(stderr, "core", core.Steps(o))
	o.Progress = p
	res, err := core.Run(o)
	p.Done()
	if err != nil {
		return report.Report{}, err
	}
	res.InCacheBaseline = ref
	return res.Report(), nil
}

// readBaseline reads the in-cache engine cost of a saved `lbbench core
// --json` run.
func readBaseline(file string) (*core.InCacheRef, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--baseline: %w", err)
	}
	var saved struct {
		Command string         `json:"command"`
		Started string         `json:"started"`
		Machine report.Machine `json:"machine"`
		Data    core.Result    `json:"data"`
	}
	if err := json.Unmarshal(b, &saved); err != nil {
		return nil, fmt.Errorf("--baseline %s: %w", file, err)
	}
	if saved.Command != "core" {
		return nil, fmt.Errorf("--baseline %s: a report of %q, want one of lbbench core --json", file, saved.Command)
	}
	v, ok := saved.Data.InCacheNs()
	if !ok || !(v > 0) {
		return nil, fmt.Errorf("--baseline %s: no established-v4 figure at 1k live flows", file)
	}
	m := saved.Machine.String()
	return &core.InCacheRef{File: file, Started: saved.Started, Machine: m, EngineNs: v,
		SameMachine: m == report.ThisMachine().String()}, nil
}

// parseCounts reads "1k,10k,1M,4M" (k = 1000, M = 1000000).
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mul := 1
		switch {
		case strings.HasSuffix(f, "k"):
			f, mul = strings.TrimSuffix(f, "k"), 1_000
		case strings.HasSuffix(f, "M"):
			f, mul = strings.TrimSuffix(f, "M"), 1_000_000
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		out = append(out, n*mul)
	}
	return out, nil
}
