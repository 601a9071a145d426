// Command xlb is the appliance binary: `run` forwards traffic (XDP and
// AF_XDP workers on a NIC), `check` validates a configuration, `sim`
// replays a scenario through the real engine, `explain` shows why a packet
// goes where it goes. main only reads flags and hands over.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"xlb/config"
	"xlb/controlplane"
	"xlb/controlplane/explain"
	"xlb/controlplane/sim"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

const usage = `usage: xlb <command> [flags]

commands:
  check   -c FILE                  validate a configuration; prints ok and a summary
  sim     -c FILE SCENARIO.jsonl   replay a scenario through the engine (JSON lines out;
                                   --summary for a table)
  explain -c FILE --src --dst --proto [--sport --dport --flags --frag ...] [--json]
                                   show the rule, keys, eligible set, Maglev slot and backend
  run     -c FILE [--log-level L] [--pidfile F]
                                   forward traffic: XDP and AF_XDP on dataplane.interface
                                   (root); logs JSON to stderr, stops on SIGTERM/SIGINT,
                                   reloads the file on SIGHUP
  reload  -c FILE (--pid PID | --pidfile F)
                                   validate FILE, then SIGHUP the running xlb run
  drain   [--admin ADDR | -c FILE] NAME
                                   take a backend out of service (its flows drain)
  undrain [--admin ADDR | -c FILE] NAME
                                   return a drained backend to service
  status  [--admin ADDR | -c FILE] services and backends of the running xlb, as tables
                                   (ADDR: [admin] listen of FILE, else 127.0.0.1:9110)
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
	case "status":
		err = cmdStatus(args[1:], stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "xlb: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintln(stderr, err)
		if errors.Is(err, errUsage) {
			return 2
		}
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
			return err
		}
		return fmt.Errorf("%s: %v (%w)", fs.Name(), err, errUsage)
	}
	return nil
}

func cmdCheck(args []string, stdout io.Writer) error {
	fs := newFlags("check")
	path := fs.String("c", "", "configuration file")
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
	fmt.Fprintf(stdout, "ok: %s\n", cfg.Summary())
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

func cmdExplain(args []string, stdout io.Writer) error {
	fs := newFlags("explain")
	path := fs.String("c", "", "configuration file")
	src := fs.String("src", "", "source address")
	dst := fs.String("dst", "", "destination address (a VIP)")
	proto := fs.String("proto", "tcp", "tcp, udp, icmp, icmpv6, esp, gre or a number")
	sport := fs.Uint("sport", 0, "source port")
	dport := fs.Uint("dport", 0, "destination port")
	flags := fs.String("flags", "", "TCP flags, any of S A F R P (default A)")
	frag := fs.String("frag", "none", "none, first, middle or last")
	icmpType := fs.Int("icmp-type", -1, "ICMP type (default echo, or an error when --inner-* is given)")
	icmpCode := fs.Uint("icmp-code", 0, "ICMP code")
	innerProto := fs.String("inner-proto", "", "quoted packet of an ICMP error: protocol")
	innerSport := fs.Uint("inner-sport", 0, "quoted packet: source port")
	innerDport := fs.Uint("inner-dport", 0, "quoted packet: destination port")
	unhealthy := fs.String("unhealthy", "", "comma-separated backends to assume unhealthy")
	weights := fs.String("weights", "", "comma-separated name=weight reports to assume")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" || *src == "" || *dst == "" {
		return fmt.Errorf("xlb explain: -c, --src and --dst are required (%w)", errUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("xlb explain: unexpected argument %q (%w)", fs.Arg(0), errUsage)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	var req explain.Request
	p := &req.Packet
	if p.Src, err = netip.ParseAddr(*src); err != nil {
		return fmt.Errorf("xlb explain: --src: %v (%w)", err, errUsage)
	}
	if p.Dst, err = netip.ParseAddr(*dst); err != nil {
		return fmt.Errorf("xlb explain: --dst: %v (%w)", err, errUsage)
	}
	p.Src, p.Dst = p.Src.Unmap(), p.Dst.Unmap() // as xlb sim reads addresses
	if p.Proto, err = packet.ParseProto(*proto); err != nil {
		return fmt.Errorf("xlb explain: --%v (%w)", err, errUsage)
	}
	if *sport > 65535 || *dport > 65535 {
		return fmt.Errorf("xlb explain: ports are 0..65535 (%w)", errUsage)
	}
	if strings.Trim(strings.ToUpper(*flags), "SAFRP") != "" {
		return fmt.Errorf("xlb explain: --flags %q: want any of S A F R P (%w)", *flags, errUsage)
	}
	p.SrcPort, p.DstPort, p.Flags = uint16(*sport), uint16(*dport), strings.ToUpper(*flags)
	if p.Frag, err = craft.ParseFrag(*frag); err != nil {
		return fmt.Errorf("xlb explain: --%v (%w)", err, errUsage)
	}
	if (set["inner-sport"] || set["inner-dport"]) && *innerProto == "" {
		return fmt.Errorf("xlb explain: --inner-sport and --inner-dport need --inner-proto (%w)", errUsage)
	}
	if *innerProto != "" && p.Proto != packet.ProtoICMP && p.Proto != packet.ProtoICMPv6 {
		return fmt.Errorf("xlb explain: --inner-proto describes the quote of an ICMP error: it needs --proto icmp or icmpv6 (%w)", errUsage)
	}
	if *innerSport > 65535 || *innerDport > 65535 || *icmpType > 255 || *icmpCode > 255 {
		return fmt.Errorf("xlb explain: ports are 0..65535, ICMP type and code 0..255 (%w)", errUsage)
	}
	if p.Proto == packet.ProtoICMP || p.Proto == packet.ProtoICMPv6 {
		if *innerProto != "" {
			ip, err := packet.ParseProto(*innerProto)
			if err != nil {
				return fmt.Errorf("xlb explain: --inner-%v (%w)", err, errUsage)
			}
			// The quote is the packet the backend sent to the client: from
			// the VIP, to the source of the error.
			p.Inner = &craft.Packet{Src: p.Dst, Dst: p.Src, Proto: ip, SrcPort: uint16(*innerSport), DstPort: uint16(*innerDport)}
			p.ICMPType, p.ICMPCode = 3, 4
			if p.Proto == packet.ProtoICMPv6 {
				p.ICMPType, p.ICMPCode = 2, 0
			}
		} else if p.Proto == packet.ProtoICMP {
			p.ICMPType = 8
		} else {
			p.ICMPType = 128
		}
		if *icmpType >= 0 {
			p.ICMPType, p.ICMPCode = uint8(*icmpType), uint8(*icmpCode)
		}
		if set["icmp-code"] {
			p.ICMPCode = uint8(*icmpCode)
		}
	}
	// A description that does not make a frame (icmp over IPv6, mixed
	// families...) is the caller's wording too.
	if _, err := craft.Build(p); err != nil {
		return fmt.Errorf("xlb explain: %v (%w)", err, errUsage)
	}
	if *unhealthy != "" {
		for _, n := range strings.Split(*unhealthy, ",") {
			req.Unhealthy = append(req.Unhealthy, strings.TrimSpace(n))
		}
	}
	if *weights != "" {
		req.Weights = map[string]uint32{}
		for _, kv := range strings.Split(*weights, ",") {
			k, v, ok := strings.Cut(kv, "=")
			w, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if !ok || err != nil || w > 1000 {
				return fmt.Errorf("xlb explain: --weights %q: want name=0..1000 (%w)", kv, errUsage)
			}
			req.Weights[strings.TrimSpace(k)] = uint32(w)
		}
	}
	rep, err := explain.Explain(cfg, &req)
	if errors.Is(err, controlplane.ErrUnknownBackend) {
		// --unhealthy or --weights names a backend the file does not have.
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
