package neigh

import (
	"net/netip"

	"xlb/config"
)

// Target is one address the resolver is asked to follow.
type Target struct {
	Addr   netip.Addr
	Method config.ForwardingMethod
	// Static says the endpoint's MAC is configured: the route (next hop,
	// source) is still followed but no neighbour is resolved for it.
	Static bool
}

// key identifies a followed address. IPIP and GUE need the same thing (the
// next hop of a route lookup) and share a key; L2_DSR needs the address
// itself on-link.
type key struct {
	addr   netip.Addr
	routed bool
}

func keyOf(addr netip.Addr, method config.ForwardingMethod) key {
	return key{addr: normalize(addr), routed: method != config.ForwardL2DSR}
}

// normalize drops what the kernel's tables do not key on: a zone and the
// IPv4-mapped form.
func normalize(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// TargetsOf lists what cfg needs resolved: every endpoint with its service's
// forwarding method. An L2_DSR endpoint with a configured MAC needs nothing
// and is left out; an IPIP/GUE one is kept as Static, for its source.
func TargetsOf(cfg *config.Config) []Target {
	var ts []Target
	for _, s := range cfg.Services {
		for _, g := range s.Groups {
			for _, ep := range g.Endpoints {
				if ep.HasMAC && s.ForwardingMethod == config.ForwardL2DSR {
					continue
				}
				ts = append(ts, Target{Addr: ep.IP, Method: s.ForwardingMethod, Static: ep.HasMAC})
			}
		}
	}
	return ts
}
