package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/dataplane"
	"xlb/dataplane/craft"
)

// Result is one output line.
type Result struct {
	ID      string      `json:"id"`
	T       json.Number `json:"t"`
	Verdict string      `json:"verdict"`
	Backend string      `json:"backend,omitempty"`
	Track   string      `json:"track,omitempty"`
	Side    string      `json:"side,omitempty"`
	Reason  string      `json:"reason,omitempty"`
	// Extra fields (allowed by the format).
	Rule    string `json:"rule,omitempty"`
	Service string `json:"service,omitempty"`
	Invalid string `json:"invalid,omitempty"`
	Steered bool   `json:"icmp_steered,omitempty"`
	// QUIC: what routing by connection ID made of a UDP packet of a
	// service with QUIC-LB.
	QUIC *dataplane.CIDReport `json:"quic,omitempty"`
}

// Machine is a running simulation: a control plane, an engine and one decider
// on a virtual clock.
type Machine struct {
	cp      *controlplane.ControlPlane
	engine  *dataplane.Engine
	decider *dataplane.Decider
	dir     string
	buf     []byte
	// Warn receives non-fatal problems (rejected reloads, unknown backends).
	Warn io.Writer
}

// SimCapacity bounds the conntrack table of a simulation, whatever the
// configuration asks for (scenarios are small; a configured smaller capacity
// is kept, so X3 can be replayed).
const SimCapacity = 1 << 20

// LocalMAC and the encapsulation sources used in simulations.
var (
	SimEncapV4 = netip.MustParseAddr("192.0.2.1")
	SimEncapV6 = netip.MustParseAddr("2001:db8::1")
)

// SimLocal is the balancer's own side of rewritten frames in sim and explain.
func SimLocal() dataplane.Local {
	var l dataplane.Local
	copy(l.MAC[:], craft.LocalMAC)
	l.EncapSrcV4, l.HasSrcV4 = dataplane.Addr16(SimEncapV4), true
	l.EncapSrcV6, l.HasSrcV6 = dataplane.Addr16(SimEncapV6), true
	return l
}

// New starts a simulation of cfg; dir is where reload paths are relative to.
func New(cfg *config.Config, dir string) (*Machine, error) {
	capacity := min(cfg.Dataplane.ConntrackCapacity, SimCapacity)
	ct, err := conntrack.New(capacity)
	if err != nil {
		return nil, err
	}
	eng := dataplane.NewEngine(ct)
	eng.SetFloodLimits(dataplane.FloodLimitsOf(&cfg.Dataplane))
	cp, err := controlplane.New(cfg, eng, controlplane.Options{
		Local:          SimLocal(),
		InitialHealthy: true,
		InitialWeight:  1000,
	}, 0)
	if err != nil {
		return nil, err
	}
	return &Machine{cp: cp, engine: eng, decider: eng.NewDecider(), dir: dir,
		buf: make([]byte, 4096), Warn: io.Discard}, nil
}

// ControlPlane returns the simulation's control plane.
func (m *Machine) ControlPlane() *controlplane.ControlPlane { return m.cp }

// Decider returns the simulation's decider.
func (m *Machine) Decider() *dataplane.Decider { return m.decider }

// Engine returns the simulation's engine (its conntrack table, for tests).
func (m *Machine) Engine() *dataplane.Engine { return m.engine }

// Millis converts scenario seconds to the engine's millisecond clock.
func Millis(t float64) int64 { return int64(math.Round(t * 1000)) }

// Step applies one event; packet events return their result.
func (m *Machine) Step(ev *Event) (*Result, error) {
	now := Millis(ev.T)
	switch {
	case ev.Health != nil:
		if err := m.cp.SetHealth(ev.Health.Backend, ev.Health.Healthy, now); err != nil {
			fmt.Fprintf(m.Warn, "line %d: health: %v (ignored)\n", ev.Line, err)
		}
	case ev.Weight != nil:
		if err := m.cp.SetWeight(ev.Weight.Backend, ev.Weight.Weight, controlplane.WeightValid, now); err != nil {
			fmt.Fprintf(m.Warn, "line %d: weight: %v (ignored)\n", ev.Line, err)
		}
	case ev.Reload != "":
		path := ev.Reload
		if !filepath.IsAbs(path) {
			path = filepath.Join(m.dir, path)
		}
		cfg, err := config.Load(path)
		if err == nil {
			_, err = m.cp.Apply(cfg, now)
		}
		if err != nil {
			// X2: an invalid file is rejected and the running config stays.
			fmt.Fprintf(m.Warn, "line %d: reload %s rejected, running configuration kept:\n%v\n", ev.Line, ev.Reload, err)
		}
	case ev.Packet != nil:
		return m.packet(ev, now)
	}
	return nil, nil
}

