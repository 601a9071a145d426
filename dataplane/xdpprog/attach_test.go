package xdpprog

import (
	"errors"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/google/gopacket/layers"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// attach attaches o in ns to its In link and closes the link at the end.
func attach(t *testing.T, o *Objects, ns *testNS, mode Mode) (link.Link, Mode) {
	t.Helper()
	var (
		l    link.Link
		used Mode
	)
	err := ns.Do(func() error {
		var err error
		l, used, err = o.Attach(ns.In.Attrs().Index, mode)
		return err
	})
	if errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("kernel cannot attach XDP to veth in %s mode: %v", mode, err)
	}
	if err != nil {
		t.Fatalf("Attach(%s): %v", mode, err)
	}
	t.Cleanup(func() { l.Close() })
	return l, used
}

func TestAttach_ModesAndDetach(t *testing.T) {
	for _, tc := range []struct {
		mode       Mode
		want       Mode
		attachMode uint32
	}{
		{ModeNative, ModeNative, nl.XDP_ATTACHED_DRV},
		{ModeGeneric, ModeGeneric, nl.XDP_ATTACHED_SKB},
		{ModeAuto, ModeNative, nl.XDP_ATTACHED_DRV}, // veth has native XDP
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			o := loadObjects(t, 1)
			ns := newTestNS(t, 1)
			l, used := attach(t, o, ns, tc.mode)
			if used != tc.want {
				t.Errorf("mode in use %q, want %q", used, tc.want)
			}
			info, err := o.attachedProgram().Info()
			if err != nil {
				t.Fatal(err)
			}
			id, _ := info.ID()
			if bound, _ := o.Retags(); bound != (used == ModeNative) {
				t.Errorf("device-bound program attached: %v, in %s mode", bound, used)
			}
			x := ns.xdpState(t, ns.In)
			if !x.Attached || x.AttachMode != tc.attachMode || x.ProgId != uint32(id) {
				t.Errorf("netlink: attached %v, mode %d, prog %d; want true, %d, %d", x.Attached, x.AttachMode, x.ProgId, tc.attachMode, id)
			}
			if x := ns.xdpState(t, ns.Peer); x.Attached {
				t.Errorf("peer has an XDP program (id %d)", x.ProgId)
			}

			// One program per interface: a second attach fails, the first stays.
			err = ns.Do(func() error {
				l2, _, err := o.Attach(ns.In.Attrs().Index, tc.mode)
				if err == nil {
					l2.Close()
				}
				return err
			})
			if err == nil {
				t.Error("second Attach succeeded")
			}

			if err := l.Close(); err != nil {
				t.Fatalf("closing link: %v", err)
			}
			if x := ns.xdpState(t, ns.In); x.Attached {
				t.Errorf("after closing the link, netlink still shows program %d", x.ProgId)
			}
		})
	}
}

// TestAttach_AutoFallsBack attaches in auto mode to a bridge, which has no
// native XDP: the program runs in generic mode.
func TestAttach_AutoFallsBack(t *testing.T) {
	o := loadObjects(t, 1)
	ns := newTestNS(t, 1)
	br := ns.addBridge(t)
	var used Mode
	err := ns.Do(func() error {
		if _, _, err := o.Attach(br.Attrs().Index, ModeNative); err == nil {
			return errors.New("native attach to a bridge succeeded")
		}
		l, m, err := o.Attach(br.Attrs().Index, ModeAuto)
		if err != nil {
			return err
		}
		used = m
		return l.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if used != ModeGeneric {
		t.Errorf("auto on a bridge used %q, want generic", used)
	}
}

func TestAttach_BadArguments(t *testing.T) {
	o := loadObjects(t, 1)
	if _, _, err := o.Attach(1, "turbo"); !errors.Is(err, ErrMode) {
		t.Errorf("Attach with mode turbo: %v, want ErrMode", err)
	}
	if _, _, err := o.Attach(0, ModeAuto); err == nil {
		t.Error("Attach to ifindex 0 succeeded")
	}
}

// TestAttach_Traffic sends frames through a veth into the attached program,
// in native and generic mode: VIP frames are passed while no socket is
// registered, reach the AF_XDP socket once one is, and other frames are
// the host's.
func TestAttach_Traffic(t *testing.T) {
	const n = 20
	for _, mode := range []Mode{ModeNative, ModeGeneric} {
		t.Run(string(mode), func(t *testing.T) {
			o := loadObjects(t, 1)
			setVIPs(t, o, vip4, vip6)
			ns := newTestNS(t, 1)
			attach(t, o, ns, mode)

			vip := make([][]byte, 0, n)
			host := make([][]byte, 0, n)
			dot1q := []layers.EthernetType{layers.EthernetTypeDot1Q}
			for i := range n {
				switch {
				case i%5 == 4: // tagged frames keep their tag up to XDP
					vip = append(vip, v4(t, dot1q, vip4, layers.IPProtocolTCP))
					host = append(host, v6(t, dot1q, other6, layers.IPProtocolUDP, nil))
				case i%2 == 0:
					vip = append(vip, v4(t, nil, vip4, layers.IPProtocolUDP))
					host = append(host, v4(t, nil, other4, layers.IPProtocolUDP))
				default:
					vip = append(vip, v6(t, nil, vip6, layers.IPProtocolTCP, nil))
					host = append(host, v6(t, nil, other6, layers.IPProtocolTCP, nil))
				}
			}

			base := readStats(t, o)
			ns.inject(t, vip...)
			waitStat(t, o, statPassedNoSocket, base[statPassedNoSocket]+n)

			s := newXSK(t, ns, ns.In, 0)
			if err := o.RegisterSocket(0, s.fd); err != nil {
				t.Fatalf("RegisterSocket: %v", err)
			}
			ns.inject(t, vip...)
			waitStat(t, o, statRedirected, base[statRedirected]+n)
			// The socket's fill ring is empty, so it counts what it got as dropped.
			if got := s.rxDropped(t); got != n {
				t.Errorf("socket saw %d frames, want %d", got, n)
			}

			before := readStats(t, o)
			ns.inject(t, host...)
			waitStat(t, o, statPassedNotVIP, before[statPassedNotVIP]+n)
			after := readStats(t, o)
			if after[statRedirected] != before[statRedirected] {
				t.Errorf("host frames redirected: %d", after[statRedirected]-before[statRedirected])
			}
		})
	}
}

// waitStat waits until counter stat reaches at least want; the stack
// processes injected frames asynchronously. Frames of the kernel's own
// (IPv6 router solicitations on the veth) only add to passed-not-vip.
func waitStat(t *testing.T, o *Objects, stat int, want uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := readStats(t, o)[stat]
		if got == want || (stat == statPassedNotVIP && got > want) {
			return
		}
		if got > want || time.Now().After(deadline) {
			t.Fatalf("counter %s = %d, want %d", statNames[stat], got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
