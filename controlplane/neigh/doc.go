// Package neigh answers, for the balancer's interface, which destination MAC
// a frame for a backend gets: for L2_DSR the
// backend's own MAC from the kernel neighbour table (the backend must be
// on-link), for IPIP/GUE the MAC of the next hop a route lookup picks
// (the gateway, or the backend itself when on-link), together with the
// source address the kernel would use towards the backend, for the outer
// header. A MAC configured on the endpoint overrides all of this.
//
// The kernel does the resolving; we only read its answers and ask it to try.
// To ask, the resolver sends RTM_NEWNEIGH with NTF_USE for the next hop
// (what `ip neigh replace ADDR dev IF use` sends): the kernel creates the
// entry if needed and runs neigh_event_send on it, exactly as if a packet
// were queued to that neighbour. A missing or FAILED entry becomes
// INCOMPLETE and is solicited (ARP request, NDP neighbour solicitation); a
// STALE one goes through DELAY and PROBE, so it is confirmed by unicast or
// found failed. We prefer this to the other usual trigger, a UDP datagram to
// the discard port from a socket bound to the interface: it sends nothing
// to the backend but ARP/NDP, it needs no socket in the interface's network
// namespace, and the entry it creates is an ordinary dynamic one that the
// kernel ages as usual. It needs CAP_NET_ADMIN, which attaching XDP needs
// anyway.
//
// Freshness: a subscription to neighbour updates applies every change as it
// happens (a gratuitous ARP or unsolicited NA from a backend whose MAC
// changed, an entry that fails or is deleted); a subscription to route
// updates re-reads the routes (next hops of IPIP/GUE backends) shortly
// after they change; and a periodic full re-read is the safety net: it
// re-lists routes and neighbours and asks the kernel to confirm every STALE,
// FAILED or missing next hop, so a MAC that changed without announcement is
// found within about one reachable time plus one refresh interval.
//
// An entry with a zero MAC, or in state NONE, INCOMPLETE or FAILED, counts as
// unknown: the resolver never answers a zero MAC. Each transition between
// known, unknown (with its reason) and a changed MAC is logged once.
package neigh
