// Package cptest is a test rig for the rules: the real control plane and
// engine on a virtual clock, fed with real frames built by gopacket (craft),
// returning the full decision and the rewritten frame. Tests of every SPEC
// rule use it; it is not used by the product.
package cptest

import (
	"net/netip"
	"testing"

	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/sim"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// Config parses a TOML text or fails the test.
func Config(tb testing.TB, text string) *config.Config {
	tb.Helper()
	cfg, err := config.Parse("test.toml", []byte(text))
	if err != nil {
		tb.Fatalf("config: %v", err)
	}
	return cfg
}

// Rig runs one control plane and one decider (D); Now is the virtual clock
// (ms).
type Rig struct {
	TB  testing.TB
	M   *sim.Machine
	CP  *controlplane.ControlPlane
	D   *dataplane.Decider
	Now int64
}

// New starts a rig on a configuration text. Backends start healthy with
// weight 1000, as in `xlb sim`.
func New(tb testing.TB, text string) *Rig {
	tb.Helper()
	m, err := sim.New(Config(tb, text), tb.TempDir())
	if err != nil {
		tb.Fatalf("sim: %v", err)
	}
	return &Rig{TB: tb, M: m, CP: m.ControlPlane(), D: m.Decider()}
}

// At sets the clock in seconds and returns the rig.
func (r *Rig) At(sec float64) *Rig {
	r.Now = sim.Millis(sec)
	return r
}

// Result is one decided frame.
type Result struct {
	dataplane.Decision
	// In is the frame sent; Out the frame after rewrite (forward only),
	// or the ICMP error sent in its place (TooBigSent).
	In, Out []byte
}

// BackendName is the chosen backend's name, or "" when none.
func (res *Result) BackendName() string {
	if res.Backend == nil {
		return ""
	}
	return res.Backend.Name
}

// Send builds p into a frame and decides it at the rig's clock.
func (r *Rig) Send(p craft.Packet) *Result {
	r.TB.Helper()
	frame, err := craft.Build(&p)
	if err != nil {
		r.TB.Fatalf("craft: %v", err)
	}
	return r.SendFrame(frame)
}

// SendFrame decides raw frame bytes at the rig's clock.
func (r *Rig) SendFrame(frame []byte) *Result {
	buf := make([]byte, dataplane.Headroom+len(frame)+dataplane.Headroom)
	copy(buf[dataplane.Headroom:], frame)
	f := dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(frame)}
	d := r.D.Decide(&f, r.Now)
	res := &Result{Decision: d, In: frame}
	if d.Verdict == dataplane.VerdictForward || d.TooBigSent {
		res.Out = append([]byte(nil), f.Data()...)
	}
	return res
}

// Conntrack is the engine's tracking table (to count or look up entries).
func (r *Rig) Conntrack() *conntrack.Table { return r.M.Engine().Conntrack() }

// Health sets a backend's health now.
func (r *Rig) Health(name string, healthy bool) {
	r.TB.Helper()
	if err := r.CP.SetHealth(name, healthy, r.Now); err != nil {
		r.TB.Fatal(err)
	}
}

// Weight records a valid weight report now.
func (r *Rig) Weight(name string, w uint32) {
	r.TB.Helper()
	if err := r.CP.SetWeight(name, w, controlplane.WeightValid, r.Now); err != nil {
		r.TB.Fatal(err)
	}
}

// Reload applies a new configuration text now, as SIGHUP would.
func (r *Rig) Reload(text string) controlplane.Diff {
	r.TB.Helper()
	d, err := r.CP.Apply(Config(r.TB, text), r.Now)
	if err != nil {
		r.TB.Fatal(err)
	}
	return d
}

// TCP describes a TCP packet; flags as in sim ("S", "A", "SA"...).
func TCP(src, dst string, sport, dport uint16, flags string) craft.Packet {
	return craft.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: packet.ProtoTCP,
		SrcPort: sport, DstPort: dport, Flags: flags}
}

// UDP describes a UDP packet.
func UDP(src, dst string, sport, dport uint16) craft.Packet {
	return craft.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: packet.ProtoUDP,
		SrcPort: sport, DstPort: dport}
}

// Proto describes a packet of a protocol without ports (esp, gre, icmp...).
func Proto(src, dst string, proto packet.Proto) craft.Packet {
	p := craft.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: proto}
	switch proto {
	case packet.ProtoICMP:
		p.ICMPType = 8
	case packet.ProtoICMPv6:
		p.ICMPType = 128
	}
	return p
}
