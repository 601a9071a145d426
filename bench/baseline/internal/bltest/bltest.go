// Package bltest is the baselines' test bed: two throwaway named network
// namespaces joined by a veth pair. The middle one ("m") holds the
// forwarder's end X; the generator one ("g") holds the peer P, where an
// AF_PACKET socket injects crafted frames and another captures what comes
// back. Only tests import it.
package bltest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/internal/nettest"
	"xlb/internal/nsx"
)

// Fixed addresses of the bed; private, used only inside its namespaces.
var (
	XMAC     = net.HardwareAddr{0x02, 0xb1, 0, 0, 0, 0x01}
	PMAC     = net.HardwareAddr{0x02, 0xb1, 0, 0, 0, 0x02}
	VIP4     = netip.MustParseAddr("10.201.0.10")
	VIP6     = netip.MustParseAddr("fd00:201::10")
	Client4  = netip.MustParseAddr("10.202.0.2")
	Client6  = netip.MustParseAddr("fd00:202::2")
	XAddr4   = netip.MustParseAddr("10.203.0.1")
	Backends = []net.HardwareAddr{
		{0x02, 0xb1, 0xbe, 0, 0, 0x01},
		{0x02, 0xb1, 0xbe, 0, 0, 0x02},
		{0x02, 0xb1, 0xbe, 0, 0, 0x03},
	}
)

// Interface names; each namespace has one, so beds never clash.
const (
	XName = "blx"
	PName = "blp"
)

// Opts shape the bed.
type Opts struct {
	// XQueues is X's number of rx and tx queues; P gets as many tx queues
	// (native XDP on veth needs X's rx queues >= P's tx queues), and
	// frames spread over them by flow hash. Default 1.
	XQueues int
	// IPv6 leaves IPv6 on; by default it is off in both namespaces, so the
	// kernel sends nothing on its own.
	IPv6 bool
}

// Bed is the test bed.
type Bed struct {
	MidNS, GenNS string
	X, P         nsx.Link
	inj, cap     int // AF_PACKET sockets on P
}

var seq atomic.Int32

// New makes the bed with namespaces named prefix<pid>-<n>m and ...g and
// removes everything when the test ends.
func New(tb testing.TB, prefix string, o Opts) *Bed {
	tb.Helper()
	nettest.RequireRoot(tb)
	if o.XQueues <= 0 {
		o.XQueues = 1
	}
	n := seq.Add(1)
	b := &Bed{
		MidNS: fmt.Sprintf("%s%d-%dm", prefix, os.Getpid(), n),
		GenNS: fmt.Sprintf("%s%d-%dg", prefix, os.Getpid(), n),
	}
	for _, name := range []string{b.MidNS, b.GenNS} {
		nettest.NewNS(tb, name)
		if !o.IPv6 {
			if err := nsx.Do(name, nettest.DisableIPv6); err != nil {
				tb.Fatalf("namespace %s: %v", name, err)
			}
		}
	}
	err := nsx.Do(b.MidNS, func() error {
		g, err := netns.GetFromName(b.GenNS)
		if err != nil {
			return err
		}
		defer g.Close()
		veth := &netlink.Veth{
			LinkAttrs:        netlink.LinkAttrs{Name: XName, HardwareAddr: XMAC, NumTxQueues: o.XQueues, NumRxQueues: o.XQueues},
			PeerName:         PName,
			PeerHardwareAddr: PMAC,
			PeerNumTxQueues:  uint32(o.XQueues),
			PeerNumRxQueues:  uint32(o.XQueues),
			PeerNamespace:    netlink.NsFd(g),
		}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("adding veth: %w", err)
		}
		l, err := netlink.LinkByName(XName)
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	})
	if err != nil {
		tb.Fatalf("veth in %s: %v", b.MidNS, err)
	}
	err = nsx.Do(b.GenNS, func() error {
		l, err := netlink.LinkByName(PName)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		if b.inj, err = packetSocket(l.Attrs().Index, unix.ETH_P_ALL, false); err != nil {
			return err
		}
		b.cap, err = packetSocket(l.Attrs().Index, unix.ETH_P_ALL, true)
		return err
	})
	for _, fd := range []int{b.inj, b.cap} {
		if fd > 0 {
			tb.Cleanup(func() { unix.Close(fd) })
		}
	}
	if err != nil {
		tb.Fatalf("peer in %s: %v", b.GenNS, err)
	}
	if b.X, err = nsx.LookupLink(b.MidNS, XName); err != nil {
		tb.Fatal(err)
	}
	if b.P, err = nsx.LookupLink(b.GenNS, PName); err != nil {
		tb.Fatal(err)
	}
	return b
}

// packetSocket opens an AF_PACKET socket bound to ifindex; a capturing one
// has a short receive timeout.
func packetSocket(ifindex int, proto uint16, capture bool) (int, error) {
	p := proto
	if !capture {
		p = 0 // an injector receives nothing
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(nettest.Htons(p)))
	if err != nil {
		return -1, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: nettest.Htons(p), Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("binding AF_PACKET socket: %w", err)
	}
	if capture {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20); err != nil {
			unix.Close(fd)
			return -1, err
		}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100_000}); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// Send injects frames on P (they arrive on X).
