package xdp

import (
	"context"

	"xlb/bench/baseline/nftlb"
)

// nftlbForwarder is baseline (c): nftables DNAT, numgen inc over the
// backends, forwarded by the middle namespace's IP stack. It runs after
// xlb: its Close removes the backends' neighbour entries it replaced, which
// xlb needs (xdpfwd, after it, takes the backends' MACs from its config).
func (b *bench) nftlbForwarder() *forwarder {
	f := &forwarder{name: "nftlb", variants: []variant{{name: "nftlb", desc: variantDesc["nftlb"], port: portXLB}}}
	var lb *nftlb.LB
	f.start = func(ctx context.Context) error {
		var bes []nftlb.Backend
		for _, be := range b.topo.Backends {
			bes = append(bes, nftlb.Backend{IP: be.IP, MAC: be.MAC})
		}
		var err error
		lb, err = nftlb.Start(ctx, nftlb.Config{NS: b.topo.MidNS, Iface: b.topo.MidDev, VIP: b.vips()[0],
			Proto: "udp", Port: portXLB, Backends: bes, Algo: nftlb.AlgoNumgen})
		return err
	}
	f.stop = func() error {
		if lb == nil {
			return nil
		}
		err := lb.Close()
		lb = nil
		return err
	}
	f.alive = func() error { return nil }
	f.counters = func() map[string]uint64 {
		st, err := lb.Stats(context.Background())
		if err != nil {
			return nil
		}
		return map[string]uint64{"new_flows": st.Flows}
	}
	return f
}
