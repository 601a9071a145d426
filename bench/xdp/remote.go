package xdp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"xlb/bench/baseline/xdpfwd"
	"xlb/bench/xdp/topo"
	"xlb/dataplane/xdpprog"
)

// Remote is the real-NIC mode of `lbbench xdp`: the generator and the sink
// on this host's NIC port, xlb run by the user on another host (see the
// docs/performance.md, "Zero-copy NIC: the budget") with the configuration
// RemoteXLBConfig writes; RunExisting then measures it.
type Remote struct {
	// GenIface and SinkIface are this host's ports: the generator sends
	// from GenIface, the sink receives on SinkIface (may be the same port).
	GenIface, SinkIface string
	// SinkMAC is SinkIface's MAC: every backend's MAC in xlb's config, so
	// that xlb sends each frame to the sink's port (L2_DSR).
	SinkMAC net.HardwareAddr
	// XLBIface is the interface on the xlb host that the generator's port
	// is cabled to (dataplane.interface there).
	XLBIface string
	// CPU pins xlb's one worker there (-1: unpinned).
	CPU int
	// Backends behind the VIP (default 4).
	Backends int
}

// RemoteBackends are the backends of a Remote run: the topology's private
// addresses (topo.BackendIP), each with the sink port's MAC.
func RemoteBackends(n int, sinkMAC net.HardwareAddr) []topo.Backend {
	bs := make([]topo.Backend, n)
	for i := range bs {
		bs[i] = topo.Backend{Name: fmt.Sprintf("b%d", i+1), IP: topo.BackendIP(i), MAC: sinkMAC}
	}
	return bs
}

// RemoteXLBConfig is the configuration `xlb run` takes on the xlb host of
// a Remote run: the bench's two UDP services on topo.VIP, backends at the
// bench's private addresses with the sink port's MAC, zero_copy "on" (xlb
// refuses to start on a queue the driver cannot bind zero-copy, so a run
// that starts measures zero-copy), TCP health checks on healthPort, which
// the sink host must answer on the backend addresses.
func RemoteXLBConfig(r Remote) (string, error) {
	if r.Backends == 0 {
		r.Backends = 4
	}
	if r.Backends < 1 || r.Backends > topo.MaxBackends {
		return "", fmt.Errorf("%d backends: want 1..%d", r.Backends, topo.MaxBackends)
	}
	if r.XLBIface == "" {
		return "", fmt.Errorf("no interface named for the xlb host")
	}
	if len(r.SinkMAC) != 6 || r.SinkMAC[0]&1 != 0 {
		return "", fmt.Errorf("sink MAC %v: want a unicast Ethernet address", r.SinkMAC)
	}
	var h strings.Builder
	fmt.Fprintf(&h, "# lbbench xdp --remote-xlb: xlb on the host under test (generated)\n")
	fmt.Fprintf(&h, "# generator port %s, sink port %s (MAC %s) on the load host.\n", r.GenIface, r.SinkIface, r.SinkMAC)
	fmt.Fprintf(&h, "# The load host must answer TCP %d on %s..%s (the backends) on its sink port.\n",
		healthPort, topo.BackendIP(0), topo.BackendIP(r.Backends-1))
	return xlbConfigText(h.String(), r.XLBIface, r.CPU, "on", RemoteBackends(r.Backends, r.SinkMAC), true), nil
}

// RemoteVIP is the VIP a Remote run sends to.
var RemoteVIP = topo.VIP

// ServeXDPFwd runs (b), the in-kernel XDP_TX forwarder, on iface of this
// host, the far host of a Remote run, until ctx ends: every frame to
// topo.VIP goes back out of iface to sinkMAC (the load host's sink port),
// as RemoteXLBConfig's xlb does; the load host then measures it with
// RunExisting and the variant "xdpfwd". mode is its XDP attach mode. A
// veth standing in for the NIC names its peer (in this namespace; "" for a
// NIC): a veth passes XDP_TX frames on only to a peer with an XDP program,
// which xdpfwd then attaches there. It returns what it forwarded.
func ServeXDPFwd(ctx context.Context, iface, vethPeer string, sinkMAC net.HardwareAddr, mode xdpprog.Mode) (xdpfwd.Stats, error) {
	if len(sinkMAC) != 6 || sinkMAC[0]&1 != 0 {
		return xdpfwd.Stats{}, fmt.Errorf("sink MAC %v: want the load host's sink port's unicast MAC", sinkMAC)
	}
	f, err := xdpfwd.Start(ctx, xdpfwd.Config{Iface: iface, VIPs: []netip.Addr{topo.VIP}, Backends: []net.HardwareAddr{sinkMAC}, Mode: mode,
		PeerIface: vethPeer})
	if err != nil {
		return xdpfwd.Stats{}, err
	}
	<-ctx.Done()
	st, serr := f.Stats()
	return st, errors.Join(serr, f.Close())
}
