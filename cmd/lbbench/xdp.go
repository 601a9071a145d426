package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"xlb/bench/report"
	"xlb/bench/xdp"
	"xlb/dataplane/xdpprog"
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
	var rem xdp.Remote
	var remote bool
	var xlbConfigOut string
	fs.StringVar(&rem.GenIface, "gen-iface", "", "real-NIC mode: this host's port the generator sends from (no namespaces are built; see docs/performance.md, Zero-copy NIC)")
	fs.StringVar(&rem.SinkIface, "sink-iface", "", "real-NIC mode: this host's port the sink receives on (default: --gen-iface)")
	fs.BoolVar(&remote, "remote-xlb", false, "real-NIC mode: xlb runs on another host, cabled to --gen-iface/--sink-iface; lbbench writes its configuration (--xlb-config)")
	fs.StringVar(&rem.XLBIface, "xlb-iface", "eth1", "real-NIC mode: the xlb host's interface (dataplane.interface of the configuration written)")
	fs.IntVar(&rem.CPU, "xlb-cpu", -1, "real-NIC mode: the core xlb's one worker is pinned to on its host (-1: unpinned)")
	fs.StringVar(&xlbConfigOut, "xlb-config", "", "real-NIC mode: file the remote xlb's configuration is written to (default: stderr, when there is no --xlb-mac)")
	var xlbMAC string
	fs.StringVar(&xlbMAC, "xlb-mac", "", "real-NIC mode: MAC of the far host's port; given, lbbench measures the forwarder there (frames to the VIP at this MAC, counted back on --sink-iface)")
	var serveIface, serveSinkMAC string
	fs.StringVar(&serveIface, "serve-xdpfwd", "", "real-NIC mode, on the far host instead of xlb: run the in-kernel XDP_TX forwarder (b) on this interface until interrupted, sending the VIP's frames to --sink-mac; measure it from the load host with --forwarders xdpfwd")
	fs.StringVar(&serveSinkMAC, "sink-mac", "", "with --serve-xdpfwd: the load host's sink port's MAC")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: lbbench xdp [flags]   (root)

Builds a namespace topology (generator <-veth-> middle hop), runs xlb on
the middle hop and, in the same run, an AF_XDP reflector (a), an in-kernel
XDP forwarder (b) and nftables DNAT (c); sends UDP frames with many
5-tuples from an AF_XDP generator at full speed, then searches the highest
paced rate each forwards without loss (RFC 2544 style) and measures latency
at half of it; reports Mpps, loss, CPU per packet of the middle hop at the
lossless rate, latency percentiles absolute and added over (b), and the
xlb/(a), xlb/(b), xlb/(c) ratios. xlb-ct is compared with xlb by a paired
search (interleaved trials, majority per rate step), and xlb's latency tail
is set beside what its worker waited on (schedstat, poll(2) sleeps, ring
counters, GC pauses, other tasks on its core).

Real NIC (--gen-iface IF [--sink-iface IF2] --remote-xlb): no namespaces.
--xlb-config F writes the configuration "xlb run" takes on the other host
(VIP, backends with the sink port's MAC, zero_copy = "on"); with --xlb-mac
(that host's port's MAC) it then measures xlb and xlb-ct there: frames
from IF to the VIP, counted back on IF2 (default IF) (Mpps, loss,
latency; no CPU figures from the far side). --serve-xdpfwd IF --sink-mac M
on the far host runs (b) there instead, measured with --forwarders xdpfwd.

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
	if serveIface != "" {
		return serveXDPFwd(ctx, serveIface, serveSinkMAC, stderr)
	}
	if rem.GenIface != "" || rem.SinkIface != "" || remote {
		rem.Backends = cfg.Backends
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == "forwarders" })
		if !set {
			cfg.Variants = []string{"xlb", "xlb-ct"} // what xlb-bench.toml serves
		}
		return runRemote(ctx, cfg, rem, remote, xlbMAC, xlbConfigOut, stderr)
	}
	return xdp.Run(ctx, cfg)
}

// runRemote is the real-NIC mode: it checks the port exists here, writes
// the remote xlb's configuration (backend MAC: the port's) when asked or
// when there is nothing to measure yet, and with --xlb-mac measures xlb
// over the port (xdp.RunExisting).
func runRemote(ctx context.Context, cfg xdp.Config, rem xdp.Remote, remote bool, xlbMAC, out string, stderr io.Writer) (report.Report, error) {
	if rem.GenIface == "" {
		return report.Report{}, fmt.Errorf("--sink-iface/--remote-xlb need --gen-iface (this host's port the generator sends from)")
	}
	if rem.SinkIface == "" {
		rem.SinkIface = rem.GenIface
	}
	if !remote {
		return report.Report{}, fmt.Errorf("--gen-iface without --remote-xlb: running xlb on a local existing interface is not implemented; run xlb on the other host (--remote-xlb)")
	}
	var dst net.HardwareAddr
	if xlbMAC != "" {
		var err error
		if dst, err = net.ParseMAC(xlbMAC); err != nil || len(dst) != 6 {
			return report.Report{}, fmt.Errorf("--xlb-mac %q: want the xlb host's port's Ethernet address", xlbMAC)
		}
	}
	if _, err := net.InterfaceByName(rem.GenIface); err != nil {
		return report.Report{}, fmt.Errorf("interface %s: %w", rem.GenIface, err)
	}
	ifc, err := net.InterfaceByName(rem.SinkIface)
	if err != nil {
		return report.Report{}, fmt.Errorf("interface %s: %w", rem.SinkIface, err)
	}
	rem.SinkMAC = ifc.HardwareAddr
	text, err := xdp.RemoteXLBConfig(rem)
	if err != nil {
		return report.Report{}, err
	}
	switch {
	case out != "":
		if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
			return report.Report{}, err
		}
		fmt.Fprintf(stderr, "wrote %s: run `xlb run -c %s` on the xlb host\n", out, filepath.Base(out))
	case dst == nil:
		fmt.Fprint(stderr, text)
	}
	if dst == nil {
		return report.Report{}, errNoXLBMAC
	}
	return xdp.RunExisting(ctx, cfg, xdp.Existing{Iface: rem.GenIface, SinkIface: rem.SinkIface, XLBMAC: dst})
}

// serveXDPFwd is --serve-xdpfwd: (b) on this host's iface until a signal,
// the far end of a real-NIC run; the report says what it forwarded.
func serveXDPFwd(ctx context.Context, iface, sinkMAC string, stderr io.Writer) (report.Report, error) {
	mac, err := net.ParseMAC(sinkMAC)
	if err != nil || len(mac) != 6 {
		return report.Report{}, fmt.Errorf("--sink-mac %q: want the load host's sink port's Ethernet address", sinkMAC)
	}
	fmt.Fprintf(stderr, "xdpfwd on %s: frames to %s go back to %s; interrupt to stop\n", iface, xdp.RemoteVIP, mac)
	st, err := xdp.ServeXDPFwd(ctx, iface, "", mac, xdpprog.ModeAuto)
	if err != nil {
		return report.Report{}, err
	}
	return report.Report{Notes: []string{fmt.Sprintf("xdpfwd on %s forwarded %d frames (XDP_TX) to %s; passed to the kernel: %d not to the VIP, %d not UDP/TCP, %d short",
		iface, st.TX, mac, st.PassNotVIP, st.PassNotL4, st.PassShort)}}, nil
}

// errNoXLBMAC ends a real-NIC run that only wrote xlb's configuration.
var errNoXLBMAC = errors.New("configuration written; to measure, start xlb on the other host with it and run again with --xlb-mac (its port's MAC)")
