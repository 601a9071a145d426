package admin

import (
	"slices"

	"xlb/controlplane/bgp"
	"xlb/dataplane"
)

// Report is the appliance's state at one instant: what /status serves as
// JSON and what /metrics exports. Counters are cumulative since start and
// summed over workers.
type Report struct {
	// Generation is the snapshot's (0 before the first).
	Generation uint64 `json:"generation"`
	// NowMs is the control plane's clock, the clock of DrainUntilMs.
	NowMs     int64            `json:"now_ms"`
	Runtime   *Runtime         `json:"runtime,omitempty"`
	Conntrack *ConntrackReport `json:"conntrack,omitempty"`
	Queues    []QueueReport    `json:"queues"`
	Services  []ServiceReport  `json:"services"`
	// Orphans are backends still draining from a service that left the
	// configuration.
	Orphans []BackendReport `json:"orphans,omitempty"`
	// Reloads and LastReload: from a source that reloads its configuration.
	Reloads    *ReloadReport `json:"reloads,omitempty"`
	LastReload *LastReload   `json:"last_reload,omitempty"`
	// BGP: the speaker's sessions and routes (with [bgp] only).
	BGP *BGPReport `json:"bgp,omitempty"`
	// FlowSync: the peers tracked flows are shared with (with
	// [flow_sync] only).
	FlowSync *FlowSyncReport `json:"flow_sync,omitempty"`
}

// FlowSyncReport is what an instance shares its tracked flows with: each
// peer as last heard, and the table pull it started with.
type FlowSyncReport struct {
	Listen string         `json:"listen"`
	Peers  []FlowSyncPeer `json:"peers"`
	// Pull is the table pull at start ([flow_sync] pull_on_start); nil
	// when none was made (a kept table, or pull_on_start = false).
	Pull *FlowSyncPull `json:"pull,omitempty"`
}

// FlowSyncPeer is one peer: up while a datagram of it authenticated
// within the last 3 s; lag is its last datagram's age on arrival (the
// two wall clocks' difference).
type FlowSyncPeer struct {
	Address     string  `json:"address"`
	Up          bool    `json:"up"`
	LastHeardMs int64   `json:"last_heard_ms"` // unix ms; 0: never
	LagMs       float64 `json:"lag_ms"`
	RecordsIn   uint64  `json:"records_in"`
	RecordsOut  uint64  `json:"records_out"`
}

// FlowSyncPull is how the table pull at start went.
type FlowSyncPull struct {
	Done    bool   `json:"done"` // false: still pulling
	Peer    string `json:"peer,omitempty"`
	Records int    `json:"records"`
	Stored  int    `json:"stored"`
	TookMs  int64  `json:"took_ms"`
	Error   string `json:"error,omitempty"`
}

// BGPReport is the route announcement of a fleet member: the speaker's
// sessions and each VIP's route with why it is or is not announced, and
// whether an operator drained the node (xlb drain --node).
type BGPReport struct {
	bgp.Status
	NodeDrained bool `json:"node_drained"`
}

// ConntrackReport is the tracking table's occupancy and activity.
type ConntrackReport struct {
	Entries   int     `json:"entries"`
	Capacity  int     `json:"capacity"`
	Occupancy float64 `json:"occupancy"` // Entries / Capacity
	Inserts   uint64  `json:"inserts"`
	Updates   uint64  `json:"updates"`
	Evictions uint64  `json:"evictions"`
	// EvictionsHalfOpen: of Evictions, entries on probation (only a SYN,
	// or only a flow's first packet, seen).
	EvictionsHalfOpen uint64 `json:"evictions_half_open"`
	// Refused: new entries on probation not stored, their buckets full of
	// established ones.
	Refused   uint64 `json:"refused"`
	Spills    uint64 `json:"spills"` // new keys stored in their second bucket
	Moves     uint64 `json:"moves"`  // keys moved to their other bucket to make room
	Reclaimed uint64 `json:"reclaimed"`
	Deletes   uint64 `json:"deletes"`
	// Faults: faults contained in the mapping of a table kept in a file
	// (changed under the process); the first replaced it by an empty one
	// in memory, whose counters the others are.
	Faults uint64 `json:"faults"`
}

// QueueReport is the counters of the worker(s) of one rx queue.
type QueueReport struct {
	Queue int `json:"queue"`
	// RX counts frames the worker decided: TX + Pass + every drop.
	RX uint64 `json:"rx_packets"`
	// TX counts frames forwarded (rewritten and put on the TX ring).
	TX    uint64 `json:"tx_packets"`
	Pass  uint64 `json:"pass_packets"`
	Drops Drops  `json:"drops"`
	// Evictions counts live tracking entries this queue's new flows
	// displaced (X3).
	Evictions uint64 `json:"conntrack_evictions"`
	// NotRecorded counts new flows forwarded without an entry, over the
	// queue's new-entry rate.
	NotRecorded uint64 `json:"conntrack_not_recorded"`
	// TooBigSent counts the too-big drops answered with ICMP
	// fragmentation needed / packet too big to the sender (X1).
	TooBigSent uint64 `json:"too_big_icmp_sent"`
	// QUIC counts the UDP packets of services with QUIC-LB by what routing
	// by connection ID made of them.
	QUIC QUICCounts `json:"quic_cid"`
}

