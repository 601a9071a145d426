// Package bgp is the route announcer of a fleet of xlb instances:
// a BGP speaker that announces each VIP as a host route (/32, /128) to the
// routers in front of the instances, so that they spread clients over every
// instance that announces it (ECMP). It embeds GoBGP
// (github.com/osrg/gobgp/v3/pkg/server) as a library.
//
// The package knows nothing of the appliance: its caller says, with SetVIPs,
// which VIPs it wants announced, each with its next hop (the instance's
// address on dataplane.interface, of the VIP's family), or why not; the
// Speaker reconciles GoBGP's table to that set (announcing what is missing,
// withdrawing what is no longer wanted), in a fixed order, and keeps its own
// bookkeeping last, so that a failed call is retried by the next SetVIPs.
// SetNeighbors is declarative the same way (a reload adds, removes or changes
// sessions). GracefulShutdown re-announces every VIP with the
// GRACEFUL_SHUTDOWN community (RFC 8326, 65535:0) and then withdraws it;
// after it, SetVIPs announces nothing.
//
// How the appliance is meant to drive it (docs/config.md, [bgp]): on every change
// of attachment, workers, health verdicts, eligible sets or node drain,
// SetVIPs with each VIP's wish (Announce, or a Reason such as
// ReasonNotAttached, ReasonNoEligible, ReasonNodeDrained); on SIGTERM with
// graceful_shutdown_sec > 0, GracefulShutdown with a short settle (about a
// second: the time routers need to act on the community), then keep
// forwarding graceful_shutdown_sec, then Stop and detach; with 0, SetVIPs
// withdrawing everything (ReasonShuttingDown) and Stop. A node drain may
// announce with VIP.GracefulShutdown first, then withdraw; undrain announces
// again. On reload: SetNeighbors(Neighbors(cfg.BGP)) and SetVIPs;
// config.BGPRestartFields says when a restart is needed instead.
//
// Sessions: the instance dials out to each neighbor (active, never passive)
// and listens on no port (GoBGP's listen port -1), so it needs no inbound
// port 179. Every session carries IPv4 and IPv6 unicast (MP-BGP): an IPv6
// VIP needs an IPv6 next hop, which rides in MP_REACH_NLRI over a session of
// either family. A VIP whose next hop is missing or of the other family is
// not announced, and Status says so. A neighbor that does not answer, or
// refuses the session (wrong AS, wrong TCP MD5 password), is retried for
// ever with GoBGP's timers: a refused or unanswered dial again after
// Config.ConnectRetry (to twice that, jittered; GoBGP's own default, 120 s,
// is far too slow for a fleet), a session closed by a NOTIFICATION after
// GoBGP's idle hold time (5 s) plus 1–2 s. Forwarding never depends on it.
//
// Logging: once per change of a session's condition: up, down (with the
// reason), and, while it is not up, each new reason it fails for (a
// neighbor refusing every 7 s logs once). GoBGP's own log goes to the zap
// logger at debug level (errors at error level).
//
// Metrics (Collector, registered by the caller):
//
//	xlb_bgp_session_up{neighbor}               1 while the session is ESTABLISHED
//	xlb_bgp_session_transitions_total{neighbor} times the session came up or went down
//	xlb_bgp_vip_announced{vip}                 1 while the VIP is announced, for every VIP of SetVIPs
//	xlb_bgp_announcements_total                route announcements sent to GoBGP (graceful-shutdown re-announcements included)
//	xlb_bgp_withdrawals_total                  route withdrawals sent to GoBGP
package bgp
