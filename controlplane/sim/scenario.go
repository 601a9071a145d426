// Package sim replays `xlb sim` scenarios (docs/sim-format.md) through the
// real engine: each packet event becomes a real frame that the real parser,
// rule lookup, conntrack, eligible-set and Maglev code decide on a virtual
// clock; a reload event loads and validates its file (config.Load) and
// applies it to the control plane (ControlPlane.Apply: kept backends keep
// their flows, removed ones drain), the steps of a SIGHUP that decide
// traffic; the data plane's settings, which only a restart changes, are
// not compared.
package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// Event is one line of a scenario.
type Event struct {
	Line int
	T    float64
	// TText is t as written, echoed in the output.
	TText string

	Health *HealthEvent
	Weight *WeightEvent
	Reload string
	Packet *PacketEvent
}

// HealthEvent sets a backend healthy or unhealthy at once.
type HealthEvent struct {
	Backend string
	Healthy bool
}

// WeightEvent sets a backend's reported weight.
type WeightEvent struct {
	Backend string
	Weight  uint32
}

// PacketEvent is a packet to decide.
type PacketEvent struct {
	ID     string
	Packet craft.Packet
	// Frame is the frame built from Packet when the scenario was read.
	Frame []byte
}

// The raw JSON shapes; DisallowUnknownFields makes any other field an error.
type rawEvent struct {
	T      *json.Number `json:"t"`
	Health *rawHealth   `json:"health"`
	Weight *rawWeight   `json:"weight"`
	Reload *string      `json:"reload"`
	Packet *rawPacket   `json:"packet"`
}

type rawHealth struct {
	Backend *string `json:"backend"`
	Healthy *bool   `json:"healthy"`
}

type rawWeight struct {
	Backend *string `json:"backend"`
	Weight  *int64  `json:"weight"`
}

type rawPacket struct {
	ID       json.RawMessage `json:"id"`
	Src      string          `json:"src"`
	Dst      string          `json:"dst"`
	Proto    json.RawMessage `json:"proto"`
	Sport    *int64          `json:"sport"`
	Dport    *int64          `json:"dport"`
	Flags    *string         `json:"flags"`
	Frag     *string         `json:"frag"`
	ICMPType *int64          `json:"icmp_type"`
	ICMPCode *int64          `json:"icmp_code"`
	Inner    *rawPacket      `json:"inner"`
	VLAN     *int64          `json:"vlan"`
	QUICDCID *string         `json:"quic_dcid"`
	QUICType *string         `json:"quic_type"`
}

// Parse reads a whole scenario. Any error names the line.
func Parse(r io.Reader) ([]Event, error) {
	var out []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	line := 0
	last := -1.0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		ev, err := parseLine(text)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if ev.T < last {
			return nil, fmt.Errorf("line %d: t %s is before the previous event's t", line, ev.TText)
		}
		last = ev.T
		ev.Line = line
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	return out, nil
}

func parseLine(text string) (Event, error) {
	var ev Event
	var raw rawEvent
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return ev, err
	}
	if dec.More() {
		return ev, fmt.Errorf("more than one JSON value on the line")
	}
	if raw.T == nil {
		return ev, fmt.Errorf("missing field \"t\"")
	}
	t, err := raw.T.Float64()
	if err != nil || t < 0 {
		return ev, fmt.Errorf("t %s: want a non-negative number of seconds", raw.T)
	}
	ev.T, ev.TText = t, raw.T.String()

	kinds := 0
	if raw.Health != nil {
		kinds++
		if raw.Health.Backend == nil || raw.Health.Healthy == nil {
			return ev, fmt.Errorf("health: needs \"backend\" and \"healthy\"")
		}
		ev.Health = &HealthEvent{Backend: *raw.Health.Backend, Healthy: *raw.Health.Healthy}
	}
	if raw.Weight != nil {
		kinds++
		if raw.Weight.Backend == nil || raw.Weight.Weight == nil {
			return ev, fmt.Errorf("weight: needs \"backend\" and \"weight\"")
		}
		if *raw.Weight.Weight < 0 || *raw.Weight.Weight > 1000 {
			return ev, fmt.Errorf("weight: %d is outside 0..1000", *raw.Weight.Weight)
		}
		ev.Weight = &WeightEvent{Backend: *raw.Weight.Backend, Weight: uint32(*raw.Weight.Weight)}
	}
	if raw.Reload != nil {
		kinds++
		if *raw.Reload == "" {
			return ev, fmt.Errorf("reload: needs a file name")
		}
		ev.Reload = *raw.Reload
	}
	if raw.Packet != nil {
		kinds++
		p, err := convertPacket(raw.Packet, false)
		if err != nil {
			return ev, fmt.Errorf("packet: %w", err)
		}
		if p.Frame, err = craft.Build(&p.Packet); err != nil {
			return ev, fmt.Errorf("packet: %w", err)
		}
		ev.Packet = p
	}
	if kinds != 1 {
		return ev, fmt.Errorf("want exactly one of \"health\", \"weight\", \"reload\", \"packet\" (found %d)", kinds)
	}
	return ev, nil
}

