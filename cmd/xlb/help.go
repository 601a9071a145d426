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
Maglev slot and the backend. TCP and UDP need --sport and --dport.`,
	"run": `xlb run -c FILE [--log-level L] [--log-format F] [--pidfile F]

The appliance: XDP and AF_XDP on dataplane.interface (root). SIGTERM or
SIGINT stop it, SIGHUP reloads FILE. Under systemd (Type=notify) it says
READY=1 once attached with every worker running and the first health
round done, keeps STATUS= current, and pings the watchdog (WatchdogSec=)
while every worker goes round.`,
	"reload": `xlb reload -c FILE (--pid PID | --pidfile F)

Validates FILE (errors: exit 1, nothing sent), then sends SIGHUP to the
running xlb run, which reloads the file it was started with.`,
	"drain": `xlb drain [--admin ADDR | -c FILE] (NAME | SERVICE/NAME | --node)

Takes a backend out of service: no new connections, tracked ones drain
(M5). NAME is an endpoint's name or address and drains it in every
service that has it (the output lists them); SERVICE/NAME only that
service's. --node withdraws this instance's VIP routes ([bgp]).`,
	"undrain": `xlb undrain [--admin ADDR | -c FILE] (NAME | SERVICE/NAME | --node)

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
	var flags bytes.Buffer
	fs.SetOutput(&flags)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	if flags.Len() == 0 {
		fmt.Fprintln(w, "\nno flags")
		return
	}
	fmt.Fprintf(w, "\nflags:\n%s", flags.String())
}
