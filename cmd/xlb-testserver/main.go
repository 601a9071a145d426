// Command xlb-testserver is the backend of the test bed (scripts/testbed.sh):
// it answers HTTP on its TCP addresses with a body and an X-Backend header
// naming itself, serves /healthz (with the weight header health checks read),
// and echoes UDP datagrams prefixed with its name, replying from the address
// each datagram was sent to so that a VIP held on lo stays the source (DSR).
// Its QUIC mode (quic-go) answers each stream with its name too, and writes
// its server ID into every connection ID it issues as the QUIC-LB draft says
// (quic.go), so that a balancer routes its connections by ID.
//
// Three helper subcommands serve the same bed: `probe` plays the client and
// counts which backend answered, `hold` keeps long-lived connections and a
// stream of new ones and reports what broke, and `offload-off` turns off
// checksum and segmentation offloads on a veth, so that frames an XDP
// program sees carry complete checksums and fit the MTU.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `usage:
  xlb-testserver [serve] --name NAME [--listen-tcp ADDR:PORT,...] [--listen-udp ADDR:PORT,...]
                 [--weight N | --weight-file FILE] [--pidfile FILE] [--verbose]
                 [--listen-quic ADDR:PORT,... --quic-server-id HEX [--quic-rotation R]
                  [--quic-nonce-len N] [--quic-key-file FILE] [--quic-reset-key-file FILE]]
      answer HTTP (body "backend NAME", header X-Backend) and echo UDP ("NAME: payload");
      QUIC (ALPN xlb-test, a self-signed certificate): each stream's request, sent
      whole, is answered "NAME: request"; every connection ID carries the server ID
      under QUIC-LB config rotation R (default 0) with a random nonce of N octets
      (default 6), AES-128 encrypted with --quic-key-file's 32 hex digits, else in the
      clear; stateless resets use --quic-reset-key-file's 64 hex digits (default: a
      random key, so that a reset's token names the server that sent it);
      /healthz is 200 with X-Load-Balancing-Endpoint-Weight when --weight is set, or
      with FILE's content as its value, read on every request (missing or empty: none);
      SIGUSR1 makes /healthz answer 503, SIGUSR2 makes it healthy again
  xlb-testserver probe [--tcp ADDR:PORT] [--udp ADDR:PORT] [-n N] [--parallel P] [--timeout D]
      open N new connections (and N UDP exchanges, each from a new port) and print
      "PROTO BACKEND COUNT" lines, then "PROTO errors COUNT"; exit 1 on any error
  xlb-testserver hold --tcp ADDR:PORT[,...] [-n N] [--interval D] [--new-interval D]
      keep N long-lived HTTP connections asking every D (default 300, 100ms) and open a
      new connection every --new-interval (default 20ms, 0: none); SIGUSR1 prints what
      happened since the last report (broken and moved connections, failed new ones and
      for how long they failed) and starts a new phase; SIGINT or SIGTERM prints and ends
  xlb-testserver offload-off IFACE...
      turn off tx checksum, scatter-gather, TSO and GSO on the interfaces of the
      current network namespace
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks errors in how the command was called (exit status 2).
var errUsage = errors.New("usage")

func run(args []string, stdout, stderr io.Writer) int {
	var err error
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		err = cmdServe(args)
	case "probe":
		err = cmdProbe(args, stdout)
	case "hold":
		err = cmdHold(args, stdout)
	case "offload-off":
		err = cmdOffloadOff(args)
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		err = fmt.Errorf("unknown command %q (%w)", cmd, errUsage)
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "xlb-testserver: %v\n%s", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "xlb-testserver: %v\n", err)
		return 1
	}
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
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
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q (%w)", fs.Name(), fs.Arg(0), errUsage)
	}
	return nil
}
