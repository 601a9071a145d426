package packet

import "net/netip"

// Addresses are [16]byte everywhere in the data plane: comparable, hashable
// and pointer-free. IPv4 addresses use the IPv4-mapped form ::ffff:a.b.c.d.
// The netip conversions are for tests, tools and the control plane, not for
// the per-packet path.

var v4InV6Prefix = [12]byte{10: 0xff, 11: 0xff}

// AddrFrom4 returns a in IPv4-mapped form.
func AddrFrom4(a [4]byte) [16]byte {
	return [16]byte{10: 0xff, 11: 0xff, 12: a[0], 13: a[1], 14: a[2], 15: a[3]}
}

// Is4 reports whether a is an IPv4-mapped address.
func Is4(a [16]byte) bool { return [12]byte(a[:12]) == v4InV6Prefix }

// AddrFromNetip returns a as a [16]byte, IPv4 addresses in mapped form. The
// zone, if any, is dropped.
func AddrFromNetip(a netip.Addr) [16]byte { return a.As16() }

// AddrToNetip returns a as a netip.Addr, IPv4-mapped addresses unmapped.
func AddrToNetip(a [16]byte) netip.Addr { return netip.AddrFrom16(a).Unmap() }

// SrcAddr returns p.Src as a netip.Addr (not for the hot path).
func (p *Parsed) SrcAddr() netip.Addr { return AddrToNetip(p.Src) }

// DstAddr returns p.Dst as a netip.Addr (not for the hot path).
func (p *Parsed) DstAddr() netip.Addr { return AddrToNetip(p.Dst) }
