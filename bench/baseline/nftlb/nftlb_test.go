package nftlb

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"xlb/bench/baseline/internal/bltest"
	"xlb/internal/nsx"

	"xlb/internal/nettest"
)

func TestMain(m *testing.M) { os.Exit(nettest.MainCheckFDs(m)) }

func requireNft(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		tb.Skip("nft not installed (apt-get install nftables); CI installs it")
	}
}

func backends4() []Backend {
	out := make([]Backend, len(bltest.Backends))
	for i, m := range bltest.Backends {
		out[i] = Backend{IP: netip.AddrFrom4([4]byte{10, 203, 0, byte(11 + i)}), MAC: m}
	}
	return out
}

func backends6() []Backend {
	out := make([]Backend, len(bltest.Backends))
	for i, m := range bltest.Backends {
		out[i] = Backend{IP: netip.MustParseAddr(fmt.Sprintf("fd00:203::%d", 11+i)), MAC: m}
	}
	return out
}

func start(tb testing.TB, cfg Config) *LB {
	tb.Helper()
	lb, err := Start(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("Start: %v", err)
	}
	tb.Cleanup(func() { lb.Close() })
	return lb
}

// state is what Start changes in the middle namespace.
type state struct {
	tables  string
	routes  int
	neighs  int
	sysctls map[string]string
}

