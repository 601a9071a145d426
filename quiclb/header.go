package quiclb

import "encoding/binary"

// Kind is what a UDP payload is, as far as routing by connection ID goes.
type Kind uint8

const (
	// NotQUIC: too short, or the QUIC fixed bit is clear.
	NotQUIC Kind = iota
	// Short: a short-header packet; its destination connection ID is one
	// the server issued.
	Short
	// ServerChosen: a long-header Handshake packet, whose destination
	// connection ID the server chose.
	ServerChosen
	// ClientChosen: an Initial or 0-RTT packet, whose destination
	// connection ID the client made up, a Retry, or a version this package
	// does not know: the balancer's usual path decides.
	ClientChosen
)

var kindNames = [...]string{NotQUIC: "not QUIC", Short: "short header", ServerChosen: "handshake", ClientChosen: "client-chosen ID"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// QUIC versions whose long-header packet types this package knows (RFC
// 9000, RFC 9369): their Handshake types differ.
const (
	version1 = 0x00000001
	version2 = 0x6b3343cf
)

// DCID finds the destination connection ID of the QUIC packet in a UDP
// payload. A short header does not carry the ID's length: dcid is then
// the rest of the packet after the first octet, of which the decoder reads
// what its configuration needs. A long header carries it (at most 20
// octets). Only Short and ServerChosen packets are to be routed by ID.
func DCID(payload []byte) (dcid []byte, k Kind) {
	if len(payload) < 2 || payload[0]&0x40 == 0 {
		return nil, NotQUIC
	}
	if payload[0]&0x80 == 0 {
		return payload[1:], Short
	}
	// Long header: first octet, version (4), DCID length (1), DCID.
	if len(payload) < 6 {
		return nil, NotQUIC
	}
	n := int(payload[5])
	if n > 1+MaxBlockLen || len(payload) < 6+n {
		return nil, NotQUIC
	}
	dcid = payload[6 : 6+n]
	typ := payload[0] >> 4 & 0x3
	switch binary.BigEndian.Uint32(payload[1:5]) {
	case version1:
		if typ == 2 {
			return dcid, ServerChosen
		}
	case version2:
		if typ == 3 {
			return dcid, ServerChosen
		}
	}
	return dcid, ClientChosen
}
