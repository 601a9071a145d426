package dataplane

import (
	"encoding/hex"
	"fmt"

	"xlb/dataplane/packet"
	"xlb/quiclb"
)

// QUICRoutes is how a service with QUIC-LB ([[backend_service.quic_lb]])
// routes by connection ID. Immutable once published.
type QUICRoutes struct {
	// Configs by config rotation value (a connection ID's first three
	// bits); nil: not one of the service's. Index 7 (unroutable) is
	// always nil.
	Configs [8]*quiclb.Config
	// ByServerID: the backends with a server ID, current ones and those
	// removed but still draining (M5), so that their connections drain.
	ByServerID map[quiclb.ServerIDKey]BackendRef
}

// CIDOutcome is what routing by connection ID made of a UDP packet of a
// service with QUIC-LB. The strings are the `reason` label of
// xlb_quic_cid_fallback_total and what explain and sim print; keep them
// stable.
type CIDOutcome uint8

const (
	// CIDNone: the service has no QUIC-LB, or the packet is not UDP with
	// its ports (a fragment, an ICMP error).
	CIDNone CIDOutcome = iota
	// CIDRouted: the connection ID named a backend that took the packet.
	CIDRouted
	// The rest fall back to the service's usual path (tracking, Maglev).
	//
	// CIDNotQUIC: the payload is no QUIC packet (too short, fixed bit clear).
	CIDNotQUIC
	// CIDClientChosen: an Initial or 0-RTT packet (the client chose its
	// destination connection ID), a Retry, or an unknown QUIC version.
	CIDClientChosen
	// CIDUnroutable: config rotation 0b111, a server without configuration.
	CIDUnroutable
	// CIDUnknownConfig: a config rotation the service does not have.
	CIDUnknownConfig
	// CIDShort: a connection ID shorter than its configuration's.
	CIDShort
	// CIDUnknownServerID: no backend of the service has the server ID.
	CIDUnknownServerID
	// CIDBackendUnavailable: the backend may not take it: removed and past
	// its drain (M5), unhealthy without persistence (M3, P1), on the side
	// a failover left with draining off (M4).
	CIDBackendUnavailable
	numCIDOutcomes
)

// NumCIDOutcomes is the number of CIDOutcome values, for counter arrays.
const NumCIDOutcomes = int(numCIDOutcomes)

var cidOutcomeNames = [...]string{
	CIDNone:               "none",
	CIDRouted:             "routed",
	CIDNotQUIC:            "not_quic",
	CIDClientChosen:       "client_chosen",
	CIDUnroutable:         "unroutable",
	CIDUnknownConfig:      "unknown_config",
	CIDShort:              "too_short",
	CIDUnknownServerID:    "unknown_server_id",
	CIDBackendUnavailable: "backend_unavailable",
}

func (o CIDOutcome) String() string { return cidOutcomeNames[o] }

// Fallback says the outcome sent the packet down the usual path.
func (o CIDOutcome) Fallback() bool { return o > CIDRouted }

// CIDRoute is what the decider read of a packet's connection ID, for
// explain and sim as much as for the decision.
type CIDRoute struct {
	Outcome  CIDOutcome
	Kind     quiclb.Kind
	Rotation uint8
	// Config is the configuration the first octet named (nil when none).
	Config *quiclb.Config
	// ServerID is the decoded server ID (valid when Config is set and
	// the ID was long enough).
	ServerID quiclb.ServerIDKey
	// Backend is the backend the server ID names, before the checks that
	// may refuse it.
	Backend *Backend
	// Unavailable says why Backend may not take the packet
	// (CIDBackendUnavailable): "removed", "unhealthy" or "failover", as a
	// tracked flow's Invalid.
	Unavailable string
}

