// Package explain answers "what would xlb do with this packet, and why?"
// (SPEC X4) by running the real engine on a real frame and reporting every
// step: rule, keys, what routing by QUIC-LB connection ID made of it,
// tracking, eligible set and side, Maglev slot, backend.
package explain

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/sim"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// Request is the packet to explain and the state to assume.
type Request struct {
	Packet craft.Packet
	// Unhealthy names backends to mark unhealthy; Weights sets reported
	// weights (name -> 0..1000). Every other backend is healthy at 1000.
	Unhealthy []string
	Weights   map[string]uint32
	// Previous is the configuration the running xlb had before it reloaded
	// the one explained (nil: no reload). The packet is decided as just
	// after that reload: a forwarding rule Previous has and the new one
	// lacks drains for its service's connection_draining_timeout_sec
	// (M5).
	Previous *config.Config
	// QUIC describes the QUIC packet Packet's payload holds ("" when
	// none), for the report's packet line.
	QUIC string
}

// Member is one backend in the report.
type Member struct {
	Name     string `json:"name"`
	IP       string `json:"ip"`
	Group    string `json:"group"`
	Failover bool   `json:"failover"`
	Healthy  bool   `json:"healthy"`
	Weight   uint32 `json:"weight"`
	Eligible bool   `json:"eligible"`
}

