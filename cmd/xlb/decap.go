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

const decapUsage = `usage: xlb decap --iface IF --allow-from A,B/N,...|none [--vip A,B/N,...] [--gue-port P]
                 [--local A,B,...] [--mode M] [--pin-dir DIR]
       xlb decap --iface IF --detach [--pin-dir DIR]
       xlb decap --iface IF --stats [--json] [--pin-dir DIR]

On a backend: attach an XDP program to IF that strips xlb's IPIP (4-in-4,
6-in-6, 4-in-6, 6-in-4) and GUE (version 0, UDP port P, default 5555)
headers from frames whose outer destination is a local address, and passes
the inner packet to the kernel. Only what a balancer sends is stripped:
the outer source must be in --allow-from (the balancers' addresses or
prefixes, both families; "none" drops every tunnel frame), the inner
destination one of the addresses this host serves (--vip; default: the
global addresses on lo, where the VIPs sit), and neither source a
martian, nor the inner source this host's, a VIP or a balancer's; the rest
is dropped and counted by reason. The local addresses are IF's global ones
unless --local names them. The program stays attached after the command
exits (a BPF link pinned at DIR/xlb-decap-IF, DIR default /sys/fs/bpf, a
bpffs); running it again replaces the program and its lists in place,
--detach removes it, --stats shows its counters and lists. Mode: auto
(native, else generic), native or generic. Needs root.
`

