package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/scripts/testbed"
)

// TestVLANTaggedVIPFramesKeepTheirTags: the bed's bridge takes the outer
// VLAN tag of a client's frame into the skb's metadata at the balancer's
// port, so xlb's veth hands XDP the frame without it. Before, an
// 802.1Q-tagged VIP frame reached its backend untagged (and was answered),
// a QinQ frame with only its inner tag. Now every tag the client sent
// arrives at the backend, and the balancer counts the tags it put back.
func TestVLANTaggedVIPFramesKeepTheirTags(t *testing.T) {
	t.Parallel()
	b := upBed(t, testbed.Options{Prefix: "e2evlan"})
	startXLB(t, b, writeConfig(t, b))
	waitStatus(t, b, "healthy backends", allHealthy)
	c := b.Clients[0]

	var caps []*auxSocket
	for _, be := range b.Backends {
		caps = append(caps, openAuxSocket(t, be.Host))
	}
	out := openPacketSocket(t, c)
	before := metrics(t, b)
	for _, tc := range []struct {
		name  string
		port  uint16
		outer uint16 // 802.1ad service tag in front of the 802.1Q one; 0: none
		want  string
	}{
		{"802.1Q", 46001, 0, "8100/10"},
		{"QinQ", 46002, 20, "88a8/20 8100/10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := craft.Build(&craft.Packet{Src: c.Addr4, Dst: testbed.VIP4, Proto: packet.ProtoUDP,
				SrcPort: tc.port, DstPort: testbed.UDPEchoPort, SrcMAC: c.MAC, DstMAC: testbed.LBMAC, VLAN: 10})
			if err != nil {
				t.Fatal(err)
			}
			if tc.outer != 0 {
				f = append(append(append([]byte{}, f[:12]...), 0x88, 0xa8, byte(tc.outer>>8), byte(tc.outer)), f[12:]...)
			}
			var got string
			for try := 0; try < 5 && got == ""; try++ {
				if err := out.send(f); err != nil {
					t.Fatal(err)
				}
				for _, cp := range caps {
					if tags, ok := cp.capture(t, 200*time.Millisecond, tc.port); ok {
						got = tags
						break
					}
				}
			}
			if got == "" {
				t.Fatal("no backend received the frame from the balancer")
			}
			if got != tc.want {
				t.Errorf("frame at the backend has tags %q, want %q (as the client sent it)", got, tc.want)
			}
		})
	}
	retagged := `xlb_xdp_retagged_frames_total`
	if d := metric(t, metrics(t, b), retagged) - metric(t, before, retagged); d < 2 {
		t.Errorf("%s grew by %v, want at least 2", retagged, d)
	}
}

// auxSocket is a packet socket that also reads the VLAN tag the kernel
// holds outside the frame (PACKET_AUXDATA): the backend's bridge port
// takes a frame's outer tag into the metadata, as the balancer's does.
type auxSocket struct{ fd int }

func openAuxSocket(t *testing.T, h testbed.Host) *auxSocket {
	t.Helper()
	ps := openPacketSocket(t, h)
	if err := unix.SetsockoptInt(ps.fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
		t.Fatalf("PACKET_AUXDATA on %s in %s: %v", h.Iface, h.NS, err)
	}
	return &auxSocket{fd: ps.fd}
}

// capture waits up to d for a UDP frame from the balancer's MAC with
// source port sport and returns its VLAN tags, outermost first, the one
// held in the metadata included ("tpid/vid" words).
func (s *auxSocket) capture(t *testing.T, d time.Duration, sport uint16) (string, bool) {
	t.Helper()
	buf := make([]byte, 9216)
	oob := make([]byte, 256)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		n, oobn, _, from, err := unix.Recvmsg(s.fd, buf, oob, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		f := buf[:n]
		if n < 14 || string(f[6:12]) != string(testbed.LBMAC) {
			continue
		}
		var tags []string
		if aux, ok := auxVLAN(oob[:oobn]); ok {
			tags = append(tags, aux)
		}
		off := 12
		for off+4 <= n {
			tpid := binary.BigEndian.Uint16(f[off:])
			if tpid != packet.EtherTypeVLAN && tpid != packet.EtherTypeQinQ {
				break
			}
			tags = append(tags, fmt.Sprintf("%04x/%d", tpid, binary.BigEndian.Uint16(f[off+2:])&0x0fff))
			off += 4
		}
		if off+2+20+8 > n || binary.BigEndian.Uint16(f[off:]) != packet.EtherTypeIPv4 {
			continue
		}
		ip := f[off+2:]
		if ip[9] != 17 || binary.BigEndian.Uint16(ip[int(ip[0]&0x0f)*4:]) != sport {
			continue
		}
		return strings.Join(tags, " "), true
	}
	return "", false
}

// auxVLAN reads the tag of a PACKET_AUXDATA control message
// (struct tpacket_auxdata), if the kernel holds one.
func auxVLAN(oob []byte) (string, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return "", false
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_PACKET || m.Header.Type != unix.PACKET_AUXDATA ||
			len(m.Data) < int(unsafe.Sizeof(unix.TpacketAuxdata{})) {
			continue
		}
		aux := (*unix.TpacketAuxdata)(unsafe.Pointer(&m.Data[0]))
		if aux.Status&unix.TP_STATUS_VLAN_VALID == 0 {
			return "", false
		}
		tpid := aux.Vlan_tpid
		if tpid == 0 || aux.Status&unix.TP_STATUS_VLAN_TPID_VALID == 0 {
			tpid = packet.EtherTypeVLAN
		}
		return fmt.Sprintf("%04x/%d", tpid, aux.Vlan_tci&0x0fff), true
	}
	return "", false
}
