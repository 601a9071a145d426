package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"strings"
)

// commandHelp is what `xlb help CMD` and `xlb CMD -h` print above the
// command's flags: its synopsis and what it does.
var commandHelp = map[string]string{
	"check": `xlb check -c FILE

Validates a configuration: "ok:" and a summary, or every error with file,
line and field path (exit 1).`,
	"sim": `xlb sim -c FILE SCENARIO.jsonl [--summary]

Replays a scenario through the real parser, rules, conntrack and Maglev on
a virtual clock: one JSON line per packet, or a table with --summary.`,
	"explain": `xlb explain -c FILE --src A --dst VIP --proto P [--sport N --dport N] [flags]

Shows why a packet goes where it goes: the forwarding rule, the selection
and tracking keys, step 1 (CT1-CT4), the eligible set and why (E1-E4), the
Maglev slot and the backend. TCP and UDP need --sport and --dport.
--previous OLD explains as just after a reload from OLD to FILE: a rule
the reload removed drains (M5), and the report says so.`,
	"run": `xlb run -c FILE [--log-level L] [--log-format F] [--pidfile F] [--keep-privileges]

The appliance: XDP and AF_XDP on dataplane.interface (root). SIGTERM or
SIGINT stop it, SIGHUP reloads FILE. Under systemd (Type=notify) it says
READY=1 once attached with every worker running and the first health
round done, keeps STATUS= current, and pings the watchdog (WatchdogSec=)
while every worker goes round. Once started it keeps CAP_NET_ADMIN alone,
on every thread, and becomes dataplane.user when set; where it cannot,
it stops, unless --keep-privileges.`,
	"reload": `xlb reload -c FILE [--socket PATH] [--allow-empty] [--dry-run]
       xlb reload -c FILE (--pid PID | --pidfile F)

Validates FILE (errors: exit 1, nothing sent), then has the running xlb
reload it: through the admin socket ([admin] socket of FILE, or --socket;
root), which refuses when FILE is not the file xlb runs, and prints what
the reload changed (rules, health checks, services, backends), then
"reloaded" (exit 1 with every reason when refused); --dry-run prints what
it would change, then "dry run: nothing applied". By SIGHUP with
--pid/--pidfile (refused when /proc shows xlb run -c another file), xlb
reloads the file it was started with and the outcome is in its log. A file without any forwarding rule, while some run, is
refused unless --allow-empty (socket only).`,
	"capture": `xlb capture [--socket PATH | --config FILE] [--vip A] [--backend B]
                   [--verdict V,...] [-c N] [--snap N] [--seconds S] -w FILE

Copies frames out of the running xlb's workers (admin socket, root) into a
pcapng file ("-": stdout): each frame as received (interface rx) and, when
forwarded, as sent (interface tx), with a comment naming the queue, the
verdict and the reason or backend. -c N stops after N frames, as
tcpdump's -c: frames, not packets of the file, so -c 40 of forwarded
traffic writes 40 frames in 80 packets (rx and tx). Ctrl-C ends it.
Copies the workers' rings could not hold are counted and printed.`,
	"drain": `xlb drain [--socket PATH | -c FILE] (NAME | SERVICE/NAME | --node)

Takes a backend out of service: no new connections, tracked ones drain
(M5). NAME is an endpoint's name or address and drains it in every
service that has it (the output lists them); SERVICE/NAME only that
service's. --node withdraws this instance's VIP routes ([bgp]). Through
the admin socket (root).`,
	"undrain": `xlb undrain [--socket PATH | -c FILE] (NAME | SERVICE/NAME | --node)

Returns a drained backend to service, or announces the node's routes again.`,
	"status": `xlb status [--admin ADDR | -c FILE] [--fleet ADDR,...]

Services, backends and BGP of the running xlb, as tables; --fleet compares
the fingerprints of several instances (exit 1 when they disagree).`,
	"version": `xlb version

The module version, the commit xlb was built from and the Go version.`,
}

// helpRequested is a -h or --help given to a command: run prints that
// command's help on stdout and exits 0.
type helpRequested struct{ fs *flag.FlagSet }

func (h *helpRequested) Error() string { return fmt.Sprintf("%s: help requested", h.fs.Name()) }
func (h *helpRequested) Unwrap() error { return flag.ErrHelp }

// writeCommandHelp writes a command's synopsis and its flags with their
// defaults.
func writeCommandHelp(w io.Writer, fs *flag.FlagSet) {
	name := strings.TrimPrefix(fs.Name(), "xlb ")
	if text, ok := commandHelp[name]; ok {
		fmt.Fprintf(w, "usage: %s\n", text)
	} else {
		fmt.Fprintf(w, "usage: %s [flags]\n", fs.Name())
	}
	writeFlags(w, fs)
}

// hiddenFlag starts the usage of a flag that exists only to refuse it
// with a pointer elsewhere (drain's --admin): help does not list it.
const hiddenFlag = "hidden: "

// writeFlags writes every flag of fs but the hidden ones, with defaults.
func writeFlags(w io.Writer, fs *flag.FlagSet) {
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.HasPrefix(f.Usage, hiddenFlag) {
			shown.Var(f.Value, f.Name, f.Usage)
		}
	})
	var flags bytes.Buffer
	shown.SetOutput(&flags)
	shown.PrintDefaults()
	if flags.Len() == 0 {
		fmt.Fprintln(w, "\nno flags")
		return
	}
	fmt.Fprintf(w, "\nflags:\n%s", flags.String())
}