func convertPacket(r *rawPacket, inner bool) (*PacketEvent, error) {
	pe := &PacketEvent{}
	if len(r.ID) > 0 {
		var s string
		if err := json.Unmarshal(r.ID, &s); err == nil {
			pe.ID = s
		} else {
			pe.ID = string(r.ID) // a number is echoed as its text
		}
	}
	p := &pe.Packet
	var err error
	if p.Src, err = netip.ParseAddr(r.Src); err != nil {
		return nil, fmt.Errorf("src %q: not an IP address", r.Src)
	}
	if p.Dst, err = netip.ParseAddr(r.Dst); err != nil {
		return nil, fmt.Errorf("dst %q: not an IP address", r.Dst)
	}
	p.Src, p.Dst = p.Src.Unmap(), p.Dst.Unmap()
	if len(r.Proto) == 0 {
		return nil, fmt.Errorf("missing field \"proto\"")
	}
	var ps string
	if err := json.Unmarshal(r.Proto, &ps); err != nil {
		ps = string(r.Proto) // a protocol number
	}
	if p.Proto, err = packet.ParseProto(ps); err != nil {
		return nil, err
	}
	port := func(name string, v *int64) (uint16, error) {
		if v == nil {
			// A later fragment's ports are not on the wire; 0 is fine.
			return 0, nil
		}
		if *v < 0 || *v > 65535 {
			return 0, fmt.Errorf("%s %d is outside 0..65535", name, *v)
		}
		return uint16(*v), nil
	}
	if p.SrcPort, err = port("sport", r.Sport); err != nil {
		return nil, err
	}
	if p.DstPort, err = port("dport", r.Dport); err != nil {
		return nil, err
	}
	if r.Flags != nil && p.Proto == packet.ProtoTCP { // ignored for other protocols
		for _, c := range *r.Flags {
			if !strings.ContainsRune("SAFRPsafrp", c) {
				return nil, fmt.Errorf("flags %q: want any of S A F R P", *r.Flags)
			}
		}
		p.Flags = strings.ToUpper(*r.Flags)
	}
	if r.Frag != nil {
		if p.Frag, err = craft.ParseFrag(*r.Frag); err != nil {
			return nil, err
		}
		if inner && p.Frag != craft.FragNone {
			return nil, fmt.Errorf("inner: a quoted packet is not a fragment")
		}
	}
	small := func(name string, v *int64) (uint8, error) {
		if v == nil {
			return 0, nil
		}
		if *v < 0 || *v > 255 {
			return 0, fmt.Errorf("%s %d is outside 0..255", name, *v)
		}
		return uint8(*v), nil
	}
	if p.ICMPType, err = small("icmp_type", r.ICMPType); err != nil {
		return nil, err
	}
	if p.ICMPCode, err = small("icmp_code", r.ICMPCode); err != nil {
		return nil, err
	}
	if r.ICMPType == nil && (p.Proto == packet.ProtoICMP || p.Proto == packet.ProtoICMPv6) {
		// Default: echo request, or the usual error when a quote is given.
		switch {
		case r.Inner != nil && p.Proto == packet.ProtoICMP:
			p.ICMPType, p.ICMPCode = 3, 4 // fragmentation needed
		case r.Inner != nil:
			p.ICMPType = 2 // packet too big
		case p.Proto == packet.ProtoICMP:
			p.ICMPType = 8
		default:
			p.ICMPType = 128
		}
	}
	if r.VLAN != nil {
		if *r.VLAN < 1 || *r.VLAN > 4094 {
			return nil, fmt.Errorf("vlan %d is outside 1..4094", *r.VLAN)
		}
		p.VLAN = uint16(*r.VLAN)
	}
	if err := convertQUIC(r, p); err != nil {
		return nil, err
	}
	if r.Inner != nil {
		if inner {
			return nil, fmt.Errorf("inner: nested quotes are not supported")
		}
		if p.Proto != packet.ProtoICMP && p.Proto != packet.ProtoICMPv6 {
			return nil, fmt.Errorf("inner is for icmp and icmpv6 errors only")
		}
		in, err := convertPacket(r.Inner, true)
		if err != nil {
			return nil, fmt.Errorf("inner: %w", err)
		}
		if in.Packet.Dst.Is4() != p.Dst.Is4() {
			return nil, fmt.Errorf("inner: address family differs from the packet's")
		}
		p.Inner = &in.Packet
	}
	return pe, nil
}

// convertQUIC makes a UDP packet's payload the QUIC packet quic_dcid and
// quic_type describe.
func convertQUIC(r *rawPacket, p *craft.Packet) error {
	if r.QUICDCID == nil {
		if r.QUICType != nil {
			return fmt.Errorf("quic_type needs quic_dcid")
		}
		return nil
	}
	if p.Proto != packet.ProtoUDP || p.Frag != craft.FragNone {
		return fmt.Errorf("quic_dcid describes a QUIC packet: it needs proto udp, not a fragment")
	}
	dcid, err := craft.ParseDCID(*r.QUICDCID)
	if err != nil {
		return err
	}
	t := craft.QUICShort
	if r.QUICType != nil {
		if t, err = craft.ParseQUICType(*r.QUICType); err != nil {
			return err
		}
	}
	p.Payload = craft.QUICPayload(t, dcid)
	return nil
}
