package main

import (
	"fmt"
	"net/netip"
	"strings"
)

// serveConfig is the validated form of the serve flags.
type serveConfig struct {
	name   string
	tcp    []netip.AddrPort
	udp    []netip.AddrPort
	weight int // < 0: /healthz sends no weight header
	// weightFile, when set, is read on every healthy /healthz instead:
	// its content (one trailing newline aside) is the weight header's
	// value, verbatim; missing or empty, no header. Tests change a
	// backend's reported weight at runtime through it.
	weightFile string
	pidfile    string
	verbose    bool
	quic       quicConfig
}

func parseServe(args []string) (serveConfig, error) {
	fs := newFlags("serve")
	name := fs.String("name", "", "backend name, in every answer")
	tcp := fs.String("listen-tcp", "0.0.0.0:80,[::]:80", "comma-separated TCP addresses for HTTP")
	udp := fs.String("listen-udp", "0.0.0.0:53,[::]:53", "comma-separated UDP addresses for the echo")
	weight := fs.Int("weight", -1, "weight reported by /healthz (omitted when negative)")
	weightFile := fs.String("weight-file", "", "file whose content /healthz sends as the weight header, read on every request")
	pidfile := fs.String("pidfile", "", "file to write the pid to once every address is bound")
	verbose := fs.Bool("verbose", false, "log every request")
	quicListen := fs.String("listen-quic", "", "comma-separated UDP addresses for QUIC (none by default)")
	quicSID := fs.String("quic-server-id", "", "QUIC-LB server ID, in hex, written into every connection ID")
	quicRotation := fs.Int("quic-rotation", 0, "QUIC-LB config rotation: the connection IDs' first three bits")
	quicNonce := fs.Int("quic-nonce-len", 6, "QUIC-LB nonce length in octets")
	quicKey := fs.String("quic-key-file", "", "QUIC-LB AES-128 key, one line of 32 hex digits (none: in the clear)")
	quicReset := fs.String("quic-reset-key-file", "", "stateless reset key, one line of 64 hex digits (none: random)")
	if err := parseFlags(fs, args); err != nil {
		return serveConfig{}, err
	}
	cfg := serveConfig{name: *name, weight: *weight, weightFile: *weightFile, pidfile: *pidfile, verbose: *verbose}
	if cfg.name == "" || strings.ContainsAny(cfg.name, " :\r\n") {
		return serveConfig{}, fmt.Errorf("serve: --name must be a non-empty word without spaces or colons, got %q (%w)", cfg.name, errUsage)
	}
	if cfg.weightFile != "" && cfg.weight >= 0 {
		return serveConfig{}, fmt.Errorf("serve: --weight and --weight-file exclude each other (%w)", errUsage)
	}
	var err error
	if cfg.tcp, err = parseAddrs("--listen-tcp", *tcp); err != nil {
		return serveConfig{}, err
	}
	if cfg.udp, err = parseAddrs("--listen-udp", *udp); err != nil {
		return serveConfig{}, err
	}
	if cfg.quic, err = parseQUIC(*quicListen, *quicSID, *quicRotation, *quicNonce, *quicKey, *quicReset); err != nil {
		return serveConfig{}, err
	}
	if len(cfg.tcp)+len(cfg.udp)+len(cfg.quic.addrs) == 0 {
		return serveConfig{}, fmt.Errorf("serve: nothing to listen on (%w)", errUsage)
	}
	return cfg, nil
}

// parseAddrs reads "1.2.3.4:80,[::]:80"; an empty list is allowed (that
// protocol is not served). Port 0 picks an ephemeral port (tests).
func parseAddrs(flagName, list string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return nil, fmt.Errorf("serve: %s: %q is not ADDR:PORT or [ADDR6]:PORT (%w)", flagName, s, errUsage)
		}
		if ap.Addr().Zone() != "" {
			return nil, fmt.Errorf("serve: %s: %q: zones are not supported (%w)", flagName, s, errUsage)
		}
		out = append(out, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
	}
	return out, nil
}

// network names the address family explicitly: "tcp6" on [::] binds
// IPv6 only, so 0.0.0.0:80 and [::]:80 can both be listed.
func network(proto string, ap netip.AddrPort) string {
	if ap.Addr().Is4() {
		return proto + "4"
	}
	return proto + "6"
}
