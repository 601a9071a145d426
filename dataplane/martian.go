package dataplane

import (
	"encoding/binary"
	"net/netip"
)

// Frames that are not for us (SPEC FR8, FR9): a VIP frame whose source
// cannot be a client, or that was not sent to the interface's own MAC, or
// that carries a VLAN tag, is dropped and counted by reason before any rule
// sees it, so that it never reaches a backend nor creates a tracking entry.
//
// The address sets are built once per snapshot (indexSources, from
// IndexVIPs); a frame costs a few compares and one lookup in a small
// slice or a map, no allocation.

// srcInfo is what the snapshot knows about one address a frame may carry
// as its source.
type srcInfo struct {
	martian bool     // a directed broadcast of one of the interface's subnets
	self    bool     // one of the balancer's own addresses
	vip     bool     // a VIP
	backend []uint16 // the services it is a backend of (removed ones too)
}

type srcEntry struct {
	hi, lo uint64
	info   *srcInfo
}

// srcIndex is the set of addresses with a srcInfo: a slice scanned
// linearly while small (like the VIPs), a map beyond.
type srcIndex struct {
	small []srcEntry
	large map[[16]byte]*srcInfo
}

func (x *srcIndex) lookup(a *[16]byte) *srcInfo {
	if x.large != nil {
		return x.large[*a]
	}
	hi, lo := binary.LittleEndian.Uint64(a[0:8]), binary.LittleEndian.Uint64(a[8:16])
	for i := range x.small {
		if x.small[i].hi == hi && x.small[i].lo == lo {
			return x.small[i].info
		}
	}
	return nil
}

// indexSources builds the source sets of the snapshot from its VIPs,
// backends and Local.
func (s *Snapshot) indexSources() {
	m := map[[16]byte]*srcInfo{}
	get := func(a [16]byte) *srcInfo {
		in := m[a]
		if in == nil {
			in = &srcInfo{}
			m[a] = in
		}
		return in
	}
	for _, r := range s.Rules {
		get(Addr16(r.VIP)).vip = true
	}
	for _, b := range s.Backends {
		if b == nil {
			continue
		}
		in := get(b.Addr)
		if !containsID(in.backend, b.Service) {
			in.backend = append(in.backend, b.Service)
		}
	}
	for _, a := range s.Local.Self {
		if a.IsValid() {
			get(Addr16(a)).self = true
		}
	}
	if s.Local.HasSrcV4 {
		get(s.Local.EncapSrcV4).self = true
	}
	if s.Local.HasSrcV6 {
		get(s.Local.EncapSrcV6).self = true
	}
	for _, a := range s.Local.SubnetBroadcasts {
		if a.IsValid() {
			get(Addr16(a)).martian = true
		}
	}
	s.srcs = srcIndex{}
	if len(m) > vipLinearMax {
		s.srcs.large = m
		return
	}
	for a, in := range m {
		s.srcs.small = append(s.srcs.small, srcEntry{
			hi: binary.LittleEndian.Uint64(a[0:8]), lo: binary.LittleEndian.Uint64(a[8:16]), info: in,
		})
	}
}

func containsID(ids []uint16, id uint16) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// martianSource reports a source no client can have, by its prefix alone
// (the list is in docs/rules.md, FR8). a is in 16-byte form; v4 says the
// packet is IPv4 (a is then ::ffff:a.b.c.d).
//
// IPv4: 0.0.0.0/8 (this network), 127.0.0.0/8 (loopback), 224.0.0.0/4
// (multicast), 255.255.255.255 (limited broadcast). 240.0.0.0/4 stays
// allowed apart from the broadcast: Google Cloud lets networks use it as
// private space. Link-local 169.254.0.0/16 stays allowed: a host on the
// segment may have no other address.
//
// IPv6: ::/96 (unspecified, loopback, the deprecated IPv4-compatible
// form), ::ffff:0:0/96 (IPv4-mapped: never on the wire, RFC 4291 2.5.5.2),
// ff00::/8 (multicast). Link-local fe80::/10 stays allowed: routers on
// unnumbered links send their ICMPv6 errors from it.
func martianSource(a *[16]byte, v4 bool) bool {
	if v4 {
		ip := binary.BigEndian.Uint32(a[12:16])
		top := ip >> 24
		return top == 0 || top == 127 || top>>4 == 0xe || ip == 0xffffffff
	}
	if a[0] == 0xff {
		return true
	}
	if binary.BigEndian.Uint64(a[0:8]) != 0 {
		return false
	}
	w := binary.BigEndian.Uint32(a[8:12])
	return w == 0 || w == 0xffff
}

// checkSource applies FR8 to the source of a VIP frame, the address the
// frame came from (for an ICMP error, the router that sent it; the quoted
// flow's client is not looked at). It returns the drop reason, or
// ReasonNone; the backend check needs the service and comes later
// (sourceIsBackend).
func checkSource(snap *Snapshot, src *[16]byte, v4 bool) (Reason, *srcInfo) {
	if martianSource(src, v4) {
		return ReasonMartianSource, nil
	}
	in := snap.srcs.lookup(src)
	switch {
	case in == nil:
		return ReasonNone, nil
	case in.martian:
		return ReasonMartianSource, in
	case in.vip:
		return ReasonSourceIsVIP, in
	case in.self:
		return ReasonSourceIsSelf, in
	}
	return ReasonNone, in
}

// sourceIsBackend reports a source that is a backend of the service the
// frame's rule chose: backends answer clients directly and never send to
// their own service's VIP, so such a frame is spoofed (or a loop). A
// backend of another service may well be a client of this one.
func sourceIsBackend(in *srcInfo, svc uint16) bool {
	return in != nil && containsID(in.backend, svc)
}

// foreignMAC reports a frame whose destination MAC is not the interface's
// own (broadcast, multicast, another host's unicast): a switch flooding
// unknown unicast, a bridge or a promiscuous NIC hands us frames for
// others, which a host would not take. An unknown local MAC (zero) checks
// nothing.
func foreignMAC(frame []byte, local *[6]byte) bool {
	if *local == ([6]byte{}) {
		return false
	}
	return [6]byte(frame[0:6]) != *local
}

// SelfAddrs turns the interface's addresses into Local.Self and
// Local.SubnetBroadcasts: every address, and each IPv4 subnet's directed
// broadcast (for prefixes of /30 and shorter: /31 and /32 have none).
func SelfAddrs(prefixes []netip.Prefix) (self, bcast []netip.Addr) {
	for _, p := range prefixes {
		a := p.Addr().Unmap()
		if !a.IsValid() {
			continue
		}
		self = append(self, a)
		if a.Is4() && p.Bits() <= 30 {
			v := binary.BigEndian.Uint32(a.AsSlice()) | (1<<(32-p.Bits()) - 1)
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], v)
			bcast = append(bcast, netip.AddrFrom4(b))
		}
	}
	return self, bcast
}
