package xdpprog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xlb/dataplane/packet"
	"xlb/internal/nettest"
)

// vlanBed is a namespace with a bridge between two veth pairs: frames
// injected at Client cross the bridge, which takes their outer VLAN tag
// into the skb's metadata at its port (as the e2e testbed's bridge and
// many hypervisors do), and arrive at In, where the program runs.
type vlanBed struct {
	*nettest.NS
	In, Client int // ifindexes
}

func newVLANBed(t *testing.T) *vlanBed {
	t.Helper()
	ns := nettest.NewNS(t, nettest.UniqueName("xdpv"))
	in, inSw := ns.AddVeth(t, nettest.Veth{Name: "xdpv-in", PeerName: "xdpv-insw", NoIPv6: true})
	cl, clSw := ns.AddVeth(t, nettest.Veth{Name: "xdpv-c", PeerName: "xdpv-csw", NoIPv6: true})
	err := ns.Do(func() error {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "xdpv-br"}}
		if err := netlink.LinkAdd(br); err != nil {
			return err
		}
		for _, idx := range []int{inSw, clSw} {
			l, err := netlink.LinkByIndex(idx)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetMaster(l, br); err != nil {
				return err
			}
		}
		return netlink.LinkSetUp(br)
	})
	if err != nil {
		t.Fatalf("bridge: %v", err)
	}
	return &vlanBed{NS: ns, In: in, Client: cl}
}

