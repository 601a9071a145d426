package bgp

import (
	"net/netip"

	api "github.com/osrg/gobgp/v3/api"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// CommunityGracefulShutdown is GRACEFUL_SHUTDOWN, 65535:0 (RFC 8326).
const CommunityGracefulShutdown uint32 = 0xFFFF0000

var (
	familyV4 = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	familyV6 = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
)

func family(vip netip.Addr) *api.Family {
	if vip.Is4() {
		return familyV4
	}
	return familyV6
}

// path is the host route of vip as GoBGP takes it: IPv4 in the classic
// NLRI with NEXT_HOP, IPv6 in MP_REACH_NLRI with its next hop (RFC 4760).
// Origin IGP, as for a route the instance originates.
func path(vip netip.Addr, r route) *api.Path {
	nlri := mustAny(&api.IPAddressPrefix{Prefix: vip.String(), PrefixLen: uint32(vip.BitLen())})
	attrs := []*anypb.Any{mustAny(&api.OriginAttribute{Origin: 0})}
	if vip.Is4() {
		attrs = append(attrs, mustAny(&api.NextHopAttribute{NextHop: r.nextHop.String()}))
	} else {
		attrs = append(attrs, mustAny(&api.MpReachNLRIAttribute{
			Family: familyV6, NextHops: []string{r.nextHop.String()}, Nlris: []*anypb.Any{nlri}}))
	}
	if r.gshut {
		attrs = append(attrs, mustAny(&api.CommunitiesAttribute{Communities: []uint32{CommunityGracefulShutdown}}))
	}
	return &api.Path{Family: family(vip), Nlri: nlri, Pattrs: attrs}
}

// mustAny wraps a message of the api package, which cannot fail.
func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}
