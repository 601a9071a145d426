package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"xlb/bench/report"
	"xlb/bench/xdp"
)

// runXDP is `lbbench xdp`: see package bench/xdp.
func runXDP(args []string, c *common, stderr io.Writer) (report.Report, error) {
	fs := flag.NewFlagSet("lbbench xdp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	var cfg xdp.Config
	var sizes, fwds string
	fs.DurationVar(&cfg.Duration, "duration", 0, "time of each measured case: full load, the check of the lossless rate, latency (default 300ms with --quick, else 2s)")
	fs.DurationVar(&cfg.Trial, "trial", 0, "time of each trial of the lossless-rate search (default 200ms with --quick, else 500ms)")
	fs.IntVar(&cfg.Trials, "trials", 0, "most trials per lossless-rate search (default 5 with --quick, else 10)")
	fs.Float64Var(&cfg.LossMax, "loss", 0.001, "loss a lossless trial may have (fraction)")
	fs.DurationVar(&cfg.Coalesce, "coalesce", xdp.DefaultCoalesce, "send the search's paced frames in trains, what is due once per this window, as a NIC's interrupt coalescing delivers them (0: each frame when due, evenly spaced)")
	fs.StringVar(&sizes, "sizes", "", "frame sizes on the wire (FCS included), comma-separated (default 64 with --quick, else 64,1500)")
	fs.StringVar(&fwds, "forwarders", "xlb,xlb-ct,reflector,xdpfwd,nftlb", "what to measure, comma-separated")
	fs.IntVar(&cfg.Backends, "backends", 4, "backends behind the VIP")
	fs.IntVar(&cfg.Sources, "sources", 256, "distinct source addresses")
	fs.IntVar(&cfg.Ports, "ports", 256, "distinct source ports per address")
	fs.StringVar(&cfg.Prefix, "prefix", "lbx", "prefix of the namespaces and interfaces (1-3 letters/digits)")
	fs.StringVar(&cfg.XLB, "xlb", "", "xlb binary (default: build ./cmd/xlb of this repository)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: lbbench xdp [flags]   (root)

Builds a namespace topology (generator <-veth-> middle hop), runs xlb on
the middle hop and, in the same run, an AF_XDP reflector (a), an in-kernel
XDP forwarder (b) and nftables DNAT (c); sends UDP frames with many
5-tuples from an AF_XDP generator at full speed, then searches the highest
paced rate each forwards without loss (RFC 2544 style) and measures latency
at half of it; reports Mpps, loss, CPU per packet of the middle hop at the
lossless rate, latency percentiles absolute and added over (b), and the
xlb/(a), xlb/(b), xlb/(c) ratios.

flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return report.Report{}, err
	}
	if fs.NArg() > 0 {
		return report.Report{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, s := range strings.Split(sizes, ",") {
		if sizes == "" {
			break
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return report.Report{}, fmt.Errorf("--sizes: %q is not a number", s)
		}
		cfg.Sizes = append(cfg.Sizes, n)
	}
	for _, f := range strings.Split(fwds, ",") {
		if f = strings.TrimSpace(f); f != "" {
			cfg.Variants = append(cfg.Variants, f)
		}
	}
	if cfg.Coalesce == 0 {
		cfg.Coalesce = -1 // evenly spaced
	}
	cfg.Quick = c.quick
	cfg.Progress = stderr
	// A signal ends the run; the topology is removed before returning.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return xdp.Run(ctx, cfg)
}
