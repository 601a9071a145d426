// Command lbbench measures xlb on the machine it runs on, always next to
// baselines measured in the same run: `core` (the engine over in-memory
// rings), `xdp` (real frames through xlb and through baseline forwarders on
// a namespace topology; root), `maglev` (table build time, balance and
// disruption), `control` (the control plane against the configuration's
// size). Every command prints tables, or JSON with --json, and can
// draw SVG charts with --plot DIR.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"xlb/bench/report"
)

const usage = `usage: lbbench <command> [flags]

commands:
  core     the decision engine over in-memory frame ports: 1..N workers, a
           shared conntrack, flow mixes; Mpps per core, ns/packet, allocations,
           cost against live flows
  xdp      (root) real frames through xlb on a namespace topology, next to an
           AF_XDP reflector, an in-kernel XDP forwarder and nftables DNAT;
           Mpps, loss, latency percentiles, ratios
  maglev   table build time, load imbalance and disruption against the minimum
  control  the control plane against the configuration's size: validation,
           snapshot and reload time, memory beyond the Maglev tables, health
           checks of many targets against their schedule

common flags (after the command):
  --json        print the report as JSON instead of tables
  --plot DIR    also write SVG charts into DIR
  --quick       a short run (make bench; CI runs it once per command)

lbbench help <command> (or lbbench <command> -h) lists the command's own flags
with their defaults.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// common are the flags every command takes.
type common struct {
	json  bool
	plot  string
	quick bool
}

func (c *common) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.json, "json", false, "print the report as JSON")
	fs.StringVar(&c.plot, "plot", "", "write SVG charts into this folder")
	fs.BoolVar(&c.quick, "quick", false, "a short run")
}

// command runs one lbbench command from its arguments; progress goes to
// stderr.
type command func(args []string, c *common, stderr io.Writer) (report.Report, error)

var commands = map[string]command{
	"core":    runCore,
	"xdp":     runXDP,
	"maglev":  runMaglev,
	"control": runControl,
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 2 && args[0] == "help" {
		// lbbench help CMD is lbbench CMD -h: the command's flags with
		// their defaults, on stderr like the rest of lbbench's usage.
		args = []string{args[1], "-h"}
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "lbbench: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var c common
	started := time.Now()
	r, err := cmd(args[1:], &c, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "lbbench %s: %v\n", args[0], err)
		return 1
	}
	r.Command, r.Started = args[0], started
	if r.Machine == (report.Machine{}) {
		r.Machine = report.ThisMachine()
	}
	// A chart that cannot be drawn must not hide a long run's figures: the
	// report is printed anyway and the exit status says something failed.
	rc := 0
	if c.plot != "" {
		files, err := report.Plot(c.plot, r)
		for _, f := range files {
			fmt.Fprintf(stderr, "wrote %s\n", f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "lbbench %s: --plot: %v\n", args[0], err)
			rc = 1
		}
	}
	if c.json {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			fmt.Fprintf(stderr, "lbbench: %v\n", err)
			return 1
		}
		return rc
	}
	report.Print(stdout, r)
	return rc
}
