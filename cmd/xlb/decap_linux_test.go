package main

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xlb/internal/nettest"
)

// TestDecap_UsageErrors: bad flag combinations are usage errors (exit 2,
// one line naming the flag) and change nothing; an interface that does not
// exist is exit 1.
func TestDecap_UsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no interface", []string{"decap"}, 2, "--iface IF is required"},
		{"detach and stats", []string{"decap", "--iface", "x", "--detach", "--stats"}, 2, "exclude each other"},
		{"port 0", []string{"decap", "--iface", "x", "--gue-port", "0"}, 2, "--gue-port 0"},
		{"port too big", []string{"decap", "--iface", "x", "--gue-port", "70000"}, 2, "--gue-port 70000"},
		{"bad mode", []string{"decap", "--iface", "x", "--mode", "fast"}, 2, `--mode "fast"`},
		{"json without stats", []string{"decap", "--iface", "x", "--json"}, 2, "--json goes with --stats"},
		{"local with detach", []string{"decap", "--iface", "x", "--detach", "--local", "10.0.0.1"}, 2, "are for attaching"},
		{"allow-from with stats", []string{"decap", "--iface", "x", "--stats", "--allow-from", "10.0.0.1"}, 2, "are for attaching"},
		{"argument", []string{"decap", "--iface", "x", "extra"}, 2, `unexpected argument "extra"`},
		{"no allow-from", []string{"decap", "--iface", "x"}, 2, "--allow-from is required"},
		{"empty allow-from", []string{"decap", "--iface", "x", "--allow-from", ""}, 2, "--allow-from is empty"},
		{"allow-from not an address", []string{"decap", "--iface", "x", "--allow-from", "10.0.0.1,lb1"}, 2, `--allow-from: ParseAddr("lb1")`},
		{"allow-from host bits", []string{"decap", "--iface", "x", "--allow-from", "10.0.0.1/24"}, 2, "host bits set"},
		{"allow-from everyone", []string{"decap", "--iface", "x", "--allow-from", "0.0.0.0/0"}, 2, "overlaps the martian prefix 0.0.0.0/8"},
		{"allow-from loopback", []string{"decap", "--iface", "x", "--allow-from", "::1"}, 2, "overlaps the martian prefix ::1/128"},
		{"allow-from none and more", []string{"decap", "--iface", "x", "--allow-from", "none,10.0.0.1"}, 2, "none is the whole list"},
		{"vip multicast", []string{"decap", "--iface", "x", "--allow-from", "10.0.0.1", "--vip", "224.0.0.1"}, 2, "--vip: decap: not a usable"},
		{"missing interface", []string{"decap", "--iface", "xdc-missing0", "--allow-from", "10.0.0.1"}, 1, "interface xdc-missing0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := xlb(tc.args...)
			o.wantCode(t, tc.code)
			wantOneLine(t, o.stderr, tc.want)
		})
	}
	if o := xlb("decap", "--help"); o.code != 0 || !strings.Contains(o.stdout, "usage: xlb decap") {
		t.Errorf("decap --help: %+v", o)
	}
}

