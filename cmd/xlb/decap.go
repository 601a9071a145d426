package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"

	"xlb/dataplane/decap"
)

const decapUsage = `usage: xlb decap --iface IF [--gue-port P] [--local A,B,...] [--mode M] [--pin-dir DIR]
       xlb decap --iface IF --detach [--pin-dir DIR]
       xlb decap --iface IF --stats [--json] [--pin-dir DIR]

On a backend: attach an XDP program to IF that strips xlb's IPIP (4-in-4,
6-in-6, 4-in-6, 6-in-4) and GUE (version 0, UDP port P, default 5555)
headers from frames whose outer destination is a local address, and passes
the inner packet to the kernel. The local addresses are IF's global ones
unless --local names them. The program stays attached after the command
exits (a BPF link pinned at DIR/xlb-decap-IF, DIR default /sys/fs/bpf, a
bpffs); running it again replaces the program in place, --detach removes
it, --stats shows its counters and addresses. Mode: auto (native, else
generic), native or generic. Needs root.
`

// cmdDecap is `xlb decap`: attach (or replace), detach, or show the
// backend-side decapsulation program of an interface.
func cmdDecap(args []string, stdout io.Writer) error {
	fs := newFlags("decap")
	iface := fs.String("iface", "", "interface")
	port := fs.Uint("gue-port", decap.DefaultGUEPort, "GUE port (gue_port of the balancer's service)")
	local := fs.String("local", "", "comma-separated local addresses (default: the interface's global addresses)")
	mode := fs.String("mode", string(decap.ModeAuto), "auto, native or generic")
	pinRoot := fs.String("pin-dir", decap.DefaultPinRoot, "bpffs directory for the pins")
	detach := fs.Bool("detach", false, "detach and remove the pins")
	stats := fs.Bool("stats", false, "show the counters and local addresses")
	asJSON := fs.Bool("json", false, "with --stats: print JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, decapUsage)
			return nil
		}
		return fmt.Errorf("xlb decap: %v (%w)", err, errUsage)
	}
	usageErr := func(format string, a ...any) error {
		return fmt.Errorf("xlb decap: "+format+" (%w)", append(a, errUsage)...)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected argument %q", fs.Arg(0))
	case *iface == "":
		return usageErr("--iface IF is required")
	case *detach && *stats:
		return usageErr("--detach and --stats exclude each other")
	case (*detach || *stats) && (set["gue-port"] || set["local"] || set["mode"]):
		return usageErr("--gue-port, --local and --mode are for attaching")
	case set["json"] && !*stats:
		return usageErr("--json goes with --stats")
	case *port == 0 || *port > 0xffff:
		return usageErr("--gue-port %d: want 1..65535", *port)
	}
	m := decap.Mode(*mode)
	if m != decap.ModeAuto && m != decap.ModeNative && m != decap.ModeGeneric {
		return usageErr("--mode %q: want auto, native or generic", *mode)
	}
	dir := decap.PinDir(*pinRoot, *iface)
	switch {
	case *detach:
		if err := decap.Unpin(dir); err != nil {
			return decapErr(*iface, dir, err)
		}
		fmt.Fprintf(stdout, "detached from %s (removed %s)\n", *iface, dir)
		return nil
	case *stats:
		p, err := decap.ReadPinned(dir)
		if err != nil {
			return decapErr(*iface, dir, err)
		}
		return writeDecapStats(stdout, *iface, dir, p, *asJSON)
	}

	link, err := netlink.LinkByName(*iface)
	if err != nil {
		return fmt.Errorf("xlb decap: interface %s: %w", *iface, err)
	}
	var addrs []netip.Addr
	if *local != "" {
		for _, s := range strings.Split(*local, ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil {
				return usageErr("--local: %v", err)
			}
			addrs = append(addrs, a)
		}
	} else if addrs, err = globalAddrs(link); err != nil {
		return fmt.Errorf("xlb decap: addresses of %s: %w", *iface, err)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("xlb decap: %s has no global address: give the outer destinations with --local", *iface)
	}
	o, err := decap.Load(uint16(*port))
	if err != nil {
		return fmt.Errorf("xlb decap: %w", err)
	}
	defer o.Close() // the pins keep what is attached
	if err := o.SetLocal(addrs); err != nil {
		return usageErr("--local: %v", err)
	}
	used, err := decap.Pin(dir, o, link.Attrs().Index, m)
	if err != nil {
		return fmt.Errorf("xlb decap: %s: %w", *iface, err)
	}
	how := string(used) + " mode"
	if used == decap.ModeKept {
		how = "program replaced, mode kept"
	}
	fmt.Fprintf(stdout, "attached to %s (%s), pinned at %s: IPIP and GUE (port %d) to %s decapsulated\n",
		*iface, how, dir, *port, joinAddrs(addrs))
	return nil
}

// decapErr words err of --detach and --stats.
func decapErr(iface, dir string, err error) error {
	if errors.Is(err, decap.ErrNotPinned) {
		return fmt.Errorf("xlb decap: nothing attached to %s (no %s)", iface, dir)
	}
	return fmt.Errorf("xlb decap: %s: %w", iface, err)
}

// globalAddrs are link's addresses of global scope, both families.
func globalAddrs(link netlink.Link) ([]netip.Addr, error) {
	const familyAll, scopeUniverse = 0, 0 // AF_UNSPEC, RT_SCOPE_UNIVERSE (named only on Linux)
	list, err := netlink.AddrList(link, familyAll)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range list {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.Scope != scopeUniverse || ip.IsLinkLocalUnicast() {
			continue
		}
		out = append(out, ip.Unmap())
	}
	return out, nil
}

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// writeDecapStats prints what --stats shows: a few lines, or JSON.
func writeDecapStats(w io.Writer, iface, dir string, p decap.Pinned, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Interface string       `json:"interface"`
			Ifindex   int          `json:"ifindex"`
			PinDir    string       `json:"pin_dir"`
			Local     []netip.Addr `json:"local"`
			Counters  decap.Stats  `json:"counters"`
		}{iface, p.Ifindex, dir, p.Local, p.Stats})
	}
	attached := fmt.Sprintf("ifindex %d", p.Ifindex)
	if p.Ifindex == 0 {
		attached = "no longer attached (the interface is gone): --detach removes the pins"
	}
	s := p.Stats
	fmt.Fprintf(w, "interface  %s (%s), pinned at %s\n", iface, attached, dir)
	fmt.Fprintf(w, "local      %s\n", joinAddrs(p.Local))
	fmt.Fprintf(w, "decapsulated  IPIP outer v4 %d, outer v6 %d; GUE outer v4 %d, outer v6 %d\n", s.IPIP4, s.IPIP6, s.GUE4, s.GUE6)
	fmt.Fprintf(w, "passed        not a tunnel %d, not local %d, invalid %d\n", s.PassedNotTunnel, s.PassedNotLocal, s.PassedInvalid)
	return nil
}