func snapshot(tb testing.TB, ns string) state {
	tb.Helper()
	out, err := nsx.Run(ns, "", "nft", "list", "tables")
	if err != nil {
		tb.Fatal(err)
	}
	s := state{tables: out, sysctls: map[string]string{}}
	err = nsx.Do(ns, func() error {
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			rs, err := netlink.RouteList(nil, fam)
			if err != nil {
				return err
			}
			for _, r := range rs {
				if r.Dst != nil && r.Dst.IP.IsPrivate() {
					s.routes++
				}
			}
			ns, err := netlink.NeighList(0, fam)
			if err != nil {
				return err
			}
			for _, n := range ns {
				if n.State == netlink.NUD_PERMANENT {
					s.neighs++
				}
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range []string{"net/ipv4/ip_forward", "net/ipv4/conf/all/rp_filter", "net/ipv4/conf/all/send_redirects",
		"net/ipv4/conf/" + bltest.XName + "/send_redirects", "net/ipv6/conf/all/forwarding"} {
		v, err := nsx.ReadSysctl(ns, p)
		if err != nil {
			tb.Fatal(err)
		}
		s.sysctls[p] = v
	}
	return s
}

// exchange sends flows UDP frames (sizes 64..1500) from the peer to vip,
// each twice when twice is set, and returns, per source port, the
// frames that came back out of the middle hop.
func exchange(t *testing.T, bed *bltest.Bed, client, vip netip.Addr, flows int, twice bool) (sent, got map[uint16][][]byte) {
	t.Helper()
	sent, got = map[uint16][][]byte{}, map[uint16][][]byte{}
	n := 0
	for i := range flows {
		sport := uint16(20000 + i)
		f := bltest.UDP(t, client, vip, sport, 53, 18+(i*97)%(1472-18+1-20))
		sent[sport] = append(sent[sport], f)
		bed.Send(t, f)
		n++
		if twice {
			sent[sport] = append(sent[sport], f)
			bed.Send(t, f)
			n++
		}
	}
	l4, protoOff := 14+20, 14+9
	if vip.Is6() {
		l4, protoOff = 14+40, 14+6
	}
	// UDP from the middle hop (not its own NDP or MLD).
	ours := func(b []byte) bool { return len(b) > l4+8 && bytes.Equal(b[6:12], bltest.XMAC) && b[protoOff] == 17 }
	frames := bed.Collect(t, n, 5*time.Second, ours)
	frames = append(frames, bed.Collect(t, 1, 200*time.Millisecond, ours)...)
	if len(frames) != n {
		t.Fatalf("%d frames came back, want %d", len(frames), n)
	}
	for _, f := range frames {
		sport := binary.BigEndian.Uint16(f[l4:])
		got[sport] = append(got[sport], f)
	}
	return sent, got
}

// check verifies a forwarded frame against the frame sent and returns the
// backend index it went to: destination MAC and IP of one backend (the
// same one), source MAC the interface's, the client's address and ports
// kept, the payload intact, the TTL or hop limit one less.
func check(t *testing.T, out, in []byte, bes []Backend) int {
	t.Helper()
	i := bltest.MACIndex(macs(bes), out[:6])
	if i < 0 {
		t.Fatalf("destination MAC %x is no backend's", out[:6])
	}
	v6 := bes[0].IP.Is6()
	var dst netip.Addr
	var ttlOff, l4 int
	if v6 {
		dst, _ = netip.AddrFromSlice(out[14+24 : 14+40])
		ttlOff, l4 = 14+7, 14+40
		if !bytes.Equal(out[14+8:14+24], in[14+8:14+24]) {
			t.Fatal("source address changed")
		}
	} else {
		dst, _ = netip.AddrFromSlice(out[14+16 : 14+20])
		ttlOff, l4 = 14+8, 14+20
		if !bytes.Equal(out[14+12:14+16], in[14+12:14+16]) {
			t.Fatal("source address changed")
		}
	}
	if dst != bes[i].IP {
		t.Fatalf("to MAC %s with IP %s: the mapping says %s", bes[i].MAC, dst, bes[i].IP)
	}
	if out[ttlOff] != in[ttlOff]-1 {
		t.Fatalf("TTL %d, sent %d: not forwarded once", out[ttlOff], in[ttlOff])
	}
	if !bytes.Equal(out[l4:l4+4], in[l4:l4+4]) || !bytes.Equal(out[l4+8:], in[l4+8:]) {
		t.Fatal("ports or payload changed")
	}
	return i
}

func macs(bes []Backend) []net.HardwareAddr {
	out := make([]net.HardwareAddr, len(bes))
	for i, b := range bes {
		out[i] = b.MAC
	}
	return out
}

// TestForwards: UDP frames of many flows to the VIP come back out of the
// middle hop DNATed to a backend, with that backend's MAC; numgen spreads
// new flows round-robin, jhash keeps a 5-tuple on one backend across a
// reinstall; Close leaves the namespace as it was.
func TestForwards(t *testing.T) {
	requireNft(t)
	const flows = 150
	for _, tc := range []struct {
		name  string
		algo  Algo
		vip   netip.Addr
		bes   []Backend
		ipv6  bool
		twice bool
	}{
		{"numgen IPv4", AlgoNumgen, bltest.VIP4, backends4(), false, true},
		{"jhash IPv4", AlgoJhash, bltest.VIP4, backends4(), false, false},
		{"numgen IPv6", AlgoNumgen, bltest.VIP6, backends6(), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bed := bltest.New(t, "blnf", bltest.Opts{IPv6: tc.ipv6})
			before := snapshot(t, bed.MidNS)
			client := bltest.Client4
			if tc.ipv6 {
				client = bltest.Client6
			}
			cfg := Config{NS: bed.MidNS, Iface: bltest.XName, VIP: tc.vip, Port: 53, Backends: tc.bes, Algo: tc.algo, Seed: 7}
			lb := start(t, cfg)
			sent, got := exchange(t, bed, client, tc.vip, flows, tc.twice)
			counts := make([]int, len(tc.bes))
			chosen := map[uint16]int{}
			for sport, outs := range got {
				in := sent[sport]
				if len(in) == 0 || len(outs) != len(in) {
					t.Fatalf("port %d: %d frames back for %d sent", sport, len(outs), len(in))
				}
				i := check(t, outs[0], in[0], tc.bes)
				for _, o := range outs[1:] {
					if j := check(t, o, in[0], tc.bes); j != i {
						t.Fatalf("port %d: one flow sent to backends %d and %d", sport, i, j)
					}
				}
				chosen[sport] = i
				counts[i]++
			}
			for i, c := range counts {
				if tc.algo == AlgoNumgen && c != flows/len(tc.bes) {
					t.Errorf("numgen: backend %d got %d of %d flows, want an equal share (%v)", i, c, flows, counts)
				}
				if c == 0 {
					t.Errorf("backend %d got no flow (%v)", i, counts)
				}
			}
			st, err := lb.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if st.Flows != flows {
				t.Errorf("counter %d flows, want %d", st.Flows, flows)
			}
			t.Logf("%s: %v per backend, %+v", tc.name, counts, st)

			if tc.algo == AlgoJhash {
				// Same 5-tuples after a reinstall (conntrack flushed by
				// Close): the same backends.
				if err := lb.Close(); err != nil {
					t.Fatal(err)
				}
				lb = start(t, cfg)
				_, again := exchange(t, bed, client, tc.vip, flows, false)
				for sport, outs := range again {
					if i := check(t, outs[0], sent[sport][0], tc.bes); i != chosen[sport] {
						t.Fatalf("jhash: port %d went to backend %d, then %d", sport, chosen[sport], i)
					}
				}
			}
			if err := lb.Close(); err != nil {
				t.Fatal(err)
			}
			if after := snapshot(t, bed.MidNS); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("after Close the namespace differs:\n%+v\nbefore:\n%+v", after, before)
			}
		})
	}
}

// TestIdempotent: a table left behind by a crashed run is replaced, a
// second Start over a running one leaves one rule, and nothing of the old
// table survives.
func TestIdempotent(t *testing.T) {
	requireNft(t)
	bed := bltest.New(t, "blnf", bltest.Opts{})
	if _, err := nsx.Run(bed.MidNS, "table ip blnf_lb {\n\tchain junk {\n\t\ttype filter hook input priority 0; policy drop;\n\t}\n}\n", "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	cfg := Config{NS: bed.MidNS, Iface: bltest.XName, VIP: bltest.VIP4, Port: 53, Backends: backends4()}
	a := start(t, cfg)
	b := start(t, cfg)
	out, err := nsx.Run(bed.MidNS, "", "nft", "list", "table", "ip", DefaultTable)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "junk") || strings.Count(out, "dnat to") != 1 {
		t.Fatalf("table after two Starts over a leftover:\n%s", out)
	}
	if a.Ruleset() != b.Ruleset() {
		t.Fatal("two Starts of one config made different rulesets")
	}
	b.Close()
	a.Close()
	if out, _ := nsx.Run(bed.MidNS, "", "nft", "list", "tables"); strings.Contains(out, DefaultTable) {
		t.Fatalf("table still there after Close: %s", out)
	}
}

// TestRefuses: bad configurations and a missing nft are errors.
func TestRefuses(t *testing.T) {
	ok := Config{Iface: "x", VIP: bltest.VIP4, Backends: backends4()}
	for name, c := range map[string]Config{
		"no backends":    {Iface: "x", VIP: bltest.VIP4},
		"mixed family":   {Iface: "x", VIP: bltest.VIP6, Backends: backends4()},
		"bad algo":       {Iface: "x", VIP: bltest.VIP4, Backends: backends4(), Algo: "random"},
		"bad table":      {Iface: "x", VIP: bltest.VIP4, Backends: backends4(), Table: "a b"},
		"no interface":   {VIP: bltest.VIP4, Backends: backends4()},
		"no VIP":         {Iface: "x", Backends: backends4()},
		"bad protocol":   {Iface: "x", VIP: bltest.VIP4, Backends: backends4(), Proto: "sctp"},
		"bad MAC":        {Iface: "x", VIP: bltest.VIP4, Backends: []Backend{{IP: bltest.VIP4, MAC: net.HardwareAddr{1}}}},
		"mapped backend": {Iface: "x", VIP: bltest.VIP4, Backends: []Backend{{IP: netip.AddrFrom16(bltest.VIP4.As16()), MAC: bltest.Backends[0]}}},
	} {
		if _, err := Start(context.Background(), c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	t.Run("nft missing", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		_, err := Start(context.Background(), ok)
		if !errors.Is(err, ErrNoNft) || !strings.Contains(err.Error(), "nft not installed (apt-get install nftables)") {
			t.Fatalf("%v, want the install hint", err)
		}
	})
}

// TestXDPOnInterface: an XDP program held by a BPF link (a running
// forwarder) makes Start fail and stays; one attached through netlink (a
// leftover) is detached.
func TestXDPOnInterface(t *testing.T) {
	requireNft(t)
	bed := bltest.New(t, "blnf", bltest.Opts{})
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "Dual MIT/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	cfg := Config{NS: bed.MidNS, Iface: bltest.XName, VIP: bltest.VIP4, Port: 53, Backends: backends4()}
	attached := func() bool { return bltest.XDPAttached(t, bed.MidNS, bltest.XName) }

	var lk link.Link
	if err := nsx.Do(bed.MidNS, func() (err error) {
		lk, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: bed.X.Index})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if lb, err := Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "BPF link") {
		if lb != nil {
			lb.Close()
		}
		t.Fatalf("Start over a BPF link's program: %v, want an error naming it", err)
	}
	if !attached() {
		t.Fatal("the BPF link's program was detached")
	}
	lk.Close()

	if err := nsx.Do(bed.MidNS, func() error {
		l, err := netlink.LinkByName(bltest.XName)
		if err != nil {
			return err
		}
		return netlink.LinkSetXdpFd(l, prog.FD())
	}); err != nil {
		t.Fatal(err)
	}
	if !attached() {
		t.Fatal("netlink attach did not take")
	}
	start(t, cfg)
	if attached() {
		t.Fatal("Start left the netlink-attached program on")
	}
}