// ServiceReport is one backend service.
type ServiceReport struct {
	Name string `json:"name"`
	ID   uint16 `json:"id"`
	// Side is "primary" or "failover" (E5).
	Side string `json:"side"`
	// Eligible names the eligible set's backends; Why is the rule that
	// produced it.
	Eligible []string `json:"eligible"`
	Why      string   `json:"why"`
	// Fingerprint identifies the eligible set and Maglev table: instances
	// with the same configuration and health view show the same one (S5),
	// and then pick the same backend for every new flow.
	Fingerprint string `json:"fingerprint"`
	// Weighted: WEIGHTED_MAGLEV. WeightFallback names the backends whose
	// missing or invalid weight made the service fall back to equal
	// weights (W1a), as "NAME: STATE"; empty when it uses their weights.
	Weighted         bool            `json:"weighted"`
	WeightFallback   []string        `json:"weight_fallback,omitempty"`
	ForwardedPackets uint64          `json:"forwarded_packets"`
	ForwardedBytes   uint64          `json:"forwarded_bytes"`
	NewConnections   uint64          `json:"new_connections"`
	Drops            Drops           `json:"drops"`
	Backends         []BackendReport `json:"backends"`
	// FailoverSwitches: switches to the failover side [0] and back to
	// primary [1]; exported to /metrics only.
	FailoverSwitches [2]uint64 `json:"-"`
}

// BackendReport is one backend: current members in configuration order,
// then removed ones that are still draining.
type BackendReport struct {
	// Name is the configured name, or the address of an unnamed endpoint.
	Name     string `json:"name"`
	IP       string `json:"ip"`
	Group    string `json:"group"`
	Failover bool   `json:"failover"`
	Healthy  bool   `json:"healthy"`
	// Weight is the selection weight; ReportedWeight the last the backend
	// reported (W1).
	Weight         uint32 `json:"weight"`
	ReportedWeight uint32 `json:"reported_weight"`
	// WeightState is what its latest health-check reply said about its
	// weight (W1a); weighted services only.
	WeightState string `json:"weight_state,omitempty"`
	Eligible    bool   `json:"eligible"`
	// Ready: its next-hop MAC is known; a backend that is not ready is
	// never sent a frame.
	Ready bool `json:"ready"`
	// Removed: never selected again (left the configuration or drained by
	// an operator, M5); Draining: removed, and its flows still reach it
	// until DrainUntilMs.
	Removed          bool   `json:"removed"`
	Draining         bool   `json:"draining"`
	DrainUntilMs     int64  `json:"drain_until_ms,omitempty"`
	ForwardedPackets uint64 `json:"forwarded_packets"`
	ForwardedBytes   uint64 `json:"forwarded_bytes"`
	NewConnections   uint64 `json:"new_connections"`
}

// Gather builds a report from what in holds, reading the counters once.
// It allocates; it is for requests, never for the hot path.
func Gather(in Inputs) *Report {
	snap, workers, now := in.Snapshot, in.Workers, in.Now
	r := &Report{NowMs: now, Runtime: in.Runtime, Queues: queues(workers), Services: []ServiceReport{}}
	if ct := in.Conntrack; ct != nil {
		st, n, c := ct.Stats(), ct.Len(), ct.Capacity()
		r.Conntrack = &ConntrackReport{Entries: n, Capacity: c, Inserts: st.Inserts, Updates: st.Updates,
			Evictions: st.Evictions, EvictionsHalfOpen: st.EvictionsHalfOpen, Spills: st.Spills, Moves: st.Moves,
			Reclaimed: st.Reclaimed, Deletes: st.Deletes, Refused: st.Refused, Faults: in.ConntrackFaults}
		if c > 0 {
			r.Conntrack.Occupancy = float64(n) / float64(c)
		}
	}
	if rr := in.Reloads; rr != nil {
		r.Reloads, r.LastReload = rr, rr.Last
	}
	r.BGP = in.BGP
	r.FlowSync = in.FlowSync
	if snap == nil {
		return r
	}
	r.Generation = snap.Gen
	// Backends by service ID, current members first in configuration
	// order, then the removed ones by slot.
	bySvc := map[uint16][]*dataplane.Backend{}
	listed := make([]bool, len(snap.Backends))
	for _, svc := range snap.Services {
		if svc == nil {
			continue
		}
		for _, ref := range svc.Members {
			if b := snap.Backend(ref); b != nil && !listed[ref.Slot()] {
				listed[ref.Slot()] = true
				bySvc[svc.ID] = append(bySvc[svc.ID], b)
			}
		}
	}
	for slot, b := range snap.Backends {
		if b == nil || listed[slot] {
			continue
		}
		if snap.Service(b.Service) == nil {
			r.Orphans = append(r.Orphans, backend(b, workers, now))
			continue
		}
		bySvc[b.Service] = append(bySvc[b.Service], b)
	}
	for _, svc := range snap.Services {
		if svc != nil {
			sr := service(snap, svc, bySvc[svc.ID], workers, now)
			sr.FailoverSwitches = in.Switches[svc.Name]
			r.Services = append(r.Services, sr)
		}
	}
	return r
}