// TestDecap_AttachStatsDetach: in a namespace of its own with a private
// bpffs, `xlb decap` refuses to attach while lo holds no VIP and no --vip
// names one; then attaches to a veth with the interface's global
// addresses (not its link-local one), the balancers of --allow-from and
// lo's global addresses as the VIPs, and leaves the program attached when
// it returns; --stats shows the interface, addresses, allowed sources,
// VIPs and the 13 counters (text and JSON); a second run with --local,
// --allow-from none and --vip replaces the program and its lists in
// place; --detach removes it, after which --stats and --detach say
// nothing is attached.
func TestDecap_AttachStatsDetach(t *testing.T) {
	nettest.RequireRoot(t)
	root := t.TempDir()
	if err := unix.Mount("bpf", root, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mounting bpffs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	ns := nettest.NewNS(t, nettest.UniqueName("xdc"))
	in, _ := ns.AddVeth(t, nettest.Veth{Name: "xdc-in", PeerName: "xdc-peer"})
	nl, err := netlink.NewHandleAt(ns.Handle)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	link, err := nl.LinkByIndex(in)
	if err != nil {
		t.Fatal(err)
	}
	lo, err := nl.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	addAddrs := func(l netlink.Link, addrs ...string) {
		for _, s := range addrs {
			a, _ := netlink.ParseAddr(s)
			a.Flags = unix.IFA_F_NODAD
			if err := nl.AddrAdd(l, a); err != nil {
				t.Fatal(err)
			}
		}
	}
	addAddrs(link, "10.204.0.11/24", "fd00:204::11/64")
	// decap runs xlb decap inside the namespace.
	decap := func(args ...string) outcome {
		var o outcome
		if err := ns.Do(func() error {
			o = xlb(append([]string{"decap", "--iface", "xdc-in", "--pin-dir", root}, args...)...)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return o
	}
	progID := func() uint32 {
		l, err := nl.LinkByIndex(in)
		if err != nil {
			t.Fatal(err)
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			return x.ProgId
		}
		return 0
	}
	type stats struct {
		Ifindex   int            `json:"ifindex"`
		Local     []netip.Addr   `json:"local"`
		AllowFrom []netip.Prefix `json:"allow_from"`
		VIPs      []netip.Prefix `json:"vips"`
		Counters  map[string]uint64
	}
	readStats := func() stats {
		o := decap("--stats", "--json")
		o.wantCode(t, 0)
		var s stats
		if err := json.Unmarshal([]byte(o.stdout), &s); err != nil {
			t.Fatalf("--stats --json: %v\n%s", err, o.stdout)
		}
		return s
	}

	o := decap("--gue-port", "6080", "--allow-from", "10.204.0.2,fd00:204::/124")
	o.wantCode(t, 1)
	wantOneLine(t, o.stderr, "lo holds no global address (no VIP): give the addresses this host serves with --vip")
	if id := progID(); id != 0 {
		t.Fatalf("program %d attached by a refused run", id)
	}
	addAddrs(lo, "10.205.0.10/32", "fd00:205::/120")

	o = decap("--gue-port", "6080", "--allow-from", "10.204.0.2,fd00:204::/124")
	o.wantCode(t, 0)
	for _, want := range []string{"attached to xdc-in (native mode)", "port 6080", "10.204.0.11", "fd00:204::11",
		"from 10.204.0.2, fd00:204::/124", "10.205.0.10", "fd00:205::/120"} {
		if !strings.Contains(o.stdout, want) {
			t.Errorf("attach: stdout %q, want %q in it", o.stdout, want)
		}
	}
	if strings.Contains(o.stdout, "fe80") {
		t.Errorf("attach: stdout %q names the link-local address", o.stdout)
	}
	first := progID()
	if first == 0 {
		t.Fatal("no XDP program on xdc-in after xlb decap returned")
	}
	s := readStats()
	if s.Ifindex != in || len(s.Local) != 2 || len(s.AllowFrom) != 2 || len(s.VIPs) != 2 || len(s.Counters) != 13 {
		t.Errorf("--stats --json: %+v, want ifindex %d, 2 local addresses, 2 allowed, 2 VIPs, 13 counters", s, in)
	}
	for _, name := range []string{"dropped_outer_ttl_zero", "dropped_outer_martian", "dropped_outer_not_allowed",
		"dropped_inner_martian", "dropped_inner_own", "dropped_inner_not_served"} {
		if _, ok := s.Counters[name]; !ok {
			t.Errorf("--stats --json: no counter %s in %v", name, s.Counters)
		}
	}
	if o := decap("--stats"); o.code != 0 || !strings.Contains(o.stdout, "local      10.204.0.11, fd00:204::11") &&
		!strings.Contains(o.stdout, "local      fd00:204::11, 10.204.0.11") {
		t.Errorf("--stats: %+v", o)
	}
	if o := decap("--stats"); !strings.Contains(o.stdout, "allow from 10.204.0.2, fd00:204::/124") &&
		!strings.Contains(o.stdout, "allow from fd00:204::/124, 10.204.0.2") ||
		!strings.Contains(o.stdout, "inner destination not served 0") {
		t.Errorf("--stats: %+v, want the allowed sources and the drop counters", o)
	}

	o = decap("--local", "10.204.0.99", "--allow-from", "none", "--vip", "10.205.1.0/24")
	o.wantCode(t, 0)
	if !strings.Contains(o.stdout, "program replaced, mode kept") {
		t.Errorf("second attach: stdout %q, want the program replaced", o.stdout)
	}
	if id := progID(); id == 0 || id == first {
		t.Errorf("second attach: program id %d, was %d", id, first)
	}
	if !strings.Contains(o.stdout, "from no balancer (every tunnel frame dropped)") {
		t.Errorf("second attach: stdout %q, want it to say no balancer is allowed", o.stdout)
	}
	if s := readStats(); len(s.Local) != 1 || s.Local[0] != netip.MustParseAddr("10.204.0.99") ||
		len(s.AllowFrom) != 0 || len(s.VIPs) != 1 || s.VIPs[0] != netip.MustParsePrefix("10.205.1.0/24") {
		t.Errorf("after --local 10.204.0.99 --allow-from none --vip 10.205.1.0/24: %+v", s)
	}

	o = decap("--detach")
	o.wantCode(t, 0)
	if !strings.Contains(o.stdout, "detached from xdc-in") {
		t.Errorf("--detach: stdout %q", o.stdout)
	}
	if id := progID(); id != 0 {
		t.Errorf("program %d still attached after --detach", id)
	}
	for _, args := range [][]string{{"--detach"}, {"--stats"}} {
		o := decap(args...)
		o.wantCode(t, 1)
		wantOneLine(t, o.stderr, "nothing attached to xdc-in")
	}
}