func (b *Bed) Send(tb testing.TB, frames ...[]byte) {
	tb.Helper()
	for _, f := range frames {
		for {
			_, err := unix.Write(b.inj, f)
			if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) {
				time.Sleep(time.Millisecond)
				continue
			}
			if err != nil {
				tb.Fatalf("sending on %s: %v", PName, err)
			}
			break
		}
	}
}

// Collect returns the frames P receives (not the ones it sends) for which
// keep returns true, until it has n or timeout passes.
func (b *Bed) Collect(tb testing.TB, n int, timeout time.Duration, keep func([]byte) bool) [][]byte {
	tb.Helper()
	var got [][]byte
	buf := make([]byte, 4096)
	deadline := time.Now().Add(timeout)
	for len(got) < n && time.Now().Before(deadline) {
		m, ok, err := nettest.RecvIncoming(b.cap, buf)
		if err != nil {
			tb.Fatalf("capturing on %s: %v", PName, err)
		}
		if !ok {
			continue
		}
		f := append([]byte(nil), buf[:m]...)
		if keep == nil || keep(f) {
			got = append(got, f)
		}
	}
	return got
}

// Drain discards what P has captured so far.
func (b *Bed) Drain() {
	buf := make([]byte, 4096)
	for {
		if _, _, err := unix.Recvfrom(b.cap, buf, unix.MSG_DONTWAIT); err != nil {
			return
		}
	}
}

// UDP builds a UDP frame from the client to dst, sent from P to X.
func UDP(tb testing.TB, src, dst netip.Addr, sport, dport uint16, payload int) []byte {
	tb.Helper()
	f, err := craft.Build(&craft.Packet{Src: src, Dst: dst, Proto: packet.ProtoUDP, SrcPort: sport, DstPort: dport,
		PayloadLen: payload, SrcMAC: PMAC, DstMAC: XMAC})
	if err != nil {
		tb.Fatalf("building a frame: %v", err)
	}
	return f
}

// Reflected is a frame sent to the VIP and the one that came back for it,
// with the index in Backends of the destination MAC it came back with.
type Reflected struct {
	Sent, Got []byte
	Backend   int
}

// Reflect sends n UDP frames of distinct flows (source ports 20000 up,
// 64..1500 bytes on the wire) to VIP4 and 5 to an address that is no VIP,
// and collects what the forwarder sends back out of X. It fails tb unless
// every VIP frame came back exactly once, to one of Backends' MACs,
// unchanged beyond the MACs, and nothing else came back.
func (b *Bed) Reflect(tb testing.TB, n int) []Reflected {
	tb.Helper()
	sent := map[uint16][]byte{}
	for i := range n {
		sport := uint16(20000 + i)
		f := UDP(tb, Client4, VIP4, sport, 53, 18+(i*97)%(1472-18+1)) // UDP payload 18..1472
		sent[sport] = f
		b.Send(tb, f)
	}
	for i := range 5 {
		b.Send(tb, UDP(tb, Client4, netip.MustParseAddr("10.201.0.99"), uint16(30000+i), 53, 18))
	}
	ours := func(f []byte) bool { return len(f) > 42 && string(f[6:12]) == string(XMAC) }
	got := b.Collect(tb, n, 5*time.Second, ours)
	// Anything more (a duplicate, a non-VIP frame) shows up soon.
	got = append(got, b.Collect(tb, 1, 200*time.Millisecond, ours)...)
	var out []Reflected
	for _, g := range got {
		sport := uint16(g[34])<<8 | uint16(g[35])
		in, ok := sent[sport]
		if !ok {
			tb.Fatalf("a frame came back that was not sent to the VIP, or twice (source port %d)", sport)
		}
		delete(sent, sport)
		i := MACIndex(Backends, g[:6])
		if i < 0 {
			tb.Fatalf("port %d: destination MAC %x is no backend's", sport, g[:6])
		}
		if string(g[12:]) != string(in[12:]) {
			tb.Fatalf("port %d: frame changed beyond the MACs", sport)
		}
		out = append(out, Reflected{Sent: in, Got: g, Backend: i})
	}
	if len(sent) > 0 {
		tb.Fatalf("%d of %d frames did not come back", len(sent), n)
	}
	return out
}

// MACIndex is the index of mac in macs, -1 if absent.
func MACIndex(macs []net.HardwareAddr, mac []byte) int {
	for i, m := range macs {
		if string(m) == string(mac) {
			return i
		}
	}
	return -1
}

// XDPAttached reports whether interface name in namespace ns has an XDP
// program attached.
func XDPAttached(tb testing.TB, ns, name string) bool {
	tb.Helper()
	var on bool
	err := nsx.Do(ns, func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		on = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return on
}
