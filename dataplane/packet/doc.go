// Package packet parses Ethernet/IP/L4 frames without allocating and rewrites
// them in place for their backend (L2 DSR, IPIP, GUE).
//
// Parse fills a caller-owned Parsed from a frame: up to two VLAN tags, IPv4
// (options, fragments, AH) or IPv6 (hop-by-hop, routing, destination options,
// fragment and AH headers), then TCP/UDP ports and flags, ICMP/ICMPv6 type and
// code, and the flow an ICMP error quotes (SPEC X1). It never panics and
// returns ErrNotIP, ErrTruncated or ErrMalformed for frames it cannot use,
// keeping the destination address whenever it could be read.
//
// RewriteL2 swaps MACs for direct server return; Encapsulate builds IPIP or
// GUE outer headers in the headroom before the frame, leaving the inner
// packet where it is. Addresses are [16]byte, IPv4 in IPv4-mapped form.
package packet
