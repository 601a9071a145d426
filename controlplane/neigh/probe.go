package neigh

import (
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
)

// probe asks the kernel to resolve (or confirm) the neighbour a, at most
// once per MinProbeInterval: RTM_NEWNEIGH with NTF_USE runs neigh_event_send
// on the entry, creating it if needed, as a queued packet would (see the
// package comment for why this trigger). It returns how long to wait when
// it is too soon to ask again, else 0.
func (r *Resolver) probe(a netip.Addr, now time.Time) time.Duration {
	if t, ok := r.w.probed[a]; ok && now.Sub(t) < r.opts.MinProbeInterval {
		return r.opts.MinProbeInterval - now.Sub(t)
	}
	r.w.probed[a] = now
	err := r.h.NeighSet(&netlink.Neigh{
		LinkIndex: r.ifindex,
		IP:        net.IP(a.AsSlice()),
		Flags:     netlink.NTF_USE,
	})
	if err != nil {
		r.log.Debug("asking the kernel to resolve a neighbour", zap.Stringer("addr", a), zap.Error(err))
	}
	return 0
}
