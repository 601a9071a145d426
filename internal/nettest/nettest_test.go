package nettest

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func TestHtons(t *testing.T) {
	// Stored as this host stores a uint16, Htons(v) reads as v big-endian.
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], Htons(0x1234))
	if b != [2]byte{0x12, 0x34} {
		t.Errorf("Htons(0x1234) is stored as % x, want 12 34", b)
	}
}

// TestNS: a namespace of the test's own, entered by Do on a thread that
// never comes back, and the leak check seeing a descriptor left open.
func TestNS(t *testing.T) {
	before := OpenFDs()
	ns := NewNS(t, UniqueName("ntt"))
	var inside netns.NsHandle
	err := ns.Do(func() (err error) {
		inside, err = netns.Get()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	if !inside.Equal(ns.Handle) {
		t.Error("Do ran fn outside the namespace")
	}
	here, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer here.Close()
	if here.Equal(ns.Handle) {
		t.Error("the test's own thread is in the namespace")
	}
	if len(Leaked(before)) == 0 {
		t.Error("Leaked sees none of the handles open now")
	}
}

// TestAddVeth: the pair has the names, MACs and queue counts asked for,
// both ends are up, and NoIPv6 turned IPv6 off in the namespace.
func TestAddVeth(t *testing.T) {
	ns := NewNS(t, UniqueName("ntt"))
	mac := net.HardwareAddr{0x02, 0x4e, 0, 0, 0, 0x01}
	a, b := ns.AddVeth(t, Veth{Name: "ntt-a", PeerName: "ntt-b", MAC: mac, RxQueues: 3, NoIPv6: true})
	h, err := netlink.NewHandleAt(ns.Handle)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, x := range []struct {
		idx    int
		name   string
		rx, tx int
		mac    net.HardwareAddr // nil: the kernel's
	}{{a, "ntt-a", 3, 1, mac}, {b, "ntt-b", 1, 1, nil}} {
		l, err := h.LinkByIndex(x.idx)
		if err != nil {
			t.Fatalf("link %d: %v", x.idx, err)
		}
		at := l.Attrs()
		if at.Name != x.name || at.NumRxQueues != x.rx || at.NumTxQueues != x.tx || at.Flags&net.FlagUp == 0 {
			t.Errorf("link %d: %s, %d rx and %d tx queues, flags %v; want %s, %d and %d, up", x.idx, at.Name, at.NumRxQueues, at.NumTxQueues, at.Flags, x.name, x.rx, x.tx)
		}
		if x.mac != nil && !bytes.Equal(at.HardwareAddr, x.mac) {
			t.Errorf("%s: MAC %s, want %s", at.Name, at.HardwareAddr, x.mac)
		}
	}
	if _, err := os.Stat("/proc/sys/net/ipv6"); err != nil {
		return // no IPv6 in this kernel: nothing to turn off
	}
	err = ns.Do(func() error {
		v, err := os.ReadFile("/proc/sys/net/ipv6/conf/ntt-a/disable_ipv6")
		if err == nil && strings.TrimSpace(string(v)) != "1" {
			t.Errorf("disable_ipv6 on ntt-a is %q, want 1", v)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRecvIncoming: on a socket bound to one end of a veth, the frame that
// end sends is passed over, the one the other end sends is read, and a
// read that times out is no error.
func TestRecvIncoming(t *testing.T) {
	ns := NewNS(t, UniqueName("ntt"))
	a, b := ns.AddVeth(t, Veth{Name: "ntt-a", PeerName: "ntt-b", NoIPv6: true})
	const proto = 0x88b5 // local experimental
	frame := func(from byte) []byte {
		f := make([]byte, 60)
		copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, from})
		f[12], f[13] = proto>>8, proto&0xff
		return f
	}
	err := ns.Do(func() error {
		open := func(ifindex int) (int, error) {
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(Htons(proto)))
			if err != nil {
				return -1, err
			}
			t.Cleanup(func() { unix.Close(fd) })
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100_000}); err != nil {
				return -1, err
			}
			return fd, unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: Htons(proto), Ifindex: ifindex})
		}
		fa, err := open(a)
		if err != nil {
			return err
		}
		fb, err := open(b)
		if err != nil {
			return err
		}
		to := func(ifindex int) *unix.SockaddrLinklayer {
			return &unix.SockaddrLinklayer{Protocol: Htons(proto), Ifindex: ifindex, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
		}
		if err := unix.Sendto(fb, frame('b'), 0, to(b)); err != nil {
			return err
		}
		if err := unix.Sendto(fa, frame('a'), 0, to(a)); err != nil {
			return err
		}
		buf := make([]byte, 2048)
		var got []byte
		for range 5 {
			n, ok, err := RecvIncoming(fb, buf)
			if err != nil {
				return err
			}
			if ok {
				got = buf[:n]
				break
			}
		}
		if len(got) < 12 || got[11] != 'a' {
			t.Errorf("read % x, want the frame from ntt-a (its own was to be passed over)", got)
		}
		if n, ok, err := RecvIncoming(fb, buf); ok || err != nil {
			t.Errorf("nothing more to read: got %d bytes, %v, %v; want not ok, no error", n, ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMain(m *testing.M) { os.Exit(MainCheckFDs(m)) }
