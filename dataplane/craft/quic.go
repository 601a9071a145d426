package craft

import (
	"encoding/hex"
	"fmt"
)

// QUICType is the kind of QUIC packet a crafted UDP payload is, for the
// tests, sim and explain of routing by connection ID (QUIC-LB).
type QUICType uint8

const (
	// QUICShort: a short-header (1-RTT) packet, the bulk of a connection.
	QUICShort QUICType = iota
	// Long-header packets of QUIC version 1: Initial, 0-RTT, Handshake.
	QUICInitial
	QUIC0RTT
	QUICHandshake
)

var quicTypeNames = [...]string{QUICShort: "short", QUICInitial: "initial", QUIC0RTT: "0-rtt", QUICHandshake: "handshake"}

func (t QUICType) String() string { return quicTypeNames[t] }

// ParseQUICType reads the sim/explain spelling: short, initial, 0-rtt,
// handshake.
func ParseQUICType(s string) (QUICType, error) {
	for t, n := range quicTypeNames {
		if s == n {
			return QUICType(t), nil
		}
	}
	return 0, fmt.Errorf("quic type %q: want short, initial, 0-rtt or handshake", s)
}

// ParseDCID reads a destination connection ID in hex: 1..20 octets, as
// QUIC version 1 allows.
func ParseDCID(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) == 0 || len(b) > 20 {
		return nil, fmt.Errorf("quic connection ID %q: want 1 to 20 octets in hex", s)
	}
	return b, nil
}

// QUICPayload is a UDP payload holding a QUIC packet of type t to dcid,
// with some protected payload after the header. Nothing in it is
// encrypted or authentic: a balancer reads only the header.
func QUICPayload(t QUICType, dcid []byte) []byte {
	if t == QUICShort {
		p := append([]byte{0x40 | 0x01}, dcid...)
		return append(p, make([]byte, 24)...)
	}
	typ := byte(t - QUICInitial) // 0 Initial, 1 0-RTT, 2 Handshake
	p := []byte{0xc0 | typ<<4, 0, 0, 0, 1, byte(len(dcid))}
	p = append(p, dcid...)
	p = append(p, 8, 1, 2, 3, 4, 5, 6, 7, 8) // the source connection ID
	return append(p, make([]byte, 40)...)
}
