package neigh

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// route is what a route lookup gave for one target: where its frames go and
// from which address, or why they cannot go out of our interface.
type route struct {
	nexthop netip.Addr
	src     netip.Addr
	why     string // non-empty: unusable
}

// lookupRoute asks the kernel how it would send to k.addr. An IPv6
// link-local address is looked up on our interface, as its zone.
func (r *Resolver) lookupRoute(k key) route {
	dst := net.IP(k.addr.AsSlice())
	var rts []netlink.Route
	var err error
	if k.addr.Is6() && k.addr.IsLinkLocalUnicast() {
		rts, err = r.h.RouteGetWithOptions(dst, &netlink.RouteGetOptions{OifIndex: r.ifindex})
	} else {
		rts, err = r.h.RouteGet(dst)
	}
	if err != nil {
		return route{why: "no route: " + err.Error()}
	}
	if len(rts) == 0 {
		return route{why: "no route"}
	}
	rt := rts[0]
	if rt.Type != unix.RTN_UNICAST {
		return route{why: fmt.Sprintf("not a unicast route (type %d): a local or broadcast address?", rt.Type)}
	}
	if rt.LinkIndex != r.ifindex {
		return route{why: fmt.Sprintf("routed out of ifindex %d, not %s", rt.LinkIndex, r.ifname)}
	}
	gw := gatewayOf(rt)
	if !k.routed && gw.IsValid() {
		return route{why: fmt.Sprintf("not on-link: routed via %s", gw)}
	}
	out := route{nexthop: k.addr}
	if gw.IsValid() {
		out.nexthop = gw
	}
	if src, ok := netip.AddrFromSlice(rt.Src); ok {
		out.src = normalize(src)
	} else {
		out.src = r.interfaceAddr(k.addr.Is4())
	}
	return out
}

// gatewayOf is the route's gateway: RTA_GATEWAY, or RTA_VIA (an IPv4 route
// via an IPv6 next hop); invalid when the destination is on-link.
func gatewayOf(rt netlink.Route) netip.Addr {
	if a, ok := netip.AddrFromSlice(rt.Gw); ok && !a.IsUnspecified() {
		return normalize(a)
	}
	if v, ok := rt.Via.(*netlink.Via); ok {
		if a, ok := netip.AddrFromSlice(v.Addr); ok && !a.IsUnspecified() {
			return normalize(a)
		}
	}
	return netip.Addr{}
}

// interfaceAddr is a usable address of our interface in a family, global
// scope first: the source when a route names none (it rarely does not).
func (r *Resolver) interfaceAddr(v4 bool) netip.Addr {
	family := netlink.FAMILY_V6
	if v4 {
		family = netlink.FAMILY_V4
	}
	link, err := r.h.LinkByIndex(r.ifindex)
	if err != nil {
		return netip.Addr{}
	}
	addrs, err := r.h.AddrList(link, family)
	if err != nil {
		return netip.Addr{}
	}
	var best netip.Addr
	for _, a := range addrs {
		if a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED|unix.IFA_F_DEPRECATED) != 0 || a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		if a.Scope == unix.RT_SCOPE_UNIVERSE {
			return normalize(ip)
		}
		if !best.IsValid() {
			best = normalize(ip)
		}
	}
	return best
}
