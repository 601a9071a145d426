// Package nftlb is a baseline for `lbbench xdp`: the kernel's own L4
// balancing, what an operator would set up instead of a dedicated
// balancer. In the middle namespace it installs one nftables table
//
//	table ip blnf_lb {
//		chain pre {
//			type nat hook prerouting priority dstnat; policy accept;
//			ip daddr VIP udp dport P counter dnat to numgen inc mod N map { 0 : IP0, 1 : IP1, ... }
//		}
//	}
//
// (AlgoJhash: `jhash ip saddr . udp sport . ip daddr . udp dport mod N
// seed S` instead of numgen), and what forwarding back out of the same
// interface needs: IP forwarding on, rp_filter and ICMP redirects off, a
// /32 (/128) route to every backend through the interface and a permanent
// neighbour entry with its MAC, so no ARP or NDP is sent. Frames leave with
// the backend's MAC and IP as destination and the interface's MAC as
// source; Backends gives the index → IP, MAC mapping a sink counts by.
//
// This is stateful: DNAT runs on the first packet of a flow and conntrack
// carries the rest, so numgen spreads flows (not packets) round-robin and
// every distinct 5-tuple costs a conntrack entry. The counter in the rule
// therefore counts new flows (Stats).
//
// Start is idempotent (a table of the same name, left by a run that
// crashed, is replaced in the same nft transaction; routes and neighbours
// are replaced); Close deletes the table, the routes and the neighbour
// entries, deletes the conntrack entries to the VIP and puts the sysctls
// back as it found them. The interface must carry no XDP program: one
// attached through netlink (nobody holds it) is detached, one held by a
// BPF link (a running xlb, reflector or xdpfwd) makes Start fail.
//
// It drives the nft command (nftables; `apt-get install nftables`) and
// netlink.
package nftlb
