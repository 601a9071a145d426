package decap

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/internal/nettest"
)

// bpffs mounts a private bpffs on a temporary directory for tb and
// unmounts it at the end (which also drops whatever is still pinned).
func bpffs(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		if errors.Is(err, unix.ENODEV) {
			tb.Skipf("kernel lacks bpffs: %v", err)
		}
		tb.Fatalf("mounting bpffs on %s: %v", dir, err)
	}
	tb.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// TestPinDecapsulatesRealTraffic: in a namespace of its own, the program
// pinned on one end of a veth pair — its loader's objects closed, as when
// `xlb decap` exits — turns IPIP and GUE frames injected from the other
// end (the encapsulation dataplane/packet writes, 4-in-4 IPIP and 6-in-6
// GUE) into UDP datagrams that reach a socket bound to the VIP on lo.
// Pinning again replaces the program in place; ReadPinned shows the
// interface, the local addresses and the counters; Unpin detaches it, after
// which the same frames no longer reach the socket; a second Unpin says
// there is nothing pinned.
func TestPinDecapsulatesRealTraffic(t *testing.T) {
	nettest.RequireRoot(t)
	root := bpffs(t)
	ns := nettest.NewNS(t, nettest.UniqueName("dcpt"))
	in, peer := ns.AddVeth(t, nettest.Veth{Name: "dcpt-in", PeerName: "dcpt-peer",
		MAC: beMAC[:], PeerMAC: lbMAC[:]})
	nl, err := netlink.NewHandleAt(ns.Handle)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	inLink, err := nl.LinkByIndex(in)
	if err != nil {
		t.Fatal(err)
	}
	lo, err := nl.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		l    netlink.Link
		addr string
	}{{inLink, local4.String() + "/24"}, {inLink, local6.String() + "/64"}, {lo, vip4.String() + "/32"}, {lo, vip6.String() + "/128"}} {
		nlAddr, err := netlink.ParseAddr(a.addr)
		if err != nil {
			t.Fatal(err)
		}
		nlAddr.Flags = unix.IFA_F_NODAD
		if err := nl.AddrAdd(a.l, nlAddr); err != nil {
			t.Fatalf("adding %s: %v", a.addr, err)
		}
	}
	for _, vip := range []netip.Addr{vip4, vip6} {
		waitLocalRoute(t, nl, vip)
	}

	const port = 9053
	var socks [2]*net.UDPConn
	for i, vip := range []netip.Addr{vip4, vip6} {
		err := ns.Do(func() (err error) {
			socks[i], err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(vip, port)))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		defer socks[i].Close()
	}
	var raw int
	if err := ns.Do(func() (err error) {
		raw, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(raw)

	// frames are the injected frames, each with the payload its socket
	// must read.
	type sent struct {
		frame   []byte
		sock    *net.UDPConn
		payload string
	}
	build := func(v6, gue bool, payload string) sent {
		p := &craft.Packet{Src: client4, Dst: vip4, Proto: packet.ProtoUDP, SrcPort: 41000, DstPort: port,
			PayloadLen: len(payload)}
		src, dst, sock := lb4, local4, socks[0]
		if v6 {
			p.Src, p.Dst, src, dst, sock = client6, vip6, lb6, local6, socks[1]
		}
		f, err := craft.Build(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := setUDPPayload(f, payload); err != nil {
			t.Fatal(err)
		}
		return sent{encap(t, f, src, dst, gue), sock, payload}
	}
	frames := []sent{build(false, false, "ipip 4-in-4"), build(true, true, "gue 6-in-6")}
	deliver := func(s sent) (string, error) {
		sa := &unix.SockaddrLinklayer{Ifindex: peer, Protocol: nettest.Htons(unix.ETH_P_ALL)}
		if err := unix.Sendto(raw, s.frame, 0, sa); err != nil {
			return "", err
		}
		buf := make([]byte, 2048)
		if err := s.sock.SetReadDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
			return "", err
		}
		n, err := s.sock.Read(buf)
		return string(buf[:n]), err
	}

	dir := PinDir(root, "dcpt-in")
	pin := func() Mode {
		o := load(t, testPort)
		var mode Mode
		err := ns.Do(func() (err error) { mode, err = Pin(dir, o, in, ModeNative); return err })
		if err != nil {
			t.Fatalf("Pin: %v", err)
		}
		if err := o.Close(); err != nil { // the pins keep everything
			t.Fatal(err)
		}
		return mode
	}
	if mode := pin(); mode != ModeNative {
		t.Errorf("first Pin: mode %q, want native", mode)
	}
	id := xdpProgID(t, nl, in)
	if id == 0 {
		t.Fatal("no XDP program on dcpt-in after Pin")
	}
	for _, s := range frames {
		got, err := deliver(s)
		if err != nil || got != s.payload {
			t.Errorf("%q: socket read %q, %v", s.payload, got, err)
			out, _ := exec.Command("ip", "netns", "exec", ns.Name, "cat", "/proc/net/snmp6").CombinedOutput()
			for _, l := range strings.Split(string(out), "\n") {
				if f := strings.Fields(l); len(f) == 2 && f[1] != "0" {
					t.Log(l)
				}
			}
			out, _ = exec.Command("ip", "netns", "exec", ns.Name, "ip", "-6", "addr").CombinedOutput()
			t.Log(string(out))
		}
	}
	if mode := pin(); mode != ModeKept {
		t.Errorf("second Pin: mode %q, want kept (the pinned link updated)", mode)
	}
	if id2 := xdpProgID(t, nl, in); id2 == 0 || id2 == id {
		t.Errorf("after the second Pin the program id is %d, was %d: not replaced", id2, id)
	}
	for _, s := range frames {
		got, err := deliver(s)
		if err != nil || got != s.payload {
			t.Errorf("after re-pinning, %q: socket read %q, %v", s.payload, got, err)
		}
	}
	p, err := ReadPinned(dir)
	if err != nil {
		t.Fatal(err)
	}
	if p.Ifindex != in || len(p.Local) != 2 || len(p.Allow) != 2 || len(p.VIPs) != 2 || p.Stats.IPIP4 != 1 || p.Stats.GUE6 != 1 {
		t.Errorf("ReadPinned: %+v, want ifindex %d, 2 local addresses, 2 allowed, 2 VIPs, one IPIP/v4 and one GUE/v6 since the second Pin", p, in)
	}

	if err := Unpin(dir); err != nil {
		t.Fatalf("Unpin: %v", err)
	}
	if id := xdpProgID(t, nl, in); id != 0 {
		t.Errorf("program %d still on dcpt-in after Unpin", id)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left after Unpin: %v", dir, err)
	}
	if got, err := deliver(frames[0]); err == nil {
		t.Errorf("after Unpin an IPIP frame still reached the socket: %q", got)
	}
	if err := Unpin(dir); !errors.Is(err, ErrNotPinned) {
		t.Errorf("second Unpin: %v, want ErrNotPinned", err)
	}
	if _, err := ReadPinned(dir); !errors.Is(err, ErrNotPinned) {
		t.Errorf("ReadPinned after Unpin: %v, want ErrNotPinned", err)
	}
}

// waitLocalRoute waits until the kernel routes a to this host: an IPv6
// address's local route comes from a work item after the address, even
// without DAD, and a packet before it finds no route. Bounded against
// hangs only.
func waitLocalRoute(tb testing.TB, nl *netlink.Handle, a netip.Addr) {
	tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		rs, err := nl.RouteGet(a.AsSlice())
		if err == nil && len(rs) > 0 && rs[0].Type == unix.RTN_LOCAL {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no local route to %v: %v, %v", a, rs, err)
		}
	}
}

