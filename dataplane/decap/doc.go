// Package decap is the backend side of xlb's IPIP and GUE forwarding: a
// small XDP program, built with cilium/ebpf's assembler like
// dataplane/xdpprog (no clang), that strips the outer headers the balancer
// wrote and passes the inner packet to the kernel, for hosts without the
// ipip, ip6_tunnel, sit or fou modules, or that want decapsulation cheaper
// than a tunnel device. `xlb decap` attaches it.
//
//	Ethernet [802.1Q]                               at most one tag
//	  IPv4 proto 4/41, or UDP to the GUE port ─┐
//	  IPv6 next header 4/41, or UDP to the port ┤   anything else: XDP_PASS untouched
//	                                            │   (passed_not_tunnel)
//	  outer destination a local address? ──no──> XDP_PASS untouched (passed_not_local)
//	  outer TTL/hop limit 0? ──yes──> XDP_DROP (dropped_outer_ttl_zero)
//	  outer source a martian? ──yes──> XDP_DROP (dropped_outer_martian)
//	  outer source in Allow? ──no──> XDP_DROP (dropped_outer_not_allowed)
//	  outer header valid, not a fragment,
//	  GUE version 0 without control bit,
//	  inner IPv4/IPv6 header in the frame? ──no──> XDP_PASS untouched (passed_invalid)
//	  inner source a martian? ──yes──> XDP_DROP (dropped_inner_martian)
//	  inner source in Allow, VIPs or Local? ──yes──> XDP_DROP (dropped_inner_own)
//	  inner destination in VIPs? ──no──> XDP_DROP (dropped_inner_not_served)
//	  strip outer IP (+ UDP + GUE with its options), EtherType := inner family,
//	  XDP_PASS: the kernel takes the inner packet as if it came so
//
// What it accepts is what dataplane/packet's Encapsulate writes: plain IPIP
// with protocol 4 (IPv4 inner) or 41 (IPv6 inner) over either outer family,
// and GUE version 0 over UDP to the configured port, the inner protocol in
// the GUE header's proto field; GUE header options (hlen) are skipped, the
// control bit and GUE version 1 (direct IP over UDP) are not decapsulated.
// Outer IPv4 options are allowed; an outer IPv6 header with extension
// headers is not a tunnel to this program.
//
// Only frames whose outer destination is in the Local map are judged: a
// host that routes or bridges someone else's tunnels leaves them alone.
// The map is keyed like xdpprog's VIPs (16 bytes, IPv4-mapped, value the
// IP version).
//
// A tunnel frame to this host is decapsulated only when a balancer could
// have sent it, since the kernel takes the inner packet as if its source
// had sent it from the wire: the outer source in Allow (the balancers'
// addresses or prefixes; empty: every tunnel frame is dropped), TTL or
// hop limit not 0, no martian as the outer or inner source (Martians: the
// unspecified, loopback, link-local, multicast and reserved ranges, and
// IPv4-mapped IPv6), the inner source no address of this host's (Local,
// VIPs) nor a balancer's (Allow), and the inner destination in VIPs, the
// addresses this host serves, so that the kernel only ever delivers a
// decapsulated packet locally and never routes it to another host
// (whatever ip_forward says). The rest is dropped, not passed: a host
// with tunnel devices would otherwise decapsulate it unchecked. Allow,
// VIPs and the fixed martian list are LPM tries keyed by prefixKeyOf, the
// family ahead of the address so that the families never cover each other.
//
// Not checked: the outer UDP checksum (over IPv6 it covers the inner
// packet, whose own checksums the kernel verifies: the packet arrives with
// CHECKSUM_NONE); the outer TTL beyond 0 and the ECN bits (the inner
// header is passed as it is, as Linux's ipip does for the TTL; a
// congestion mark on the outer header is lost).
//
// Persistence: Pin attaches the program with a BPF link pinned in bpffs,
// so it stays after the process that attached it exits, until Unpin (or
// the interface goes away).
package decap