func (m *Machine) packet(ev *Event, now int64) (*Result, error) {
	frame := ev.Packet.Frame
	need := dataplane.Headroom + len(frame) + 64
	if len(m.buf) < need {
		m.buf = make([]byte, need)
	}
	copy(m.buf[dataplane.Headroom:], frame)
	f := dataplane.Frame{Buf: m.buf[:need], Off: dataplane.Headroom, Len: len(frame)}
	d := m.decider.Decide(&f, now)
	r := &Result{ID: ev.Packet.ID, T: json.Number(ev.TText), Verdict: d.Verdict.String()}
	if d.Rule != nil {
		r.Rule = d.Rule.Name
	}
	if d.Service != nil {
		r.Service = d.Service.Name
	}
	r.QUIC = d.CID.Report()
	switch d.Verdict {
	case dataplane.VerdictForward:
		r.Backend = d.Backend.Name
		r.Track = d.Track.String()
		r.Side = d.Side.String()
		r.Invalid = d.Invalid
		r.Steered = d.ICMPSteered
	case dataplane.VerdictDrop:
		r.Reason = d.Reason.String()
	}
	return r, nil
}

// Run replays the scenario file against the config file, calling emit for
// each packet event's result in order; warnings go to warn. It returns the
// machine in its final state.
func Run(cfgPath, scenarioPath string, emit func(*Result) error, warn io.Writer) (*Machine, error) {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(scenarioPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	events, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", scenarioPath, err)
	}
	m, err := New(cfg, filepath.Dir(scenarioPath))
	if err != nil {
		return nil, err
	}
	m.Warn = warn
	for i := range events {
		r, err := m.Step(&events[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", scenarioPath, err)
		}
		if r != nil {
			if err := emit(r); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// JSONLines returns an emit function writing one JSON line per result.
func JSONLines(w io.Writer) func(*Result) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // "->" and ">=" as they are
	return func(r *Result) error { return enc.Encode(r) }
}

// Summary tallies results for humans (make demo): verdicts, and per backend
// the new connections it was given, its share, and the weight it reports now.
func Summary(results []*Result, snap *dataplane.Snapshot) string {
	var b strings.Builder
	verdicts := map[string]int{}
	newConns := map[string]int{}
	packets := map[string]int{}
	totalNew := 0
	quic := map[string]int{}
	for _, r := range results {
		verdicts[r.Verdict]++
		if r.QUIC != nil {
			quic[r.QUIC.Outcome]++
		}
		if r.Verdict != "forward" {
			continue
		}
		packets[r.Backend]++
		if r.Track == "new" || r.Track == "replaced" {
			newConns[r.Backend]++
			totalNew++
		}
	}
	fmt.Fprintf(&b, "%d packets: %d forwarded, %d dropped, %d passed to the host\n",
		len(results), verdicts["forward"], verdicts["drop"], verdicts["pass"])
	fmt.Fprintf(&b, "%-10s %-18s %-9s %-8s %8s %8s %7s\n", "backend", "address", "role", "health", "weight", "packets", "new")
	for _, bk := range snap.Backends {
		if bk == nil {
			continue
		}
		role, health := "primary", "healthy"
		if bk.Failover {
			role = "failover"
		}
		if !bk.Healthy {
			health = "down"
		}
		share := 0.0
		if totalNew > 0 {
			share = 100 * float64(newConns[bk.Name]) / float64(totalNew)
		}
		fmt.Fprintf(&b, "%-10s %-18s %-9s %-8s %8d %8d %7d (%4.1f%% of new connections)\n",
			bk.Name, bk.IP, role, health, bk.ReportedWeight, packets[bk.Name], newConns[bk.Name], share)
	}
	if len(quic) > 0 {
		fmt.Fprintf(&b, "QUIC-LB: %d routed by connection ID", quic["routed"])
		delete(quic, "routed")
		reasons := slices.Sorted(maps.Keys(quic))
		for i, k := range reasons {
			sep := ", "
			if i == 0 {
				sep = "; the usual path for "
			}
			fmt.Fprintf(&b, "%s%d %s", sep, quic[k], k)
		}
		b.WriteString("\n")
	}
	return b.String()
}