// cmdDecap is `xlb decap`: attach (or replace), detach, or show the
// backend-side decapsulation program of an interface.
func cmdDecap(args []string, stdout io.Writer) error {
	fs := newFlags("decap")
	iface := fs.String("iface", "", "interface")
	port := fs.Uint("gue-port", decap.DefaultGUEPort, "GUE port (gue_port of the balancer's service)")
	local := fs.String("local", "", "comma-separated local addresses (default: the interface's global addresses)")
	allowFrom := fs.String("allow-from", "", "comma-separated balancer addresses or prefixes, the outer sources accepted (required; none: accept no tunnel)")
	vips := fs.String("vip", "", "comma-separated addresses or prefixes this host serves, the inner destinations delivered (default: lo's global addresses)")
	mode := fs.String("mode", string(decap.ModeAuto), "auto, native or generic")
	pinRoot := fs.String("pin-dir", decap.DefaultPinRoot, "bpffs directory for the pins")
	detach := fs.Bool("detach", false, "detach and remove the pins")
	stats := fs.Bool("stats", false, "show the counters and local addresses")
	asJSON := fs.Bool("json", false, "with --stats: print JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, decapUsage)
			writeFlags(stdout, fs)
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
	case (*detach || *stats) && (set["gue-port"] || set["local"] || set["mode"] || set["allow-from"] || set["vip"]):
		return usageErr("--gue-port, --local, --allow-from, --vip and --mode are for attaching")
	case set["json"] && !*stats:
		return usageErr("--json goes with --stats")
	case *port == 0 || *port > 0xffff:
		return usageErr("--gue-port %d: want 1..65535", *port)
	}
	m := decap.Mode(*mode)
	if m != decap.ModeAuto && m != decap.ModeNative && m != decap.ModeGeneric {
		return usageErr("--mode %q: want auto, native or generic", *mode)
	}
	var allow, served []netip.Prefix
	if !*detach && !*stats {
		var err error
		switch {
		case !set["allow-from"]:
			return usageErr("--allow-from is required: the balancers' addresses (the outer sources to accept), or none to accept no tunnel")
		case strings.TrimSpace(*allowFrom) == "":
			return usageErr("--allow-from is empty: name the balancers' addresses, or none to accept no tunnel")
		case *allowFrom == "none":
		default:
			if allow, err = parsePrefixes(*allowFrom); err != nil {
				return usageErr("--allow-from: %v", err)
			}
		}
		if set["vip"] {
			if served, err = parsePrefixes(*vips); err != nil {
				return usageErr("--vip: %v", err)
			}
		}
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
	if !set["vip"] {
		if served, err = loopbackPrefixes(); err != nil {
			return fmt.Errorf("xlb decap: addresses of lo: %w", err)
		}
		if len(served) == 0 {
			return fmt.Errorf("xlb decap: lo holds no global address (no VIP): give the addresses this host serves with --vip")
		}
	}
	o, err := decap.Load(uint16(*port))
	if err != nil {
		return fmt.Errorf("xlb decap: %w", err)
	}
	defer o.Close() // the pins keep what is attached
	if err := o.SetLocal(addrs); err != nil {
		return usageErr("--local: %v", err)
	}
	if err := o.SetAllow(allow); err != nil {
		return usageErr("--allow-from: %v", err)
	}
	if err := o.SetVIPs(served); err != nil {
		return fmt.Errorf("xlb decap: --vip: %w", err)
	}
	used, err := decap.Pin(dir, o, link.Attrs().Index, m)
	if err != nil {
		return fmt.Errorf("xlb decap: %s: %w", *iface, err)
	}
	how := string(used) + " mode"
	if used == decap.ModeKept {
		how = "program replaced, mode kept"
	}
	fmt.Fprintf(stdout, "attached to %s (%s), pinned at %s: IPIP and GUE (port %d) to %s from %s decapsulated for %s\n",
		*iface, how, dir, *port, joinAddrs(addrs), allowedText(allow), joinPrefixes(served))
	return nil
}

// parsePrefixes parses a comma-separated list of addresses (one-address
// prefixes) and prefixes, refusing what decap.CheckPrefix refuses.
func parsePrefixes(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "none" {
			return nil, fmt.Errorf("none is the whole list or nothing")
		}
		var p netip.Prefix
		if strings.Contains(s, "/") {
			var err error
			if p, err = netip.ParsePrefix(s); err != nil {
				return nil, err
			}
		} else {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, err
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if err := decap.CheckPrefix(p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// loopbackPrefixes are lo's addresses of global scope with their prefixes
// (the kernel takes a whole prefix on lo as local): the VIPs of a backend.
func loopbackPrefixes() ([]netip.Prefix, error) {
	const familyAll, scopeUniverse = 0, 0
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return nil, err
	}
	list, err := netlink.AddrList(lo, familyAll)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range list {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.Scope != scopeUniverse || a.IPNet == nil {
			continue
		}
		ones, _ := a.IPNet.Mask.Size()
		p := netip.PrefixFrom(ip.Unmap(), ones).Masked()
		if decap.CheckPrefix(p) == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// allowedText words the allowed sources.
func allowedText(allow []netip.Prefix) string {
	if len(allow) == 0 {
		return "no balancer (every tunnel frame dropped)"
	}
	return joinPrefixes(allow)
}

// joinPrefixes lists prefixes, one-address ones as the address.
func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		if p.IsSingleIP() {
			s[i] = p.Addr().String()
		} else {
			s[i] = p.String()
		}
	}
	return strings.Join(s, ", ")
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
			Interface string         `json:"interface"`
			Ifindex   int            `json:"ifindex"`
			PinDir    string         `json:"pin_dir"`
			Local     []netip.Addr   `json:"local"`
			AllowFrom []netip.Prefix `json:"allow_from"`
			VIPs      []netip.Prefix `json:"vips"`
			Counters  decap.Stats    `json:"counters"`
		}{iface, p.Ifindex, dir, p.Local, p.Allow, p.VIPs, p.Stats})
	}
	attached := fmt.Sprintf("ifindex %d", p.Ifindex)
	if p.Ifindex == 0 {
		attached = "no longer attached (the interface is gone): --detach removes the pins"
	}
	s := p.Stats
	fmt.Fprintf(w, "interface  %s (%s), pinned at %s\n", iface, attached, dir)
	fmt.Fprintf(w, "local      %s\n", joinAddrs(p.Local))
	fmt.Fprintf(w, "allow from %s\n", allowedText(p.Allow))
	fmt.Fprintf(w, "vips       %s\n", joinPrefixes(p.VIPs))
	fmt.Fprintf(w, "decapsulated  IPIP outer v4 %d, outer v6 %d; GUE outer v4 %d, outer v6 %d\n", s.IPIP4, s.IPIP6, s.GUE4, s.GUE6)
	fmt.Fprintf(w, "passed        not a tunnel %d, not local %d, invalid %d\n", s.PassedNotTunnel, s.PassedNotLocal, s.PassedInvalid)
	fmt.Fprintf(w, "dropped       outer TTL 0 %d, outer source martian %d, outer source not allowed %d,\n", s.DroppedOuterTTL, s.DroppedOuterMartian, s.DroppedNotAllowed)
	fmt.Fprintf(w, "              inner source martian %d, inner source own %d, inner destination not served %d\n", s.DroppedInnerMartian, s.DroppedInnerOwn, s.DroppedNotServed)
	return nil
}
