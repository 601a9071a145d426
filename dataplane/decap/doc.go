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
//	  outer header valid, not a fragment,
//	  GUE version 0 without control bit,
//	  inner IPv4/IPv6 header in the frame? ──no──> XDP_PASS untouched (passed_invalid)
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
// Only frames whose outer destination is in the Local map are stripped: a
// host that routes or bridges someone else's tunnels leaves them alone, and
// a stray tunnel packet cannot inject packets with arbitrary inner
// addresses unless it was sent to this host. The map is keyed like
// xdpprog's VIPs (16 bytes, IPv4-mapped, value the IP version).
//
// Not checked: the outer UDP checksum (over IPv6 it covers the inner
// packet, whose own checksums the kernel verifies: the packet arrives with
// CHECKSUM_NONE); the outer TTL and ECN bits (the inner header is passed
// as it is, as Linux's ipip does for the TTL; a congestion mark on the
// outer header is lost).
//
// Persistence: Pin attaches the program with a BPF link pinned in bpffs,
// so it stays after the process that attached it exits, until Unpin (or
// the interface goes away).
package decap