// Report is the explanation.
type Report struct {
	Packet  string `json:"packet"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
	Why     string `json:"why"`

	Rule        string `json:"rule,omitempty"`
	RuleDetail  string `json:"rule_detail,omitempty"`
	Service     string `json:"service,omitempty"`
	Affinity    string `json:"affinity,omitempty"`
	Tracking    string `json:"tracking_mode,omitempty"`
	ICMPSteered bool   `json:"icmp_steered,omitempty"`
	Flow        string `json:"flow,omitempty"`

	SelectionKey  string `json:"selection_key,omitempty"`
	SelectionHash string `json:"selection_hash,omitempty"`
	Trackable     bool   `json:"trackable"`
	TrackingKey   string `json:"tracking_key,omitempty"`
	Step1         string `json:"step1,omitempty"`
	Track         string `json:"track,omitempty"`

	Side        string   `json:"side,omitempty"`
	EligibleWhy string   `json:"eligible_why,omitempty"`
	Eligible    []string `json:"eligible,omitempty"`
	Members     []Member `json:"members,omitempty"`

	MaglevSlot *uint32 `json:"maglev_slot,omitempty"`
	MaglevSize int     `json:"maglev_size,omitempty"`
	Backend    string  `json:"backend,omitempty"`
	BackendIP  string  `json:"backend_ip,omitempty"`
	Method     string  `json:"forwarding_method,omitempty"`

	// Draining: the rule is one the reload removed, still draining (M5).
	// TrackedBackend is where a flow tracked before the reload goes: the
	// backend the previous configuration selects for the packet.
	Draining       string `json:"draining,omitempty"`
	TrackedBackend string `json:"tracked_backend,omitempty"`

	// QUIC is what routing by connection ID made of the packet, for a
	// UDP packet of a service with QUIC-LB.
	QUIC *dataplane.CIDReport `json:"quic,omitempty"`
}

// Explain decides req.Packet under cfg with a fresh tracking table (just
// after the reload from req.Previous, when given).
func Explain(cfg *config.Config, req *Request) (*Report, error) {
	snap, d, err := decide(cfg, req.Previous, req, false)
	if err != nil {
		return nil, err
	}
	r := report(snap, &req.Packet, &d)
	if req.QUIC != "" {
		r.Packet += ", " + req.QUIC
	}
	if req.Previous == nil {
		return r, nil
	}
	// What the previous configuration did with the packet: where a flow
	// it tracked goes, or which rule the reload removed without a drain.
	// The assumed state names backends of the new configuration; those
	// the previous one lacks are left out there.
	psnap, pd, err := decide(req.Previous, nil, req, true)
	if err != nil {
		return nil, fmt.Errorf("the previous configuration: %w", err)
	}
	switch {
	case d.Draining:
		if pd.Verdict == dataplane.VerdictForward && pd.Backend != nil {
			r.TrackedBackend = pd.Backend.Name
			r.Why += fmt.Sprintf(" (here %s, as the previous configuration selects it)", pd.Backend.Name)
		}
	case d.Rule == nil && pd.Rule != nil:
		r.Why += fmt.Sprintf("; before the reload, rule %s (%s) took it: the reload removed it", pd.Rule.Name, ruleText(pd.Rule))
		if svc := psnap.Service(pd.Rule.Service); svc != nil && svc.DrainingTimeoutMs == 0 {
			r.Why += fmt.Sprintf(" with no drain (connection_draining_timeout_sec of %s is 0, M5)", svc.Name)
		}
	}
	return r, nil
}

// decide runs the packet through a control plane of cfg (reloaded from
// prev when not nil) in req's assumed state, at time 0, with an empty
// tracking table. lenient skips assumed states of backends cfg lacks.
func decide(cfg, prev *config.Config, req *Request, lenient bool) (*dataplane.Snapshot, dataplane.Decision, error) {
	var d dataplane.Decision
	frame, err := craft.Build(&req.Packet)
	if err != nil {
		return nil, d, err
	}
	ct, err := conntrack.New(1024)
	if err != nil {
		return nil, d, err
	}
	eng := dataplane.NewEngine(ct)
	eng.SetFloodLimits(dataplane.FloodLimitsOf(&cfg.Dataplane))
	first := cfg
	if prev != nil {
		first = prev
	}
	cp, err := controlplane.New(first, eng, controlplane.Options{
		Local: sim.SimLocal(), InitialHealthy: true, InitialWeight: 1000,
	}, 0)
	if err != nil {
		return nil, d, err
	}
	if prev != nil {
		if _, err := cp.Apply(cfg, 0); err != nil {
			return nil, d, fmt.Errorf("reloading from the previous configuration: %w", err)
		}
	}
	skip := func(err error) bool { return lenient && errors.Is(err, controlplane.ErrUnknownBackend) }
	for _, n := range req.Unhealthy {
		if err := cp.SetHealth(n, false, 0); err != nil && !skip(err) {
			return nil, d, err
		}
	}
	for n, w := range req.Weights {
		if err := cp.SetWeight(n, w, controlplane.WeightValid, 0); err != nil && !skip(err) {
			return nil, d, err
		}
	}
	buf := make([]byte, dataplane.Headroom+len(frame)+64)
	copy(buf[dataplane.Headroom:], frame)
	f := dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(frame)}
	d = eng.NewDecider().Decide(&f, 0)
	return cp.Snapshot(), d, nil
}

func describe(p *craft.Packet) string {
	var b strings.Builder
	b.WriteString(p.Proto.String())
	if p.Proto == packet.ProtoTCP || p.Proto == packet.ProtoUDP {
		fmt.Fprintf(&b, " %s -> %s", hostPort(p.Src.String(), p.SrcPort), hostPort(p.Dst.String(), p.DstPort))
	} else {
		fmt.Fprintf(&b, " %s -> %s", p.Src, p.Dst)
	}
	if p.Proto == packet.ProtoTCP {
		flags := p.Flags
		if flags == "" {
			flags = "A"
		}
		fmt.Fprintf(&b, " flags %s", flags)
	}
	if p.Proto == packet.ProtoICMP || p.Proto == packet.ProtoICMPv6 {
		fmt.Fprintf(&b, " type %d code %d", p.ICMPType, p.ICMPCode)
		if p.Inner != nil {
			fmt.Fprintf(&b, " quoting [%s]", describe(p.Inner))
		}
	}
	if p.Frag != craft.FragNone {
		fmt.Fprintf(&b, " fragment %s", [...]string{"none", "first", "middle", "last"}[p.Frag])
	}
	return b.String()
}

func hostPort(h string, port uint16) string {
	if strings.Contains(h, ":") {
		return fmt.Sprintf("[%s]:%d", h, port)
	}
	return fmt.Sprintf("%s:%d", h, port)
}

func keyText(k conntrack.Kind, fl *dataplane.Flow) string {
	src, dst := dataplane.AddrFrom16(fl.Src), dataplane.AddrFrom16(fl.Dst)
	switch k {
	case conntrack.Kind2T:
		return fmt.Sprintf("2T (src %s, dst %s)", src, dst)
	case conntrack.Kind3T:
		return fmt.Sprintf("3T (src %s, dst %s, proto %s)", src, dst, fl.Proto.String())
	}
	return fmt.Sprintf("5T (src %s, sport %d, proto %s, dst %s, dport %d)", src, fl.SrcPort, fl.Proto.String(), dst, fl.DstPort)
}

func ruleText(r *dataplane.Rule) string {
	ports := "all ports"
	if !r.AllPorts {
		var ps []string
		for _, p := range r.Ports {
			if p.First == p.Last {
				ps = append(ps, fmt.Sprint(p.First))
			} else {
				ps = append(ps, fmt.Sprintf("%d-%d", p.First, p.Last))
			}
		}
		ports = "ports " + strings.Join(ps, ",")
	}
	s := fmt.Sprintf("%s %s %s", r.VIP, r.Protocol, ports)
	if len(r.Sources) > 0 {
		var ss []string
		for _, p := range r.Sources {
			ss = append(ss, p.Text)
		}
		s += " from " + strings.Join(ss, ",")
	}
	return s
}

// sourceWhy says why a frame no client could send was dropped (FR8, FR9):
// these drops come before the rule (or, for a backend, right after it).
var sourceWhy = map[dataplane.Reason]string{
	dataplane.ReasonMartianSource:   "FR8: the source is an address no client can have (martian); counted and dropped",
	dataplane.ReasonSourceIsVIP:     "FR8: the source is one of the VIPs; counted and dropped",
	dataplane.ReasonSourceIsSelf:    "FR8: the source is one of the balancer's own addresses; counted and dropped",
	dataplane.ReasonSourceIsBackend: "FR8: the source is a backend of the service the rule selects, which answers clients directly and never sends to its VIP; counted and dropped",
	dataplane.ReasonNotOurMAC:       "FR9: the frame was not sent to the interface's MAC; counted and dropped",
}

func report(snap *dataplane.Snapshot, p *craft.Packet, d *dataplane.Decision) *Report {
	r := &Report{Packet: describe(p), Verdict: d.Verdict.String()}
	if d.Verdict == dataplane.VerdictDrop {
		r.Reason = d.Reason.String()
	}
	if d.Rule == nil {
		switch {
		case d.Verdict == dataplane.VerdictPass:
			r.Why = "FR1: the destination is not a VIP (or the frame is neighbour discovery); the host kernel gets it"
		case d.Reason == dataplane.ReasonMalformed:
			r.Why = "the frame is VIP traffic but does not parse; counted and dropped"
		case d.Reason != dataplane.ReasonNoRule && sourceWhy[d.Reason] != "":
			r.Why = sourceWhy[d.Reason]
		default:
			r.Why = "FR4: no forwarding rule of this VIP matches protocol and port; counted and dropped"
		}
		return r
	}
	r.Rule, r.RuleDetail = d.Rule.Name, ruleText(d.Rule)
	svc := d.Service
	r.Service = svc.Name
	r.Affinity, r.Tracking = svc.Affinity.String(), svc.Mode.String()
	r.Method = svc.Method.String()
	r.ICMPSteered = d.ICMPSteered
	fl := &d.Flow
	r.Flow = fmt.Sprintf("%s, port information: %v", keyText(conntrack.Kind5T, fl), fl.PortInfo)
	if d.Reason == dataplane.ReasonSourceNotAllowed {
		r.Why = "FR6: the source is outside the rule's source_ip_ranges; counted and dropped"
		return r
	}
	if d.Reason == dataplane.ReasonSourceIsBackend {
		r.Why = sourceWhy[d.Reason] // the engine stops before the keys, as for FR6
		return r
	}
	r.SelectionKey = keyText(d.SelKind, fl)
	r.SelectionHash = fmt.Sprintf("%#016x", d.SelHash)
	r.Trackable = d.Trackable
	if d.Trackable {
		r.TrackingKey = keyText(d.TrackKey.Kind, fl)
	}
	r.Track = d.Track.String()
	r.QUIC = d.CID.Report()
	routed := d.CID.Outcome == dataplane.CIDRouted
	records := " (R1 records it)"
	if d.Draining {
		records = ""
	}
	switch {
	case routed:
		r.Step1 = "QUIC-LB: the connection ID names the backend (see quic); no lookup, no entry"
	case !d.Trackable:
		r.Step1 = "CT3: not trackable under T1 (protocol/affinity); straight to selection, no entry"
	case d.ICMPSteered:
		r.Step1 = "X1: ICMP error steered by its quoted flow, reversed; looked up, never recorded"
	case d.Track == dataplane.TrackHit:
		r.Step1 = "CT4: existing entry, still valid"
	case d.Track == dataplane.TrackReplaced:
		r.Step1 = "CT4: entry found invalid (" + d.Invalid + "), replaced"
	case fl.SYN && svc.Mode == config.PerConnection:
		r.Step1 = "CT1: SYN with PER_CONNECTION is always a new connection"
	case fl.SYN && (svc.Affinity == config.AffinityNone || svc.Affinity == config.AffinityClientIPPortProto):
		r.Step1 = "CT2: SYN with PER_SESSION and a 5-tuple affinity is a new connection"
	case fl.SYN:
		r.Step1 = "CT2: SYN with PER_SESSION and " + svc.Affinity.String() + " affinity is looked up like any other packet (CT4); no entry for the tracking key; new connection" + records
	default:
		r.Step1 = "CT4: no entry for the tracking key; new connection" + records
	}
	if d.Draining {
		r.Step1 += "; the rule drains (M5): nothing new starts on it, no entry is recorded"
		r.Draining = fmt.Sprintf("removed by the reload; drains for %v (connection_draining_timeout_sec of %s)",
			time.Duration(d.Rule.DrainUntil)*time.Millisecond, svc.Name)
	}
	if len(svc.Eligible) > 0 {
		// E5: the side is its members' role. An empty set has none (the
		// control plane keeps the previous side for M4, which depends on
		// the order the assumed states were applied in).
		r.Side = svc.Side.String()
	}
	r.EligibleWhy = svc.EligibleWhy
	elig := map[dataplane.BackendRef]bool{}
	for _, ref := range svc.Eligible {
		elig[ref] = true
		if b := snap.Backend(ref); b != nil {
			r.Eligible = append(r.Eligible, b.Name)
		}
	}
	for _, ref := range svc.Members {
		b := snap.Backend(ref)
		if b == nil {
			continue
		}
		r.Members = append(r.Members, Member{Name: b.Name, IP: b.IP.String(), Group: b.Group,
			Failover: b.Failover, Healthy: b.Healthy, Weight: b.Weight, Eligible: elig[ref]})
	}
	if d.Track != dataplane.TrackHit && !d.Draining && !routed && len(svc.Table) > 0 {
		slot := d.TableSlot
		r.MaglevSlot = &slot
		r.MaglevSize = len(svc.Table)
	}
	if d.Backend != nil {
		r.Backend, r.BackendIP = d.Backend.Name, d.Backend.IP.String()
	}
	switch d.Verdict {
	case dataplane.VerdictForward:
		r.Why = fmt.Sprintf("forward to %s via %s", r.Backend, r.Method)
		if routed {
			r.Why += ", by the server ID in the QUIC connection ID"
		}
	case dataplane.VerdictDrop:
		switch d.Reason {
		case dataplane.ReasonNoEligibleBackend:
			r.Why = "S6: the eligible set is empty; counted and dropped"
		case dataplane.ReasonVIPDraining:
			r.Why = "M5: the reload removed this rule, which drains: a new flow, or one without a tracking entry, " +
				"is counted and dropped (vip-draining); a flow tracked before the reload is still forwarded to its backend while that stays valid"
		default:
			r.Why = "dropped: " + d.Reason.String()
		}
	}
	return r
}

// WriteText prints the report for humans.
func (r *Report) WriteText(w io.Writer) {
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "%-14s %s\n", k, v)
		}
	}
	line("packet", r.Packet)
	line("rule", strings.TrimSpace(r.Rule+"  "+r.RuleDetail))
	line("draining", r.Draining)
	if r.Service != "" {
		line("service", fmt.Sprintf("%s (affinity %s, tracking %s, %s)", r.Service, r.Affinity, r.Tracking, r.Method))
	}
	if r.ICMPSteered {
		line("steered by", "the quoted flow, reversed (X1): "+r.Flow)
	}
	line("selection key", r.SelectionKey)
	line("selection hash", r.SelectionHash)
	if r.Service != "" && r.SelectionKey != "" {
		if r.Trackable {
			line("tracking key", r.TrackingKey)
		} else {
			line("tracking key", "none (not trackable, T1)")
		}
	}
	if q := r.QUIC; q != nil {
		line("quic", fmt.Sprintf("%s (%s)", q.Outcome, q.Packet))
		line("  config", q.Config)
		line("  server ID", q.ServerID)
		line("  because", q.Why)
	}
	line("step 1", r.Step1)
	if r.EligibleWhy != "" {
		if len(r.Eligible) == 0 {
			line("eligible set", "empty")
		} else {
			line("eligible set", fmt.Sprintf("%s side: %s", r.Side, strings.Join(r.Eligible, ", ")))
		}
		line("  because", r.EligibleWhy)
		for _, m := range r.Members {
			role := "primary"
			if m.Failover {
				role = "failover"
			}
			health := "healthy"
			if !m.Healthy {
				health = "unhealthy"
			}
			mark := " "
			if m.Eligible {
				mark = "*"
			}
			fmt.Fprintf(w, "  %s %-12s %-16s %-8s %-9s group %s weight %d\n", mark, m.Name, m.IP, role, health, m.Group, m.Weight)
		}
	}
	if r.MaglevSlot != nil {
		line("maglev", fmt.Sprintf("slot %d of %d -> %s", *r.MaglevSlot, r.MaglevSize, r.Backend))
	}
	line("verdict", strings.TrimSpace(r.Verdict+" "+r.Reason))
	if r.TrackedBackend != "" {
		line("tracked flow", "forward to "+r.TrackedBackend+" (a flow tracked before the reload keeps its backend)")
	}
	line("why", r.Why)
}

// WriteJSON prints the report as JSON, with "->" and ">=" as they are
// (not HTML-escaped: nobody embeds this in a page).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
