// Package xdpprog is xlb's XDP program, built in Go with cilium/ebpf's
// assembler (no clang, nothing generated), and the maps it reads.
//
// The program keeps the host's traffic with the host (SPEC FR1) and hands
// only VIP traffic to the AF_XDP workers:
//
//	Ethernet [802.1Q | 802.1ad] [802.1Q]          at most two tags, as the engine
//	  IPv4: dst in VIPs? ──no──> XDP_PASS          (ARP, SSH, BGP, health checks…)
//	  IPv6: dst in VIPs? ──no──> XDP_PASS
//	        NDP (ICMPv6 133–137) to a VIP ──> XDP_PASS   the kernel answers it (FR1)
//	  VIP ──> bpf_redirect_map(sockets, rx_queue_index, XDP_PASS)
//	        socket registered for the queue ──> XDP_REDIRECT
//	        none (xlb stopped or crashed)   ──> XDP_PASS, never a drop
//	truncated or malformed headers ──> XDP_PASS: the kernel decides
//
// Maps. VIPs is a hash keyed by the 16-byte address, IPv4 in IPv4-mapped
// form (::ffff:a.b.c.d, what netip.Addr.As16 and the engine's parser use);
// its value is the IP version (4 or 6), which the program compares with the
// packet's, so an IPv6 packet to ::ffff:a.b.c.d never matches an IPv4 VIP.
// Sockets is the XSKMAP indexed by rx queue. Queues (a hash, queue → 1)
// records which queues have a socket, since user space cannot read an
// XSKMAP; it is also what asavie/xdp's Program.Register writes. Counters
// is a per-CPU array of the verdict counters that Stats sums.
//
// IPv6 extension headers. To tell NDP from other ICMPv6, the program
// follows hop-by-hop (first only), routing, destination options, AH and
// fragment headers, up to MaxExtHeaders of them, as many as the workers'
// parser (packet.MaxExtHeaders); a non-first fragment ends the walk (it
// carries no ICMPv6 header, and RFC 6980 forbids fragmented NDP), and a
// longer chain goes to the workers, which drop and count it as malformed.
// The limits are the same so that the workers never see NDP: a worker
// cannot give a frame back to the kernel, and one it passes is lost. The
// walk runs only for packets to a VIP: host traffic costs one lookup.
//
// VLAN tags are read from the frame, and forwarded frames keep them. A
// NIC that strips the outer tag in hardware (rx-vlan-offload on), or a
// bridge in front of a veth (it takes the tag into the skb's metadata at
// its port), hands XDP the frame without it: a tagged VIP frame would reach
// its backend untagged, a QinQ frame with its inner tag only. So, in native
// mode, Attach first loads a device-bound variant of the program that asks
// the driver for that tag (the bpf_xdp_metadata_rx_vlan_tag kfunc, Linux
// 6.8+; veth, mlx5, ice and others implement it) and puts it back into the
// frame before parsing it (counted as retagged); a tag it cannot put back
// sends the frame to the kernel (passed_vlan_offload). Generic mode cannot
// do this (device-bound programs attach natively only): Retags says so, and
// xlb run warns.
//
// Attach uses a BPF link (link.AttachXDP), so the kernel detaches the
// program when the last reference — the process — goes away.
package xdpprog
