package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/internal/nettest"
	"xlb/scripts/testbed"
)

// The spoof test's private addresses, used only inside its namespaces
// (the 198.51.100.0/24 and 2001:db8:: documentation sources only inside
// encapsulated frames that never leave them).
var (
	spBe4    = netip.MustParseAddr("10.206.0.11") // the backend, on the balancers' segment
	spBe6    = netip.MustParseAddr("fd00:206::11")
	spLB4    = netip.MustParseAddr("10.206.0.2") // the allowed balancer
	spLB6    = netip.MustParseAddr("fd00:206::2")
	spAtk4   = netip.MustParseAddr("10.206.0.99") // a host on the segment that is no balancer
	spAtk6   = netip.MustParseAddr("fd00:206::99")
	spVIP4   = netip.MustParseAddr("10.208.0.10") // on the backend's lo
	spVIP6   = netip.MustParseAddr("fd00:208::10")
	spFwd4   = netip.MustParseAddr("10.207.0.1") // the backend, towards the other host
	spOther4 = netip.MustParseAddr("10.207.0.2") // another host behind the backend
	spBeMAC  = net.HardwareAddr{0x02, 0x96, 0, 0, 0, 0x11}
	spLBMAC  = net.HardwareAddr{0x02, 0x96, 0, 0, 0, 0x02}
)

const (
	spPort    = 9061 // the UDP service on the VIPs, and on the other host
	spGUEPort = 6081
)