// readCID decodes the destination connection ID of a UDP packet p of a
// service with QUIC-LB, into d.CID; the backend it names is checked in
// back (routeByCID).
func (dc *Decider) readCID(data []byte, p *packet.Parsed, snap *Snapshot, q *QUICRoutes, d *Decision) {
	r := &d.CID
	end := p.L3Off + p.IPLen
	start := p.L4Off + 8 // the UDP header
	if start >= end || end > len(data) {
		r.Outcome = CIDNotQUIC
		return
	}
	dcid, kind := quiclb.DCID(data[start:end])
	r.Kind = kind
	switch kind {
	case quiclb.NotQUIC:
		r.Outcome = CIDNotQUIC
		return
	case quiclb.ClientChosen:
		r.Outcome = CIDClientChosen
		return
	}
	r.Rotation = quiclb.RotationOf(dcid[0])
	if r.Rotation == quiclb.Unroutable {
		r.Outcome = CIDUnroutable
		return
	}
	c := q.Configs[r.Rotation]
	if c == nil {
		r.Outcome = CIDUnknownConfig
		return
	}
	r.Config = c
	sid, err := c.ServerID(dcid, &dc.quic)
	if err != nil {
		r.Outcome = CIDShort
		return
	}
	r.ServerID = quiclb.KeyOf(sid)
	ref, ok := q.ByServerID[r.ServerID]
	if !ok {
		r.Outcome = CIDUnknownServerID
		return
	}
	if r.Backend = snap.Backend(ref); r.Backend == nil {
		r.Outcome = CIDUnknownServerID
		return
	}
	r.Outcome = CIDRouted // unless routeByCID refuses it
}

// routeByCID forwards d to the backend its connection ID named, when that
// backend may take it as it would a tracked flow's packet (M3, M4, M5,
// P1); otherwise it marks the fallback. It reports whether it decided.
func (dc *Decider) routeByCID(d *Decision, now int64) bool {
	b := d.CID.Backend
	side := SidePrimary
	if b.Failover {
		side = SideFailover
	}
	if d.CID.Unavailable = unavailable(d.Service, b, side, d.Flow.Proto, now); d.CID.Unavailable != "" {
		d.CID.Outcome = CIDBackendUnavailable
		return false
	}
	d.Track = TrackUntracked
	d.Backend = b
	d.Side = side
	d.Verdict = VerdictForward
	return true
}

// CIDReport is CIDRoute in words, for explain and sim (not the hot path).
type CIDReport struct {
	// Outcome is CIDOutcome's word: routed, or the fallback's reason.
	Outcome string `json:"outcome"`
	// Packet is what the QUIC header is: short header, handshake,
	// client-chosen ID, not QUIC.
	Packet string `json:"packet"`
	// Config is the configuration the first octet named; ServerID the
	// server ID decoded (hex); Backend the endpoint that has it.
	Config   string `json:"config,omitempty"`
	ServerID string `json:"server_id,omitempty"`
	Backend  string `json:"backend,omitempty"`
	Why      string `json:"why"`
}

// Report describes r; nil when the service has no QUIC-LB or the packet
// was not looked at (CIDNone).
func (r *CIDRoute) Report() *CIDReport {
	if r.Outcome == CIDNone {
		return nil
	}
	rep := &CIDReport{Outcome: r.Outcome.String(), Packet: r.Kind.String()}
	if r.Config != nil {
		rep.Config = r.Config.String()
	}
	if r.ServerID[0] != 0 {
		rep.ServerID = hex.EncodeToString(r.ServerID.ServerID())
	}
	if r.Backend != nil {
		rep.Backend = r.Backend.Name
	}
	const usual = "; the service's usual path (tracking, Maglev) decides"
	switch r.Outcome {
	case CIDRouted:
		rep.Why = fmt.Sprintf("server ID %s is %s's: sent there whatever the client's address and port, untracked", rep.ServerID, rep.Backend)
	case CIDNotQUIC:
		rep.Why = "no QUIC packet (too short, or the fixed bit is clear)" + usual
	case CIDClientChosen:
		rep.Why = "an Initial or 0-RTT packet (its destination connection ID is the client's choice), a Retry or an unknown version" + usual +
			"; the server it reaches then issues IDs with its own server ID"
	case CIDUnroutable:
		rep.Why = "config rotation 0b111: the ID of a server without configuration" + usual
	case CIDUnknownConfig:
		rep.Why = fmt.Sprintf("config rotation %d: the service has no such configuration", r.Rotation) + usual
	case CIDShort:
		rep.Why = fmt.Sprintf("the connection ID is shorter than the %d octets of %s", r.Config.CIDLen(), rep.Config) + usual
	case CIDUnknownServerID:
		rep.Why = fmt.Sprintf("server ID %s: no endpoint of the service has it", rep.ServerID) + usual
	case CIDBackendUnavailable:
		why := map[string]string{
			"removed":   "removed, its drain over (M5)",
			"unhealthy": "unhealthy, and the service does not persist UDP flows on unhealthy backends (M3, P1)",
			"failover":  "on the side a failover left, with disable_connection_drain_on_failover (M4)",
		}[r.Unavailable]
		rep.Why = fmt.Sprintf("server ID %s is %s's, which may not take it: %s", rep.ServerID, rep.Backend, why) + usual
	}
	return rep
}
