// Package xdpfwd is a baseline for `lbbench xdp`: an in-kernel XDP
// forwarder with the least logic an L2 DSR balancer can have, built with
// cilium/ebpf's assembler (no clang).
//
//	Ethernet (untagged)
//	  IPv4 / IPv6 dst not a VIP ─────────────> XDP_PASS (host traffic, ARP…)
//	  VIP, not UDP/TCP (IPv6: right after the fixed header) ─> XDP_PASS
//	  VIP, UDP/TCP:
//	    h = mix(saddr ^ daddr ^ proto ^ ports)   ports 0 for IPv4 fragments
//	    dst MAC = backends[h % n], src MAC = the interface's
//	    ──> XDP_TX (out of the interface it came in on)
//	  truncated or malformed ─────────────────> XDP_PASS
//
// No connection tracking, no weights, no health: a backend is a MAC in an
// array map; BackendIndex is the same choice in Go. A per-CPU counters map
// records every verdict (Stats).
//
// Start attaches the program with a BPF link (native, falling back to
// generic with xdpprog.ModeAuto), Close detaches it.
//
// Veth in native mode: XDP_TX puts frames on the peer's XDP ring, which
// the peer only polls when it has an XDP program of its own (Linux 6.18:
// GRO gives the peer a ring but nothing wakes it for XDP_TX frames, so
// they sit there until other traffic comes, and the ring, 256 frames, then
// overflows into the xdp_tx_errors of ethtool -S). Config.PeerIface makes
// Start attach a pass-everything program to the peer when it has none (an
// AF_XDP sink there has one already); Close removes it. Generic mode sends
// through the peer's ordinary receive path and needs nothing.
package xdpfwd
