package appliance

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"xlb/config"
	"xlb/controlplane/neigh"
	"xlb/dataplane"
)

// neighbourWait bounds how long startup waits for backend MACs, so the
// first clients find their backends ready; later ones are published as
// they resolve.
const neighbourWait = 3 * time.Second

// vlanEthHeader is an Ethernet header with one 802.1Q tag: a frame may be
// that much longer than the MTU, which counts from the IP header.
const vlanEthHeader = 18

// localOf is what the balancer puts into rewritten frames: its interface's
// MAC as source; as outer sources of IPIP/GUE, per family, the source the
// kernel picks towards the first such backend (its route's preferred
// source), else the interface's first global address; and the MTU as the
// bound of an encapsulated packet (beyond it, the sender gets ICMP too big).
func localOf(res *neigh.Resolver, cfg *config.Config, link netlink.Link, log *zap.Logger) dataplane.Local {
	l := dataplane.Local{MAC: res.LocalMAC()}
	if mtu := link.Attrs().MTU; mtu > 0 {
		l.MaxFrame, l.MTU = mtu+vlanEthHeader, mtu
	}
	set := func(ip netip.Addr) {
		ip = ip.Unmap()
		if ip.Is4() && !l.HasSrcV4 {
			l.EncapSrcV4, l.HasSrcV4 = dataplane.Addr16(ip), true
		} else if ip.Is6() && !l.HasSrcV6 {
			l.EncapSrcV6, l.HasSrcV6 = dataplane.Addr16(ip), true
		}
	}
	for _, s := range cfg.Services {
		if s.ForwardingMethod == config.ForwardL2DSR {
			continue
		}
		for _, g := range s.Groups {
			for _, ep := range g.Endpoints {
				if src, ok := res.SourceFor(ep.IP); ok {
					set(src)
				}
			}
		}
	}
	v4, v6, err := interfaceAddrs(link)
	if err != nil {
		log.Warn("listing the interface's addresses (IPIP/GUE need an outer source)", zap.Error(err))
	}
	l.Self, l.SubnetBroadcasts = dataplane.SelfAddrs(interfacePrefixes(link))
	for _, ip := range []netip.Addr{v4, v6} {
		if ip.IsValid() {
			set(ip)
		}
	}
	return l
}

// interfaceAddrs are link's first usable global addresses of each family
// (zero where it has none): the outer source of encapsulation where no
// route names one, and the BGP next hops.
func interfaceAddrs(link netlink.Link) (v4, v6 netip.Addr, err error) {
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return v4, v6, err
	}
	const unusable = unix.IFA_F_TENTATIVE | unix.IFA_F_DADFAILED | unix.IFA_F_DEPRECATED
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.Scope != unix.RT_SCOPE_UNIVERSE || a.Flags&unusable != 0 {
			continue
		}
		ip = ip.Unmap()
		if ip.Is4() && !v4.IsValid() {
			v4 = ip
		} else if ip.Is6() && !v6.IsValid() {
			v6 = ip
		}
	}
	return v4, v6, nil
}

// interfacePrefixes are all of link's addresses with their prefix lengths
// (none when they cannot be listed: the warning above says so): VIP frames
// from any of them, or to a subnet's broadcast, are spoofed (FR8).
func interfacePrefixes(link netlink.Link) []netip.Prefix {
	out, _ := listPrefixes(link)
	return out
}

// listPrefixes is interfacePrefixes with the listing's error.
func listPrefixes(link netlink.Link) ([]netip.Prefix, error) {
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.IPNet == nil {
			continue
		}
		ones, _ := a.IPNet.Mask.Size()
		if p, err := ip.Unmap().Prefix(ones); err == nil {
			out = append(out, netip.PrefixFrom(ip.Unmap(), p.Bits()))
		}
	}
	return out, nil
}

// waitNeighbours waits up to neighbourWait for the backends' MACs and logs
// those still unknown; frames to them are dropped (backend-not-ready) until
// they resolve.
func waitNeighbours(ctx context.Context, res *neigh.Resolver, cfg *config.Config, log *zap.Logger) {
	wctx, cancel := context.WithTimeout(ctx, neighbourWait)
	defer cancel()
	if res.Wait(wctx) == nil {
		return
	}
	for _, s := range cfg.Services {
		for _, g := range s.Groups {
			for _, ep := range g.Endpoints {
				if _, ok := res.Resolve(ep, s.ForwardingMethod); !ok {
					log.Warn("backend MAC not known yet: backend not ready until it resolves",
						zap.String("service", s.Name), zap.String("backend", ep.Name),
						zap.Stringer("ip", ep.IP), zap.Stringer("method", s.ForwardingMethod))
				}
			}
		}
	}
}

// macString formats a MAC for logs.
func macString(m [6]byte) string { return net.HardwareAddr(m[:]).String() }

// encapSrc is an outer source for logs (the zero Addr when there is none:
// addrField writes it as "none").
func encapSrc(a [16]byte, ok bool) netip.Addr {
	if !ok {
		return netip.Addr{}
	}
	return netip.AddrFrom16(a).Unmap()
}
