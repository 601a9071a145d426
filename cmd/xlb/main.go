// Command xlb is the appliance binary: `run` forwards traffic (XDP and
// AF_XDP workers on a NIC), `check` validates a configuration, `sim`
// replays a scenario through the real engine, `explain` shows why a packet
// goes where it goes; `reload`, `drain`, `undrain`, `status` and `capture`
// talk to a running `xlb run`, `decap` strips xlb's tunnels on a backend.
// main only reads flags and hands over.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"xlb/config"
	"xlb/controlplane"
	"xlb/controlplane/appliance"
	"xlb/controlplane/explain"
	"xlb/controlplane/sim"
)

const usage = `usage: xlb <command> [flags]

commands:
  check   -c FILE                  validate a configuration; prints ok and a summary
  sim     -c FILE SCENARIO.jsonl   replay a scenario through the engine (JSON lines out;
                                   --summary for a table)
  explain -c FILE --src --dst --proto [--sport --dport --flags --frag ...] [--json]
                                   show the rule, keys, eligible set, Maglev slot and backend
  run     -c FILE [--log-level L] [--log-format json|console] [--pidfile F]
                                   forward traffic: XDP and AF_XDP on dataplane.interface
                                   (root); logs JSON to stderr, stops on SIGTERM/SIGINT,
                                   reloads the file on SIGHUP
  reload  -c FILE [--socket PATH] [--allow-empty] [--dry-run]
                                   validate FILE, then have the running xlb reload it now
                                   (the file it runs, no other) through the admin socket
                                   and print what changed (--dry-run: what would change,
                                   nothing applied; --allow-empty: a file without
                                   forwarding rules applies)
  reload  -c FILE (--pid PID | --pidfile F)
                                   validate FILE, then SIGHUP the running xlb run
  capture [--socket PATH | --config FILE] [--vip A] [--backend B] [--verdict V,...]
          [-c N] [--snap N] [--seconds S] -w FILE
                                   copy frames from the running xlb's workers into a
                                   pcapng file (- for stdout), as received and as sent,
                                   each with its verdict (root)
  decap   --iface IF [--gue-port P] [--local A,B] [--mode M] [--pin-dir D]
                                   (on a backend) strip xlb's IPIP/GUE in XDP;
                                   --detach, --stats [--json]
  drain   [--socket PATH | -c FILE] NAME|SERVICE/NAME
                                   take a backend out of service (its flows drain); NAME
                                   drains it in every service that has it;
                                   through the admin socket (root; PATH: [admin] socket
                                   of FILE, else /run/xlb/admin.sock)
  drain   [--socket PATH | -c FILE] --node
                                   withdraw this instance's VIP routes ([bgp]); it keeps
                                   forwarding, the fleet takes its flows
  undrain [--socket PATH | -c FILE] (NAME | --node)
                                   return a drained backend, or the node's routes
  status  [--admin ADDR | -c FILE] services, backends and BGP of the running xlb, as tables
                                   (ADDR: [admin] listen of FILE, else 127.0.0.1:9110)
  status  --fleet ADDR,ADDR,...    compare the instances' tables (fingerprints); exit 1
                                   when they disagree
  version                          module version, commit and Go version of this binary

xlb help CMD, or xlb CMD -h, prints the command's flags with their defaults.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks errors that are the caller's wording, not the file's.
var errUsage = errors.New("usage")

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "check":
		err = cmdCheck(args[1:], stdout)
	case "sim":
		err = cmdSim(args[1:], stdout, stderr)
	case "explain":
		err = cmdExplain(args[1:], stdout)
	case "run":
		err = cmdRun(args[1:], stderr)
	case "reload":
		err = cmdReload(args[1:], stdout)
	case "drain", "undrain":
		err = cmdDrain(args[0], args[1:], stdout)
	case "capture":
		err = cmdCapture(args[1:], stdout, stderr)
	case "status":
		err = cmdStatus(args[1:], stdout)
	case "version", "--version":
		err = cmdVersion(args[1:], stdout)
	case "decap":
		err = cmdDecap(args[1:], stdout)
	case "help", "-h", "--help":
		if len(args) > 1 && args[0] == "help" {
			return run([]string{args[1], "-h"}, stdout, stderr) // xlb help CMD
		}
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "xlb: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		if h := (*helpRequested)(nil); errors.As(err, &h) {
			writeCommandHelp(stdout, h.fs)
			return 0
		}
		if errors.Is(err, errUsage) {
			// The marker is for the exit status, not for the reader.
			fmt.Fprintf(stderr, "%s (xlb help %s lists the flags)\n", strings.ReplaceAll(err.Error(), " ("+errUsage.Error()+")", ""), args[0])
			return 2
		}
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("xlb "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &helpRequested{fs}
		}
		return fmt.Errorf("%s: %v (%w)", fs.Name(), err, errUsage)
	}
	return nil
}

// cmdCheck validates a file and says whether `xlb run` could start with
// it here; with --run (the unit's ExecStartPre, the upgrade procedure) a
// file it could not start with fails the command.
func cmdCheck(args []string, stdout io.Writer) error {
	fs := newFlags("check")
	path := fs.String("c", "", "configuration file")
	forRun := fs.Bool("run", false, "fail unless xlb run can start with the file on this host (dataplane.interface set and present, dataplane.user known)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("xlb check: -c FILE is required (%w)", errUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("xlb check: unexpected argument %q (%w)", fs.Arg(0), errUsage)
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	runErr := runnable(cfg)
	if runErr != nil && *forRun {
		return fmt.Errorf("%w\nxlb check --run: the file is valid, but xlb run cannot start with it", runErr)
	}
	fmt.Fprintf(stdout, "ok: %s\n", cfg.Summary())
	if runErr != nil {
		fmt.Fprintf(stdout, "xlb run cannot start with it: %v\n", runErr)
		return nil
	}
	if len(cfg.Rules) == 0 {
		fmt.Fprintln(stdout, "xlb run can start with it, but forwards nothing: the file has no forwarding rule")
		return nil
	}
	fmt.Fprintln(stdout, "xlb run can start with it on this host")
	return nil
}

// runnable is what `xlb run` would refuse about a valid file before it
// touches anything, as far as this host can tell without privileges: no
// interface named, an interface this network namespace lacks, a
// dataplane.user the user database lacks.
func runnable(cfg *config.Config) error {
	if err := cfg.ValidateForRun(); err != nil {
		return err
	}
	if _, err := net.InterfaceByName(cfg.Dataplane.Interface); err != nil {
		return fmt.Errorf("%s: dataplane.interface %q does not exist in this network namespace", cfg.Path, cfg.Dataplane.Interface)
	}
	if _, err := appliance.RunAs(cfg); err != nil {
		return err
	}
	return nil
}

func cmdSim(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sim")
	path := fs.String("c", "", "configuration file")
	summary := fs.Bool("summary", false, "print a readable summary instead of JSON lines")
	// Flags may follow the scenario file too.
	var rest []string
	for len(args) > 0 {
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if *path == "" || len(rest) != 1 {
		return fmt.Errorf("xlb sim: want -c CONFIG.toml SCENARIO.jsonl (%w)", errUsage)
	}
	if !*summary {
		_, err := sim.Run(*path, rest[0], sim.JSONLines(stdout), stderr)
		return err
	}
	var results []*sim.Result
	m, err := sim.Run(*path, rest[0], func(r *sim.Result) error { results = append(results, r); return nil }, stderr)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, sim.Summary(results, m.ControlPlane().Snapshot()))
	return nil
}

// cmdExplain is `xlb explain`: the flags become explain.Args, whose
// errors, like a backend the file does not have, are usage errors.
func cmdExplain(args []string, stdout io.Writer) error {
	fs := newFlags("explain")
	path := fs.String("c", "", "configuration file")
	var a explain.Args
	fs.StringVar(&a.Src, "src", "", "source address")
	fs.StringVar(&a.Dst, "dst", "", "destination address (a VIP)")
	fs.StringVar(&a.Proto, "proto", "tcp", "tcp, udp, icmp, icmpv6, esp, gre or a number")
	fs.UintVar(&a.Sport, "sport", 0, "source port")
	fs.UintVar(&a.Dport, "dport", 0, "destination port")
	fs.StringVar(&a.Flags, "flags", "", "TCP flags, any of S A F R P (default A)")
	fs.StringVar(&a.Frag, "frag", "none", "none, first, middle or last")
	fs.IntVar(&a.ICMPType, "icmp-type", -1, "ICMP type (default echo, or an error when --inner-* is given)")
	fs.UintVar(&a.ICMPCode, "icmp-code", 0, "ICMP code")
	fs.StringVar(&a.InnerProto, "inner-proto", "", "quoted packet of an ICMP error: protocol")
	fs.UintVar(&a.InnerSport, "inner-sport", 0, "quoted packet: source port")
	fs.UintVar(&a.InnerDport, "inner-dport", 0, "quoted packet: destination port")
	fs.StringVar(&a.QUICDCID, "quic-dcid", "", "UDP: the payload is a QUIC packet to this destination connection ID (hex)")
	fs.StringVar(&a.QUICType, "quic-type", "short", "with --quic-dcid: short, initial, 0-rtt or handshake")
	fs.StringVar(&a.Unhealthy, "unhealthy", "", "comma-separated backends to assume unhealthy")
	fs.StringVar(&a.Weights, "weights", "", "comma-separated name=weight reports to assume")
	previous := fs.String("previous", "", "the configuration before a reload to FILE: explain as just after it (removed rules drain)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" || a.Src == "" || a.Dst == "" {
		return fmt.Errorf("xlb explain: -c, --src and --dst are required (%w)", errUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("xlb explain: unexpected argument %q (%w)", fs.Arg(0), errUsage)
	}
	fs.Visit(func(f *flag.Flag) {
		a.ICMPCodeSet = a.ICMPCodeSet || f.Name == "icmp-code"
		a.InnerPortsSet = a.InnerPortsSet || f.Name == "inner-sport" || f.Name == "inner-dport"
		a.SportSet, a.DportSet = a.SportSet || f.Name == "sport", a.DportSet || f.Name == "dport"
		a.QUICTypeSet = a.QUICTypeSet || f.Name == "quic-type"
	})
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	req, err := a.Request()
	if err == nil && *previous != "" {
		if req.Previous, err = config.Load(*previous); err != nil {
			return fmt.Errorf("--previous: %w", err)
		}
	}
	var rep *explain.Report
	if err == nil {
		rep, err = explain.Explain(cfg, req)
	}
	var argErr *explain.ArgError
	if errors.As(err, &argErr) || errors.Is(err, controlplane.ErrUnknownBackend) {
		return fmt.Errorf("xlb explain: %v (%w)", err, errUsage)
	}
	if err != nil {
		return fmt.Errorf("xlb explain: %w", err)
	}
	if *asJSON {
		return rep.WriteJSON(stdout)
	}
	rep.WriteText(stdout)
	return nil
}