// send injects frame at the client and returns the frame as the kernel's
// taps see it on In after the program passed it (the in-frame bytes; a
// tag the kernel still holds apart is not in them).
func (v *vlanBed) send(t *testing.T, frame []byte) []byte {
	t.Helper()
	var got []byte
	err := v.Do(func() error {
		rx, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(nettest.Htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		defer unix.Close(rx)
		if err := unix.Bind(rx, &unix.SockaddrLinklayer{Protocol: nettest.Htons(unix.ETH_P_ALL), Ifindex: v.In}); err != nil {
			return err
		}
		tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		tx, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(tx)
		buf := make([]byte, 4096)
		// Bounded only against a lost frame: resend until it shows up.
		for try := 0; try < 50 && got == nil; try++ {
			if err := unix.Sendto(tx, frame, 0, &unix.SockaddrLinklayer{Ifindex: v.Client}); err != nil {
				return err
			}
			for {
				n, ok, err := nettest.RecvIncoming(rx, buf)
				if err != nil {
					if errors.Is(err, unix.EAGAIN) {
						break
					}
					return err
				}
				if ok && n >= 14 && string(buf[6:12]) == string(frame[6:12]) {
					got = append([]byte(nil), buf[:n]...)
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("sending through the bridge: %v", err)
	}
	if got == nil {
		t.Fatal("the frame never reached the program's interface")
	}
	return got
}

// tags are the VLAN tags at the front of a frame, as "tpid/vid" words.
func tags(f []byte) string {
	var out []string
	for off := 12; off+4 <= len(f); off += 4 {
		tpid := binary.BigEndian.Uint16(f[off:])
		if tpid != packet.EtherTypeVLAN && tpid != packet.EtherTypeQinQ {
			break
		}
		out = append(out, fmt.Sprintf("%04x/%d", tpid, binary.BigEndian.Uint16(f[off+2:])&0x0fff))
	}
	return strings.Join(out, " ")
}

// TestRetag_TagsHeldApartArePutBack: a bridge takes a frame's outer VLAN
// tag out of the frame into the skb's metadata; native XDP on veth then
// sees the frame untagged, and without the device-bound program a VIP
// frame tagged 100 reached the workers (and the backend) untagged, a QinQ
// frame with only its inner tag. The device-bound program reads the tag
// with bpf_xdp_metadata_rx_vlan_tag and puts it back: the frame the
// program hands on carries every tag it had on the wire.
func TestRetag_TagsHeldApartArePutBack(t *testing.T) {
	nettest.RequireRoot(t)
	v := newVLANBed(t)
	o := loadObjects(t, 1)
	setVIPs(t, o, vip4)
	var l interface{ Close() error }
	err := v.Do(func() error {
		var err error
		l, _, err = o.Attach(v.In, ModeNative)
		return err
	})
	if err != nil {
		t.Fatalf("Attach native: %v", err)
	}
	defer l.Close()
	if ok, why := o.Retags(); !ok {
		if errors.Is(why, errNoKfunc) {
			t.Skipf("kernel lacks %s (Linux 6.8+): %v", kfuncVLAN, why)
		}
		t.Fatalf("native mode on veth does not retag: %v", why)
	}

	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}
	for _, tc := range []struct {
		name string
		tags []layers.EthernetType
		want string
	}{
		{"802.1Q", []layers.EthernetType{layers.EthernetTypeDot1Q}, "8100/10"},
		{"QinQ", []layers.EthernetType{layers.EthernetTypeQinQ, layers.EthernetTypeDot1Q}, "88a8/10 8100/11"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := v4(t, tc.tags, vip4, layers.IPProtocolUDP)
			copy(frame[6:12], mac)
			if got := tags(frame); got != tc.want {
				t.Fatalf("test frame has tags %q, want %q", got, tc.want)
			}
			before := readStats(t, o)
			got := v.send(t, frame)
			after := readStats(t, o)
			if tags(got) != tc.want {
				t.Errorf("frame after the program has tags %q, want %q (as sent)", tags(got), tc.want)
			}
			if after[statPassedNoSocket] == before[statPassedNoSocket] {
				t.Errorf("the frame did not take the VIP path (no socket: passed): counters %v -> %v", before, after)
			}
			if after[statRetagged] == before[statRetagged] {
				t.Errorf("retagged did not move: the bridge kept the tag in the frame, the test proved nothing")
			}
		})
	}
}

// TestVerdicts_DeviceBound: the device-bound variant, the one attached in
// native mode, gives the golden frames the verdicts the plain program
// gives them (their tags are in the frame: nothing to put back). The
// kernel does not test-run device-bound programs, so the frames go through
// the attached program on the veth; those too short to send are left out.
func TestVerdicts_DeviceBound(t *testing.T) {
	o := loadObjects(t, 1)
	setVIPs(t, o, vip4, vip6, netip.MustParseAddr("10.200.0.9"))
	ns := newTestNS(t, 1)
	var l interface{ Close() error }
	err := ns.Do(func() error {
		var err error
		l, _, err = o.Attach(ns.In.Attrs().Index, ModeNative)
		return err
	})
	if err != nil {
		t.Fatalf("Attach native: %v", err)
	}
	defer l.Close()
	if ok, why := o.Retags(); !ok {
		if errors.Is(why, errNoKfunc) {
			t.Skipf("kernel lacks %s (Linux 6.8+): %v", kfuncVLAN, why)
		}
		t.Fatalf("native mode on veth does not use the device-bound program: %v", why)
	}
	sent := 0
	for _, r := range verdictRows(t) {
		if len(r.frame) < 14 {
			continue
		}
		t.Run(r.name, func(t *testing.T) {
			before := readStats(t, o)
			ns.inject(t, r.frame)
			// The frame is counted once it went through; wait for that
			// (bounded only against a hang).
			var after [numStats]uint64
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				after = readStats(t, o)
				if after[r.stat] > before[r.stat] {
					break
				}
			}
			// The veth's own IPv6 chatter (MLD, router solicitations) may
			// pass as not-VIP meanwhile; nothing else may move.
			for i := range after {
				d := after[i] - before[i]
				switch {
				case i == r.stat && d == 0:
					t.Errorf("counter %s did not move", statNames[i])
				case i != r.stat && i != statPassedNotVIP && d != 0:
					t.Errorf("counter %s moved by %d, want only %s", statNames[i], d, statNames[r.stat])
				}
			}
		})
		sent++
	}
	if sent < 40 {
		t.Errorf("only %d golden frames sent", sent)
	}
}
