package afxdp

import (
	"net"
	"testing"

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
	v.x, v.p = ns.AddVeth(tb, nettest.Veth{
		Name: v.xName, PeerName: v.pName,
		MAC: v.xMAC, PeerMAC: v.pMAC,
		RxQueues: 1, TxQueues: 1, PeerRxQueues: 1, PeerTxQueues: 1,
		NoIPv6: true,
	})
	return v
}
