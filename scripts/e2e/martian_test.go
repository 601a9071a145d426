package e2e

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/scripts/testbed"
)

// TestMartiansAndForeignMACs: from the client's namespace, UDP frames to
// the VIPs with sources no client can have (FR8), and frames to the VIP
// with a destination MAC that is not the balancer's (FR9: the bridge
// floods broadcast, multicast and unknown unicast to every port), reach no
// backend: each is dropped and counted under its reason, all of them. The
// old engine forwarded every one (20 of 20 each).
func TestMartiansAndForeignMACs(t *testing.T) {
	t.Parallel()
	b := upBed(t, testbed.Options{Prefix: "e2emar"})
	startXLB(t, b, writeConfig(t, b))
	waitStatus(t, b, "healthy backends", allHealthy)
	c := b.Clients[0]
	const each = 20
	other := net.HardwareAddr{0x02, 0x99, 0x99, 0x99, 0x99, 0x99} // nobody's: flooded by the bridge

	type kind struct {
		name   string
		src    netip.Addr
		dst    netip.Addr
		mac    net.HardwareAddr
		reason string
	}
	kinds := []kind{
		{"loopback", netip.MustParseAddr("127.0.0.1"), testbed.VIP4, nil, "martian-source"},
		{"unspecified", netip.MustParseAddr("0.0.0.0"), testbed.VIP4, nil, "martian-source"},
		{"broadcast", netip.MustParseAddr("255.255.255.255"), testbed.VIP4, nil, "martian-source"},
		{"multicast", netip.MustParseAddr("224.0.0.1"), testbed.VIP4, nil, "martian-source"},
		{"v6 loopback", netip.MustParseAddr("::1"), testbed.VIP6, nil, "martian-source"},
		{"v6 multicast", netip.MustParseAddr("ff02::1"), testbed.VIP6, nil, "martian-source"},
		{"v6 mapped", netip.MustParseAddr("::ffff:10.98.0.101"), testbed.VIP6, nil, "martian-source"},
		{"the VIP", testbed.VIP4, testbed.VIP4, nil, "source-is-vip"},
		{"the v6 VIP", testbed.VIP6, testbed.VIP6, nil, "source-is-vip"},
		{"balancer, client side", testbed.LBClientSide4, testbed.VIP4, nil, "source-is-self"},
		{"balancer, backend side", testbed.LBBackendSide4, testbed.VIP4, nil, "source-is-self"},
		{"a backend", b.Backend("b1").Addr4, testbed.VIP4, nil, "source-is-backend"},
		{"broadcast MAC", c.Addr4, testbed.VIP4, net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "not-our-mac"},
		{"multicast MAC", c.Addr4, testbed.VIP4, net.HardwareAddr{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01}, "not-our-mac"},
		{"v6 multicast MAC", c.Addr6, testbed.VIP6, net.HardwareAddr{0x33, 0x33, 0x00, 0x00, 0x00, 0x01}, "not-our-mac"},
		{"another host's MAC", c.Addr4, testbed.VIP4, other, "not-our-mac"},
	}
	const basePort = 47000 // source ports basePort+i mark kind i; basePort+999 the control
	want := map[string]float64{}
	for _, k := range kinds {
		want[k.reason] += each
	}

	var caps []*packetSocket
	for _, be := range b.Backends {
		caps = append(caps, openPacketSocket(t, be.Host))
	}
	out := openPacketSocket(t, c)
	before := metrics(t, b)
	for i, k := range kinds {
		mac := k.mac
		if mac == nil {
			mac = testbed.LBMAC
		}
		f, err := craft.Build(&craft.Packet{Src: k.src, Dst: k.dst, Proto: packet.ProtoUDP,
			SrcPort: uint16(basePort + i), DstPort: testbed.UDPEchoPort, SrcMAC: c.MAC, DstMAC: mac})
		if err != nil {
			t.Fatal(err)
		}
		for range each {
			if err := out.send(f); err != nil {
				t.Fatalf("%s: sending: %v", k.name, err)
			}
		}
	}

	// Every frame accounted: wait (bounded only against a hang) until
	// each reason's drops grew by what was sent.
	got := map[string]float64{}
	for deadline := time.Now().Add(20 * time.Second); ; {
		after := metrics(t, b)
		done := true
		for r, n := range want {
			got[r] = queueDrops(after, r) - queueDrops(before, r)
			if got[r] < n {
				done = false
			}
		}
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for r, n := range want {
		if got[r] != n {
			t.Errorf("drops %q grew by %v, want %v", r, got[r], n)
		}
	}

	// No backend got any of them from the balancer: a control frame from
	// the client, sent after them, is what the backends' captures see
	// first from the balancer's MAC.
	ctl, err := craft.Build(&craft.Packet{Src: c.Addr4, Dst: testbed.VIP4, Proto: packet.ProtoUDP,
		SrcPort: basePort + 999, DstPort: testbed.UDPEchoPort, SrcMAC: c.MAC, DstMAC: testbed.LBMAC})
	if err != nil {
		t.Fatal(err)
	}
	if err := out.send(ctl); err != nil {
		t.Fatal(err)
	}
	fromLB := func(f []byte) (uint16, bool) {
		if len(f) < 14+20+8 || !strings.EqualFold(net.HardwareAddr(f[6:12]).String(), testbed.LBMAC.String()) {
			return 0, false
		}
		l3 := f[14:]
		switch binary.BigEndian.Uint16(f[12:]) {
		case 0x0800:
			if l3[9] != 17 {
				return 0, false
			}
			return binary.BigEndian.Uint16(l3[int(l3[0]&0x0f)*4:]), true
		case 0x86dd:
			if len(l3) < 48 || l3[6] != 17 {
				return 0, false
			}
			return binary.BigEndian.Uint16(l3[40:]), true
		}
		return 0, false
	}
	var leaked []string
	seen := false
	for deadline := time.Now().Add(10 * time.Second); !seen && time.Now().Before(deadline); {
		for i, cp := range caps {
			f, err := cp.capture(50*time.Millisecond, func(f []byte) bool {
				p, ok := fromLB(f)
				return ok && p >= basePort && p <= basePort+999
			})
			if err != nil {
				t.Fatal(err)
			}
			if f == nil {
				continue
			}
			p, _ := fromLB(f)
			if p == basePort+999 {
				seen = true
				continue
			}
			leaked = append(leaked, fmt.Sprintf("%s at %s", kinds[p-basePort].name, b.Backends[i].Name))
		}
	}
	if !seen {
		t.Fatal("the control frame reached no backend: the captures prove nothing")
	}
	if len(leaked) > 0 {
		t.Errorf("forwarded to backends: %s", strings.Join(leaked, ", "))
	}
}

// queueDrops sums xlb_queue_drop_packets_total over the queues for reason.
func queueDrops(m map[string]float64, reason string) float64 {
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, "xlb_queue_drop_packets_total{") && strings.Contains(k, fmt.Sprintf("reason=%q", reason)) {
			n += v
		}
	}
	return n
}
