package afxdp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/vishvananda/netlink"

	"xlb/internal/nettest"
)

// vethPair is two veth ends inside a test's namespace: x carries XDP and the AF_XDP
// socket, p is the peer that sends and captures.
type vethPair struct {
	ns           *nettest.NS
	x, p         int // ifindexes
	xMAC, pMAC   net.HardwareAddr
	xName, pName string
}

// newVethPair creates afxt-x/afxt-p with one rx and one tx queue each (so
// native XDP on x is allowed: x's rx queues >= p's tx queues) and IPv6 off,
// so the kernel sends nothing on them by itself.
func newVethPair(tb testing.TB, ns *nettest.NS) *vethPair {
	tb.Helper()
	v := &vethPair{
		ns:    ns,
		xName: "afxt-x", pName: "afxt-p",
		xMAC: net.HardwareAddr{0x02, 0xaf, 0, 0, 0, 0x01},
		pMAC: net.HardwareAddr{0x02, 0xaf, 0, 0, 0, 0x02},
	}
	err := ns.Do(func() error {
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
		tb.Fatalf("veth pair in %s: %v", ns.Name, err)
	}
	return v
}
