package explain

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// Args are a packet and an assumed state as an operator words them (the
// flags of `xlb explain`), before they are checked.
type Args struct {
	Src, Dst, Proto string
	Sport, Dport    uint
	// SportSet, DportSet: the port was given. TCP and UDP need both
	// (but for a middle or last fragment, which carries none): port 0 is
	// a port, and a default would answer a question nobody asked.
	SportSet, DportSet bool
	// Flags: TCP flags, any of S A F R P ("": A). Frag: none, first,
	// middle or last.
	Flags, Frag string
	// ICMPType < 0: echo, or an error when InnerProto is given.
	// ICMPCodeSet: ICMPCode was given.
	ICMPType    int
	ICMPCode    uint
	ICMPCodeSet bool
	// InnerProto, InnerSport and InnerDport describe the packet an ICMP
	// error quotes; InnerPortsSet: a port was given.
	InnerProto    string
	InnerSport    uint
	InnerDport    uint
	InnerPortsSet bool
	// QUICDCID, when set, makes a UDP packet's payload a QUIC packet to
	// that destination connection ID (hex), of type QUICType: short (the
	// default), initial, 0-rtt or handshake. QUICTypeSet: it was given.
	QUICDCID, QUICType string
	QUICTypeSet        bool
	Unhealthy, Weights string // comma-separated names; name=weight pairs
}

// ArgError is an Args that describes no packet or state: the caller's
// wording, not the configuration's.
type ArgError struct{ msg string }

func (e *ArgError) Error() string { return e.msg }

func argErr(format string, a ...any) error { return &ArgError{fmt.Sprintf(format, a...)} }

// Request checks the arguments and turns them into a Request; every error
// is an *ArgError.
func (a *Args) Request() (*Request, error) {
	var req Request
	p := &req.Packet
	var err error
	if p.Src, err = netip.ParseAddr(a.Src); err != nil {
		return nil, argErr("--src: %v", err)
	}
	if p.Dst, err = netip.ParseAddr(a.Dst); err != nil {
		return nil, argErr("--dst: %v", err)
	}
	p.Src, p.Dst = p.Src.Unmap(), p.Dst.Unmap() // as xlb sim reads addresses
	if p.Proto, err = packet.ParseProto(a.Proto); err != nil {
		return nil, argErr("--%v", err)
	}
	if a.Sport > 65535 || a.Dport > 65535 {
		return nil, argErr("ports are 0..65535")
	}
	if strings.Trim(strings.ToUpper(a.Flags), "SAFRP") != "" {
		return nil, argErr("--flags %q: want any of S A F R P", a.Flags)
	}
	p.SrcPort, p.DstPort, p.Flags = uint16(a.Sport), uint16(a.Dport), strings.ToUpper(a.Flags)
	if p.Frag, err = craft.ParseFrag(a.Frag); err != nil {
		return nil, argErr("--%v", err)
	}
	if ported := p.Proto == packet.ProtoTCP || p.Proto == packet.ProtoUDP; ported &&
		(p.Frag == craft.FragNone || p.Frag == craft.FragFirst) && (!a.SportSet || !a.DportSet) {
		return nil, argErr("--proto %s needs --sport and --dport", strings.ToLower(p.Proto.String()))
	}
	if a.InnerPortsSet && a.InnerProto == "" {
		return nil, argErr("--inner-sport and --inner-dport need --inner-proto")
	}
	icmp := p.Proto == packet.ProtoICMP || p.Proto == packet.ProtoICMPv6
	if a.InnerProto != "" && !icmp {
		return nil, argErr("--inner-proto describes the quote of an ICMP error: it needs --proto icmp or icmpv6")
	}
	if a.InnerSport > 65535 || a.InnerDport > 65535 || a.ICMPType > 255 || a.ICMPCode > 255 {
		return nil, argErr("ports are 0..65535, ICMP type and code 0..255")
	}
	if icmp {
		if err := a.icmp(p); err != nil {
			return nil, err
		}
	}
	if err := a.quic(&req); err != nil {
		return nil, err
	}
	// A description that does not make a frame (icmp over IPv6, mixed
	// families...) is the caller's wording too.
	if _, err := craft.Build(p); err != nil {
		return nil, argErr("%v", err)
	}
	if a.Unhealthy != "" {
		for _, n := range strings.Split(a.Unhealthy, ",") {
			req.Unhealthy = append(req.Unhealthy, strings.TrimSpace(n))
		}
	}
	if a.Weights != "" {
		req.Weights = map[string]uint32{}
		for _, kv := range strings.Split(a.Weights, ",") {
			k, v, ok := strings.Cut(kv, "=")
			w, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if !ok || err != nil || w > 1000 {
				return nil, argErr("--weights %q: want name=0..1000", kv)
			}
			req.Weights[strings.TrimSpace(k)] = uint32(w)
		}
	}
	return &req, nil
}

// quic makes a UDP packet's payload the QUIC packet --quic-dcid and
// --quic-type describe.
func (a *Args) quic(req *Request) error {
	p := &req.Packet
	if a.QUICDCID == "" {
		if a.QUICTypeSet {
			return argErr("--quic-type needs --quic-dcid")
		}
		return nil
	}
	if p.Proto != packet.ProtoUDP {
		return argErr("--quic-dcid describes a QUIC packet: it needs --proto udp")
	}
	dcid, err := craft.ParseDCID(a.QUICDCID)
	if err != nil {
		return argErr("--%v", err)
	}
	t := craft.QUICShort
	if a.QUICType != "" {
		if t, err = craft.ParseQUICType(a.QUICType); err != nil {
			return argErr("--%v", err)
		}
	}
	p.Payload = craft.QUICPayload(t, dcid)
	req.QUIC = fmt.Sprintf("QUIC %s packet to connection ID %x", t, dcid)
	return nil
}

// icmp sets an ICMP packet's type and code, and the quote of an error.
func (a *Args) icmp(p *craft.Packet) error {
	if a.InnerProto != "" {
		ip, err := packet.ParseProto(a.InnerProto)
		if err != nil {
			return argErr("--inner-%v", err)
		}
		// The quote is the packet the backend sent to the client: from the
		// VIP, to the source of the error.
		p.Inner = &craft.Packet{Src: p.Dst, Dst: p.Src, Proto: ip, SrcPort: uint16(a.InnerSport), DstPort: uint16(a.InnerDport)}
		p.ICMPType, p.ICMPCode = 3, 4
		if p.Proto == packet.ProtoICMPv6 {
			p.ICMPType, p.ICMPCode = 2, 0
		}
	} else if p.Proto == packet.ProtoICMP {
		p.ICMPType = 8
	} else {
		p.ICMPType = 128
	}
	if a.ICMPType >= 0 {
		p.ICMPType, p.ICMPCode = uint8(a.ICMPType), uint8(a.ICMPCode)
	}
	if a.ICMPCodeSet {
		p.ICMPCode = uint8(a.ICMPCode)
	}
	return nil
}