// queues sums the workers' counters by queue (two workers given the same
// queue number are added together), ordered by queue.
func queues(workers []QueueStats) []QueueReport {
	qs := []QueueReport{}
	for _, w := range workers {
		if w.Stats == nil {
			continue
		}
		i := slices.IndexFunc(qs, func(q QueueReport) bool { return q.Queue == w.Queue })
		if i < 0 {
			qs = append(qs, QueueReport{Queue: w.Queue})
			i = len(qs) - 1
		}
		q, s := &qs[i], w.Stats
		q.TX += s.Forward.Load()
		q.Pass += s.Pass.Load()
		q.Evictions += s.Evictions.Load()
		q.NotRecorded += s.NotRecorded.Load()
		q.TooBigSent += s.TooBigSent.Load()
		q.Drops.add(&s.Drops)
		q.QUIC.add(&s.CID)
	}
	for i := range qs {
		q := &qs[i]
		q.RX = q.TX + q.Pass
		for _, d := range q.Drops {
			q.RX += d
		}
	}
	slices.SortFunc(qs, func(a, b QueueReport) int { return a.Queue - b.Queue })
	return qs
}

// service reports a service and its backends.
func service(snap *dataplane.Snapshot, svc *dataplane.Service, backends []*dataplane.Backend, workers []QueueStats, now int64) ServiceReport {
	sr := ServiceReport{Name: svc.Name, ID: svc.ID, Side: svc.Side.String(), Why: svc.EligibleWhy,
		Fingerprint: svc.Fingerprint, Weighted: svc.Weighted, Eligible: []string{}, Backends: []BackendReport{}}
	for _, w := range workers {
		if w.Stats == nil {
			continue
		}
		if c := w.Stats.Service(svc.ID); c != nil {
			sr.ForwardedPackets += c.Forward.Load()
			sr.ForwardedBytes += c.ForwardBytes.Load()
			sr.NewConnections += c.NewConnections.Load()
			sr.Drops.add(&c.Drops)
		}
	}
	eligible := make(map[dataplane.BackendRef]bool, len(svc.Eligible))
	for _, ref := range svc.Eligible {
		if b := snap.Backend(ref); b != nil {
			eligible[ref] = true
			sr.Eligible = append(sr.Eligible, name(b))
		}
	}
	for _, b := range backends {
		br := backend(b, workers, now)
		br.Eligible = eligible[b.Ref]
		if svc.Weighted {
			br.WeightState = b.WeightState
			if svc.WeightFallback && !b.Removed && (b.WeightState == "MISSING_WEIGHT" || b.WeightState == "INVALID_WEIGHT") {
				sr.WeightFallback = append(sr.WeightFallback, br.Name+": "+b.WeightState)
			}
		}
		sr.Backends = append(sr.Backends, br)
	}
	return sr
}

// backend reports one backend (Eligible is the caller's to set).
func backend(b *dataplane.Backend, workers []QueueStats, now int64) BackendReport {
	br := BackendReport{
		Name: name(b), IP: b.IP.String(), Group: b.Group, Failover: b.Failover,
		Healthy: b.Healthy, Weight: b.Weight, ReportedWeight: b.ReportedWeight, Ready: b.MACKnown,
		Removed: b.Removed, Draining: b.Removed && now < b.DrainUntil,
	}
	if b.Removed {
		br.DrainUntilMs = b.DrainUntil
	}
	for _, w := range workers {
		if w.Stats == nil {
			continue
		}
		if c := w.Stats.Backend(b.Ref); c != nil {
			br.ForwardedPackets += c.Forward.Load()
			br.ForwardedBytes += c.ForwardBytes.Load()
			br.NewConnections += c.NewConnections.Load()
		}
	}
	return br
}

// name is how a backend is named everywhere: its configured name, or its
// address when it has none.
func name(b *dataplane.Backend) string {
	if b.Name != "" {
		return b.Name
	}
	return b.IP.String()
}
