package bgp

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"time"

	api "github.com/osrg/gobgp/v3/api"
)

// Status is the speaker's state for /status and `xlb status`.
type Status struct {
	ASN      uint32     `json:"asn"`
	RouterID netip.Addr `json:"router_id"`
	// ShuttingDown is true after GracefulShutdown.
	ShuttingDown bool             `json:"shutting_down"`
	Neighbors    []NeighborStatus `json:"neighbors"`
	VIPs         []VIPStatus      `json:"vips"`
}

// NeighborStatus is one session.
type NeighborStatus struct {
	Address netip.Addr `json:"address"`
	ASN     uint32     `json:"asn"`
	Port    uint16     `json:"port"`
	// State is the FSM state: idle, connect, active, opensent,
	// openconfirm, established.
	State string `json:"state"`
	Up    bool   `json:"up"`
	// Since is when the session came up; Uptime how long ago (0 when down).
	Since  time.Time     `json:"since,omitzero"`
	Uptime time.Duration `json:"uptime_ns"`
	// Reason is why the session is not up (the last failure), or, when up,
	// "".
	Reason string `json:"reason,omitempty"`
	// Transitions counts the times the session came up or went down.
	Transitions uint64 `json:"transitions"`
	// Prefixes sent to the neighbor, received from it and accepted (both
	// families).
	PrefixesSent     uint64 `json:"prefixes_sent"`
	PrefixesReceived uint64 `json:"prefixes_received"`
	PrefixesAccepted uint64 `json:"prefixes_accepted"`
}

// VIPStatus is one VIP that SetVIPs named (or that is still announced).
type VIPStatus struct {
	VIP       netip.Addr `json:"vip"`
	Announced bool       `json:"announced"`
	NextHop   netip.Addr `json:"next_hop,omitzero"`
	// GracefulShutdown: announced with the GRACEFUL_SHUTDOWN community.
	GracefulShutdown bool `json:"graceful_shutdown,omitempty"`
	// Reason is why the VIP is not announced.
	Reason string `json:"reason,omitempty"`
}

// Status reports the sessions and the VIPs, each sorted by address.
func (s *Speaker) Status() Status {
	st := Status{ASN: s.cfg.ASN, RouterID: s.cfg.RouterID}
	// Prefix counts come from GoBGP (one management call), outside smu.
	counts := map[netip.Addr][3]uint64{}
	s.mu.Lock()
	st.ShuttingDown = s.shutdown
	live := s.started && !s.stopped
	s.mu.Unlock()
	if live {
		_ = s.srv.ListPeer(context.Background(), &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
			a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress())
			if err != nil {
				return
			}
			var c [3]uint64
			for _, af := range p.AfiSafis {
				if s := af.GetState(); s != nil {
					c[0] += s.Advertised
					c[1] += s.Received
					c[2] += s.Accepted
				}
			}
			counts[a.Unmap()] = c
		})
	}
	now := time.Now()
	s.smu.Lock()
	defer s.smu.Unlock()
	for _, a := range slices.SortedFunc(maps.Keys(s.sessions), netip.Addr.Compare) {
		ss := s.sessions[a]
		ns := NeighborStatus{Address: a, ASN: ss.nb.ASN, Port: port(ss.nb), State: stateName(ss.state),
			Up: ss.up, Since: ss.since, Reason: ss.reason, Transitions: ss.transitions}
		if ss.up {
			ns.Uptime = now.Sub(ss.since)
			ns.Reason = ""
		}
		c := counts[a]
		ns.PrefixesSent, ns.PrefixesReceived, ns.PrefixesAccepted = c[0], c[1], c[2]
		st.Neighbors = append(st.Neighbors, ns)
	}
	for _, a := range slices.SortedFunc(maps.Keys(s.vips), netip.Addr.Compare) {
		st.VIPs = append(st.VIPs, s.vips[a])
	}
	return st
}