// TestPinNeedsBPFFS: a pin root that is not a bpffs is refused with a
// message that says how to mount one, and nothing is attached.
func TestPinNeedsBPFFS(t *testing.T) {
	o := load(t, testPort)
	_, err := Pin(filepath.Join(t.TempDir(), "xlb-decap-x"), o, 1, ModeGeneric)
	if err == nil || !strings.Contains(err.Error(), "mount -t bpf") {
		t.Errorf("Pin under a tmpfs: %v, want a not-a-bpf-filesystem error", err)
	}
}

// xdpProgID is the id of the XDP program on ifindex (0: none).
func xdpProgID(tb testing.TB, nl *netlink.Handle, ifindex int) uint32 {
	tb.Helper()
	l, err := nl.LinkByIndex(ifindex)
	if err != nil {
		tb.Fatal(err)
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return x.ProgId
	}
	return 0
}

// setUDPPayload writes payload at the end of the UDP datagram of an IPv4
// or IPv6 frame (crafted with that payload length) and recomputes its
// checksum.
func setUDPPayload(f []byte, payload string) error {
	var p packet.Parsed
	if err := packet.Parse(f, &p); err != nil {
		return err
	}
	udp := f[p.L4Off : p.L3Off+p.IPLen] // not the Ethernet padding
	copy(udp[len(udp)-len(payload):], payload)
	udp[6], udp[7] = 0, 0
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	ip := f[p.L3Off:]
	if p.IPVersion == 4 {
		add(ip[12:20])
	} else {
		add(ip[8:40])
	}
	n := len(udp)
	add([]byte{0, 17, byte(n >> 8), byte(n)})
	add(udp)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	c := ^uint16(sum)
	if c == 0 {
		c = 0xffff
	}
	udp[6], udp[7] = byte(c>>8), byte(c)
	return nil
}

// TestPinFailureLeavesNothing: an attach that fails (no such interface)
// leaves no pin directory behind.
func TestPinFailureLeavesNothing(t *testing.T) {
	nettest.RequireRoot(t)
	root := bpffs(t)
	o := load(t, testPort)
	dir := PinDir(root, "nosuch")
	if _, err := Pin(dir, o, 1<<30, ModeGeneric); err == nil {
		t.Fatal("Pin to a missing interface succeeded")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left after a failed Pin: %v", dir, err)
	}
}