// TestDecapRefusesSpoofed: `xlb decap` on a backend (its own namespace,
// ip_forward=1 for both families, rp_filter strict, a default route back
// to the balancers' segment, a UDP service on the VIPs on lo) with
// --allow-from naming the balancer. From the balancers' segment, in
// another namespace, frames are injected that the old program
// decapsulated and the kernel took: IPIP and GUE whose inner source is
// the balancer's own address or a VIP, an inner public source from a
// host that is no balancer, outer source 0.0.0.0 with TTL 0, the same
// for IPv6, and an inner packet to another host behind the backend. None
// reaches the service, none is forwarded (the backend's forwarding
// counters stay 0 and the other host's socket gets nothing), each is
// counted under its reason in `xlb decap --stats --json`; the genuine
// IPIP and GUE frames from the balancer, sent last, are delivered.
func TestDecapRefusesSpoofed(t *testing.T) {
	t.Parallel()
	nettest.RequireRoot(t)
	buildOnce.Do(func() { buildErr = build() })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	be := nettest.NewNS(t, nettest.UniqueName("dsp-be"))
	lb := nettest.NewNS(t, nettest.UniqueName("dsp-lb"))
	other := nettest.NewNS(t, nettest.UniqueName("dsp-o"))
	spVeth(t, be, lb, "be0", "lb0", spBeMAC, spLBMAC,
		[]string{spBe4.String() + "/24", spBe6.String() + "/64"}, []string{spLB4.String() + "/24", spLB6.String() + "/64"})
	spVeth(t, be, other, "be1", "o0", nil, nil, []string{spFwd4.String() + "/24"}, []string{spOther4.String() + "/24"})
	for _, cmd := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "addr", "add", spVIP4.String() + "/32", "dev", "lo"},
		{"ip", "addr", "add", spVIP6.String() + "/128", "dev", "lo", "nodad"},
		{"ip", "route", "add", "default", "via", spLB4.String()},
		{"ip", "-6", "route", "add", "default", "via", spLB6.String()},
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"},
		{"sysctl", "-qw", "net.ipv4.conf.all.rp_filter=1"},
		{"sysctl", "-qw", "net.ipv4.conf.be0.rp_filter=1"},
	} {
		if out, err := testbed.Exec(be.Name, cmd...); err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, out)
		}
	}
	// An IPv6 address's local route comes from a work item after the
	// address (even without DAD): the genuine frame would find no route.
	for _, a := range []netip.Addr{spVIP4, spVIP6, spBe6} {
		spWaitLocal(t, be, a)
	}
	for _, cmd := range [][]string{{"ip", "link", "set", "lo", "up"}, {"ip", "route", "add", "default", "via", spFwd4.String()}} {
		if out, err := testbed.Exec(other.Name, cmd...); err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, out)
		}
	}

	// The service on the VIPs, and whatever the other host receives.
	listen := func(ns *nettest.NS, a netip.Addr) *net.UDPConn {
		var c *net.UDPConn
		err := ns.Do(func() (err error) {
			c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, spPort)))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	svc4, svc6, relayed := listen(be, spVIP4), listen(be, spVIP6), listen(other, spOther4)

	root := pinRoot(t)
	out, err := testbed.Exec(be.Name, xlbBin, "decap", "--iface", "be0", "--gue-port", strconv.Itoa(spGUEPort), "--pin-dir", root,
		"--allow-from", spLB4.String()+","+spLB6.String())
	if err != nil {
		t.Fatalf("xlb decap: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := testbed.Exec(be.Name, xlbBin, "decap", "--iface", "be0", "--detach", "--pin-dir", root); err != nil {
			t.Errorf("xlb decap --detach: %v\n%s", err, out)
		}
	})
	t.Logf("%s", strings.TrimSpace(out))

	// Every frame's UDP payload has a length of its own: the service's
	// reads say which frame arrived.
	type frame struct {
		name  string
		bytes []byte
		size  int // of the UDP payload
	}
	var spoofed []frame
	payloads := map[int]string{}
	next := 100
	build := func(name string, outerSrc, outerDst, src, dst netip.Addr, gue bool, edit func([]byte)) frame {
		next++
		payloads[next] = name
		return frame{name, spEncap(t, name, outerSrc, outerDst, src, dst, next, gue, edit), next}
	}
	ttl0 := func(f []byte) {
		f[14+8] = 0
		f[14+10], f[14+11] = 0, 0
		c := packet.Checksum(f[14:14+20], 0)
		f[14+10], f[14+11] = byte(c>>8), byte(c)
	}
	client4, client6 := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7")
	for _, gue := range []bool{false, true} {
		kind := "IPIP"
		if gue {
			kind = "GUE"
		}
		spoofed = append(spoofed,
			build(kind+" inner source the balancer's", spLB4, spBe4, spLB4, spVIP4, gue, nil),
			build(kind+" inner source the VIP", spLB4, spBe4, spVIP4, spVIP4, gue, nil),
			build(kind+" from a host that is no balancer", spAtk4, spBe4, client4, spVIP4, gue, nil),
			build(kind+" outer source 0.0.0.0, TTL 0", netip.IPv4Unspecified(), spBe4, client4, spVIP4, gue, ttl0),
			build(kind+"/6 inner source the balancer's", spLB6, spBe6, spLB6, spVIP6, gue, nil),
			build(kind+"/6 from a host that is no balancer", spAtk6, spBe6, client6, spVIP6, gue, nil),
			build(kind+" to another host behind the backend", spLB4, spBe4, client4, spOther4, gue, nil),
		)
	}
	genuine := []frame{
		build("genuine IPIP", spLB4, spBe4, client4, spVIP4, false, nil),
		build("genuine GUE/6", spLB6, spBe6, client6, spVIP6, true, nil),
	}
	want := map[string]uint64{ // per reason, of the spoofed frames
		"dropped_inner_own":         6,
		"dropped_outer_not_allowed": 4,
		"dropped_outer_ttl_zero":    2,
		"dropped_inner_not_served":  2,
	}

	var raw int
	if err := lb.Do(func() (err error) {
		raw, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(raw)
	lbIf, err := spIfindex(lb, "lb0")
	if err != nil {
		t.Fatal(err)
	}
	sa := &unix.SockaddrLinklayer{Ifindex: lbIf, Protocol: nettest.Htons(unix.ETH_P_ALL)}
	for _, f := range append(append([]frame{}, spoofed...), genuine...) {
		if err := unix.Sendto(raw, f.bytes, 0, sa); err != nil {
			t.Fatalf("sending %s: %v", f.name, err)
		}
	}

	// The genuine frames went last, on the same link and queue: when both
	// have arrived, every spoofed frame has been judged.
	for i, c := range []*net.UDPConn{svc4, svc6} {
		for _, n := range spReadUntil(t, c, genuine[i].size, 20*time.Second) {
			t.Errorf("the service on %s received %q (%d bytes)", c.LocalAddr(), payloads[n], n)
		}
	}
	for _, c := range []*net.UDPConn{svc4, svc6, relayed} {
		for _, n := range spDrain(t, c) {
			t.Errorf("%s received %q (%d bytes)", c.LocalAddr(), payloads[n], n)
		}
	}
	for file, counter := range map[string]string{"/proc/net/snmp": "ForwDatagrams", "/proc/net/snmp6": "Ip6OutForwDatagrams"} {
		if n := spSNMP(t, be.Name, file, counter); n != 0 {
			t.Errorf("the backend forwarded %d packets (%s %s)", n, file, counter)
		}
	}
	out, err = testbed.Exec(be.Name, xlbBin, "decap", "--iface", "be0", "--stats", "--json", "--pin-dir", root)
	if err != nil {
		t.Fatalf("xlb decap --stats: %v\n%s", err, out)
	}
	var st struct {
		Counters map[string]uint64 `json:"counters"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("xlb decap --stats --json: %v\n%s", err, out)
	}
	for reason, n := range want {
		if st.Counters[reason] != n {
			t.Errorf("%s = %d, want %d (counters %v)", reason, st.Counters[reason], n, st.Counters)
		}
	}
	if st.Counters["ipip_outer_v4"] != 1 || st.Counters["gue_outer_v6"] != 1 {
		t.Errorf("decapsulated ipip_outer_v4 %d, gue_outer_v6 %d, want 1 each (the genuine frames)", st.Counters["ipip_outer_v4"], st.Counters["gue_outer_v6"])
	}
	if !t.Failed() {
		t.Logf("%d spoofed frames dropped and counted, none delivered or forwarded; %d genuine delivered", len(spoofed), len(genuine))
	}
}

// spVeth makes a veth pair from a (name, addresses aAddrs) to b (peer,
// bAddrs), both up.
func spVeth(t *testing.T, a, b *nettest.NS, name, peer string, mac, peerMAC net.HardwareAddr, aAddrs, bAddrs []string) {
	t.Helper()
	err := a.Do(func() error {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: mac}, PeerName: peer,
			PeerHardwareAddr: peerMAC, PeerNamespace: netlink.NsFd(int(b.Handle))}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("adding veth %s/%s: %w", name, peer, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, end := range []struct {
		ns    *nettest.NS
		name  string
		addrs []string
	}{{a, name, aAddrs}, {b, peer, bAddrs}} {
		err := end.ns.Do(func() error {
			l, err := netlink.LinkByName(end.name)
			if err != nil {
				return err
			}
			for _, s := range end.addrs {
				addr, err := netlink.ParseAddr(s)
				if err != nil {
					return err
				}
				addr.Flags = unix.IFA_F_NODAD
				if err := netlink.AddrAdd(l, addr); err != nil {
					return fmt.Errorf("%s on %s: %w", s, end.name, err)
				}
			}
			return netlink.LinkSetUp(l)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// spWaitLocal waits until ns routes a to itself; bounded against hangs
// only.
func spWaitLocal(t *testing.T, ns *nettest.NS, a netip.Addr) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		local := false
		err := ns.Do(func() error {
			rs, err := netlink.RouteGet(a.AsSlice())
			local = err == nil && len(rs) > 0 && rs[0].Type == unix.RTN_LOCAL
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if local {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no local route to %v", ns.Name, a)
		}
	}
}

// spIfindex is the index of name in ns.
func spIfindex(ns *nettest.NS, name string) (int, error) {
	var idx int
	err := ns.Do(func() error {
		l, err := netlink.LinkByName(name)
		if err == nil {
			idx = l.Attrs().Index
		}
		return err
	})
	return idx, err
}

// spEncap is a client's UDP datagram src → dst:spPort with n payload
// bytes, encapsulated as xlb does (IPIP, or GUE to spGUEPort) from
// outerSrc to outerDst, from the balancer's MAC to the backend's; edit,
// when not nil, changes the result.
func spEncap(t *testing.T, name string, outerSrc, outerDst, src, dst netip.Addr, n int, gue bool, edit func([]byte)) []byte {
	t.Helper()
	in, err := craft.Build(&craft.Packet{Src: src, Dst: dst, Proto: packet.ProtoUDP, SrcPort: 41000, DstPort: spPort, PayloadLen: n})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var p packet.Parsed
	if err := packet.Parse(in, &p); err != nil {
		t.Fatalf("%s: parsing the inner frame: %v", name, err)
	}
	const headroom = 128
	buf := make([]byte, headroom+len(in))
	copy(buf[headroom:], in)
	e := packet.Encap{SrcMAC: [6]byte(spLBMAC), DstMAC: [6]byte(spBeMAC), OuterSrc: outerSrc.As16(), OuterDst: outerDst.As16(),
		OuterV6: outerDst.Is6(), GUE: gue, GUEPort: spGUEPort, FlowHash: uint32(n), IPID: uint16(n)}
	off, l, err := packet.Encapsulate(buf, headroom, &p, &e, 9000)
	if err != nil {
		t.Fatalf("%s: Encapsulate: %v", name, err)
	}
	f := buf[off : off+l]
	if edit != nil {
		edit(f)
	}
	return f
}

// spReadUntil reads c until a datagram of size n arrives (bounded by
// timeout against hangs only) and returns the sizes of those before it.
func spReadUntil(t *testing.T, c *net.UDPConn, n int, timeout time.Duration) []int {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		t.Fatal(err)
	}
	var before []int
	buf := make([]byte, 2048)
	for {
		got, err := c.Read(buf)
		if err != nil {
			t.Fatalf("%s: no datagram of %d bytes: %v", c.LocalAddr(), n, err)
		}
		if got == n {
			return before
		}
		before = append(before, got)
	}
}

// spDrain returns the sizes of the datagrams already queued on c, without
// waiting for more (a read past its deadline would not even look).
func spDrain(t *testing.T, c *net.UDPConn) []int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	buf := make([]byte, 2048)
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if errors.Is(rerr, unix.EAGAIN) {
			return out
		}
		if rerr != nil {
			t.Fatalf("%s: %v", c.LocalAddr(), rerr)
		}
		out = append(out, n)
	}
}

// spSNMP reads one counter of /proc/net/snmp (the Ip: table) or snmp6 in
// ns.
func spSNMP(t *testing.T, ns, file, counter string) uint64 {
	t.Helper()
	out, err := testbed.Exec(ns, "cat", file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		if file == "/proc/net/snmp6" && len(f) == 2 && f[0] == counter {
			n, _ := strconv.ParseUint(f[1], 10, 64)
			return n
		}
		if file == "/proc/net/snmp" && len(f) > 0 && f[0] == "Ip:" && i+1 < len(lines) {
			vals := strings.Fields(lines[i+1])
			for j, name := range f {
				if name == counter && j < len(vals) {
					n, _ := strconv.ParseUint(vals[j], 10, 64)
					return n
				}
			}
		}
	}
	t.Fatalf("no %s in %s:\n%s", counter, file, out)
	return 0
}
