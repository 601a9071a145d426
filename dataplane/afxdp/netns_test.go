package afxdp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// testNS is a throwaway network namespace named afxt<pid>-<n>, removed at
// the end of the test.
type testNS struct {
	name string
	h    netns.NsHandle
}

var nsCount atomic.Int32

// requireRoot skips a test that needs root (namespaces, XDP, AF_XDP).
func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: network namespaces, XDP and AF_XDP (CI runs as root)")
	}
}

func newTestNS(tb testing.TB) *testNS {
	tb.Helper()
	requireRoot(tb)
	name := fmt.Sprintf("afxt%d-%d", os.Getpid(), nsCount.Add(1))
	var h netns.NsHandle
	err := onLockedThread(tb, func() (err error) {
		h, err = netns.NewNamed(name) // switches this thread into it
		return err
	})
	if err != nil {
		tb.Fatalf("creating netns %s: %v", name, err)
	}
	n := &testNS{name: name, h: h}
	tb.Cleanup(func() {
		n.h.Close()
		if err := netns.DeleteNamed(name); err != nil {
			tb.Errorf("deleting netns %s: %v", name, err)
		}
	})
	return n
}

// onLockedThread runs fn on a locked OS thread and puts the thread back in
// the namespace it started in. If that fails the thread stays locked, so it
// dies with this goroutine instead of carrying the namespace elsewhere.
func onLockedThread(tb testing.TB, fn func() error) error {
	tb.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		tb.Fatalf("returning to the original netns: %v", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// do runs fn with the calling thread inside the namespace: sockets, links
// and XDP attachments it makes belong to the namespace.
func (n *testNS) do(tb testing.TB, fn func() error) error {
	tb.Helper()
	return onLockedThread(tb, func() error {
		if err := netns.Set(n.h); err != nil {
			return fmt.Errorf("entering netns %s: %w", n.name, err)
		}
		return fn()
	})
}

// vethPair is two veth ends inside a testNS: x carries XDP and the AF_XDP
// socket, p is the peer that sends and captures.
type vethPair struct {
	ns           *testNS
	x, p         int // ifindexes
	xMAC, pMAC   net.HardwareAddr
	xName, pName string
}

// newVethPair creates afxt-x/afxt-p with one rx and one tx queue each (so
// native XDP on x is allowed: x's rx queues >= p's tx queues) and IPv6 off,
// so the kernel sends nothing on them by itself.
func newVethPair(tb testing.TB, ns *testNS) *vethPair {
	tb.Helper()
	v := &vethPair{
		ns:    ns,
		xName: "afxt-x", pName: "afxt-p",
		xMAC: net.HardwareAddr{0x02, 0xaf, 0, 0, 0, 0x01},
		pMAC: net.HardwareAddr{0x02, 0xaf, 0, 0, 0, 0x02},
	}
	err := ns.do(tb, func() error {
		for _, p := range []string{"default", "all"} {
			f := "/proc/sys/net/ipv6/conf/" + p + "/disable_ipv6"
			if err := os.WriteFile(f, []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		veth := &netlink.Veth{
			LinkAttrs:        netlink.LinkAttrs{Name: v.xName, HardwareAddr: v.xMAC, NumTxQueues: 1, NumRxQueues: 1},
			PeerName:         v.pName,
			PeerHardwareAddr: v.pMAC,
			PeerNumTxQueues:  1,
			PeerNumRxQueues:  1,
		}
		if err := h.LinkAdd(veth); err != nil {
			return fmt.Errorf("adding veth: %w", err)
		}
		for _, name := range []string{v.xName, v.pName} {
			l, err := h.LinkByName(name)
			if err != nil {
				return err
			}
			if err := h.LinkSetUp(l); err != nil {
				return err
			}
			if name == v.xName {
				v.x = l.Attrs().Index
			} else {
				v.p = l.Attrs().Index
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("veth pair in %s: %v", ns.name, err)
	}
	return v
}
