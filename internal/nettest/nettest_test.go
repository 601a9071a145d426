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

func TestMain(m *testing.M) { os.Exit(MainCheckFDs(m)) }
