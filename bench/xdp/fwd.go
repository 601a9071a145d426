package xdp

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"xlb/bench/baseline/reflector"
	"xlb/bench/baseline/xdpfwd"
	"xlb/bench/xdp/topo"
	"xlb/dataplane/xdpprog"
)

// variant is one line of results: a forwarder and the UDP port its traffic
// goes to (xlb runs two services on the VIP).
type variant struct {
	name string // xlb, xlb-ct, reflector, xdpfwd, nftlb
	desc string
	port uint16
}

// forwarder is a middle hop the bench starts, measures and stops.
type forwarder struct {
	name     string
	variants []variant
	// start makes it forward; stop undoes everything start did.
	start func(ctx context.Context) error
	stop  func() error
	// userCPU is the CPU time its user-space threads have used so far
	// (nil for an in-kernel forwarder); alive says it still runs.
	userCPU func() time.Duration
	alive   func() error
	// counters are the forwarder's own counters (cumulative, by name;
	// nil: none), diffed per case into the report's data.
	counters func() map[string]uint64
	// threads are its user-space threads' CPU time and page faults so
	// far (nil: not a process of its own), diffed per case.
	threads func() map[string]threadStat
	// workerTID finds the forwarder's worker thread (nil: none to find):
	// xlb's, pinned to the middle's CPU.
	workerTID func() int
	// log is what the forwarder's process printed so far (nil: none):
	// xlb's, with GODEBUG=gctrace=1's lines, for Tail.
	log func() string
	// redirKey and tookKey name, for an AF_XDP forwarder, the counters of
	// frames its XDP program redirected to its sockets and of frames its
	// workers took from them.
	redirKey, tookKey string
}

// Names of the forwarders and their variants, in the order they run.
var allVariants = []string{"xlb", "xlb-ct", "reflector", "xdpfwd", "nftlb"}

var variantDesc = map[string]string{
	"xlb":       "xlb run, UDP service, affinity NONE (untracked)",
	"xlb-ct":    "xlb run, UDP service, CLIENT_IP_PORT_PROTO (tracked 5-tuple)",
	"reflector": "(a) AF_XDP reflector, dataplane/afxdp + xdpprog, no balancing",
	"xdpfwd":    "(b) in-kernel XDP forwarder: 5-tuple hash, MAC rewrite, XDP_TX",
	"nftlb":     "(c) nftables DNAT, numgen over the backends, kernel forwarding",
}

func backendMACs(t *topo.Topo) []net.HardwareAddr {
	var m []net.HardwareAddr
	for _, b := range t.Backends {
		m = append(m, b.MAC)
	}
	return m
}

func (b *bench) xlbForwarder(want map[string]bool) *forwarder {
	f := &forwarder{name: "xlb", redirKey: "runtime.xdp_program.redirected", tookKey: "runtime.queues.socket_rx_frames"}
	for _, v := range []variant{{name: "xlb", port: portXLB}, {name: "xlb-ct", port: portXLBCT}} {
		if want[v.name] {
			v.desc = variantDesc[v.name]
			f.variants = append(f.variants, v)
		}
	}
	var (
		p      *xlbProc
		health *healthResponder
	)
	f.start = func(ctx context.Context) error {
		bin, err := xlbBinary(b.cfg.XLB, b.tmp)
		if err != nil {
			return err
		}
		cfgPath := filepath.Join(b.tmp, "xlb.toml")
		if err := os.WriteFile(cfgPath, []byte(xlbConfig(b.topo, b.midCPU)), 0o644); err != nil {
			return err
		}
		if health, err = startHealthResponder(b.topo); err != nil {
			return err
		}
		if p, err = startXLB(ctx, b.topo, bin, cfgPath); err != nil {
			health.close()
			health = nil
			return err
		}
		reniceAll(p.pid(), benchNice)
		return nil
	}
	f.stop = func() error {
		var err error
		if p != nil {
			err = p.stop()
			p = nil
		}
		if health != nil {
			health.close()
			health = nil
		}
		return err
	}
	f.userCPU = func() time.Duration { return processCPU(p.pid()) }
	f.alive = func() error { return p.alive() }
	f.counters = func() map[string]uint64 { return p.counters() }
	f.threads = func() map[string]threadStat { return threadStats(p.pid()) }
	f.log = func() string { return p.log.String() }
	if b.midCPU >= 0 {
		f.workerTID = func() int { return pinnedThread(p.pid(), b.midCPU) }
	}
	return f
}

func (b *bench) reflectorForwarder() *forwarder {
	f := &forwarder{name: "reflector", variants: []variant{{name: "reflector", desc: variantDesc["reflector"], port: portXLB}},
		redirKey: "xdp_redirected", tookKey: "rx"}
	var r *reflector.Reflector
	f.start = func(ctx context.Context) error {
		cfg := reflector.Config{NS: b.topo.MidNS, Iface: b.topo.MidDev, Queues: []int{0},
			VIPs: b.vips(), Backends: backendMACs(b.topo), Mode: xdpprog.ModeNative}
		if b.midCPU >= 0 {
			cfg.CPUs = []int{b.midCPU}
		}
		var err error
		r, err = reflector.Start(ctx, cfg)
		return err
	}
	f.stop = func() error {
		if r == nil {
			return nil
		}
		err := r.Close()
		r = nil
		return err
	}
	f.userCPU = func() time.Duration { return r.Stats().CPU }
	f.counters = func() map[string]uint64 {
		st := r.Stats()
		m := map[string]uint64{"rx": st.RX, "tx": st.TX, "drops": st.Drops,
			"xdp_redirected": st.XDP.Redirected, "xdp_passed_no_socket": st.XDP.PassedNoSocket, "xdp_passed_not_vip": st.XDP.PassedNotVIP}
		for _, q := range st.Queues {
			k, c := q.Socket.Kernel, q.Socket.Counters
			m["tx_full"] += q.TxFull
			m["kernel_rx_dropped"] += k.RxDropped
			m["kernel_rx_ring_full"] += k.RxRingFull
			m["kernel_fill_ring_empty"] += k.FillRingEmpty
			m["socket_kicks"] += c.Kicks
			m["socket_kick_transient"] += c.KickTransient
			m["socket_polls"] += c.Polls
			m["socket_completed"] += c.Completed
		}
		return m
	}
	f.alive = func() error {
		if err := r.Err(); err != nil {
			return fmt.Errorf("reflector: %w", err)
		}
		return nil
	}
	return f
}

func (b *bench) xdpfwdForwarder() *forwarder {
	f := &forwarder{name: "xdpfwd", variants: []variant{{name: "xdpfwd", desc: variantDesc["xdpfwd"], port: portXLB}}}
	var x *xdpfwd.Forwarder
	f.start = func(ctx context.Context) error {
		var err error
		x, err = xdpfwd.Start(ctx, xdpfwd.Config{NS: b.topo.MidNS, Iface: b.topo.MidDev, VIPs: b.vips(),
			Backends: backendMACs(b.topo), Mode: xdpprog.ModeNative, PeerNS: b.topo.GenNS, PeerIface: b.topo.GenDev})
		return err
	}
	f.stop = func() error {
		if x == nil {
			return nil
		}
		err := x.Close()
		x = nil
		return err
	}
	f.alive = func() error { return nil }
	f.counters = func() map[string]uint64 {
		st, err := x.Stats()
		if err != nil {
			return nil
		}
		return map[string]uint64{"xdp_tx": st.TX, "passed_not_vip": st.PassNotVIP, "passed_not_l4": st.PassNotL4,
			"passed_short": st.PassShort, "passed_no_backend": st.PassNoBackend}
	}
	return f
}
