// Package baseline groups the forwarders `lbbench xdp` measures xlb against,
// each a package it starts and stops in-process on the middle hop of its
// namespace topology:
//
//   - reflector: AF_XDP on xlb's own socket layer and XDP program, with no
//     balancing logic: rewrite the MACs and send the frame back. The I/O
//     limit of xlb's path; xlb's engine cost is what lies above it.
//   - xdpfwd: an in-kernel XDP forwarder: 5-tuple hash modulo N over an
//     array of backend MACs, MAC rewrite, XDP_TX. What a minimal L2 DSR
//     balancer costs without user space.
//   - nftlb: the kernel's own L4 balancing, nftables DNAT with numgen or
//     jhash over the backends, forwarded by the IP stack. What an operator
//     would pick instead of a dedicated balancer.
//
// All three are one-armed: frames to the VIP come in on one interface and
// leave by the same one, with the destination MAC of the chosen backend
// (nftlb also rewrites the destination IP), so a sink on the far side
// counts per backend by destination MAC.
package baseline
