package packet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzParse: Parse never panics, returns only its sentinels, and on success
// describes offsets inside the frame; every successfully parsed packet can be
// encapsulated, and the result parses again with the inner bytes intact.
func FuzzParse(f *testing.F) {
	for _, r := range parseRows(f) {
		f.Add(r.frame)
	}
	for _, r := range malformedRows(f) {
		f.Add(r.frame)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		var p Parsed
		err := Parse(frame, &p)
		if err != nil {
			if !errors.Is(err, ErrNotIP) && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("unexpected error %v", err)
			}
			if errors.Is(err, ErrNotIP) && p.IPVersion != 0 {
				t.Fatalf("ErrNotIP with IPVersion %d", p.IPVersion)
			}
			return
		}
		checkInvariants(t, frame, &p)
		for _, e := range []Encap{encap(false, false), encap(true, false), encap(false, true), encap(true, true)} {
			checkEncapRoundTrip(t, frame, &p, &e)
		}
		checkTooBig(t, frame, &p)
	})
}

// checkTooBig: the ICMP error TooBig makes of any parsed IP frame parses
// as an ICMP error from p's destination to its source, no longer than the
// bounds (576 / 1280 bytes of IP).
func checkTooBig(t *testing.T, frame []byte, p *Parsed) {
	t.Helper()
	buf := make([]byte, TooBigHeadroom+len(frame))
	copy(buf[TooBigHeadroom:], frame)
	off, n, err := TooBig(buf, TooBigHeadroom, p, [6]byte{2}, 1400, 1)
	if err != nil {
		t.Fatalf("TooBig on a parsed frame: %v", err)
	}
	var q Parsed
	if err := Parse(buf[off:off+n], &q); err != nil {
		t.Fatalf("the error does not parse: %v", err)
	}
	limit := 576
	if p.IPVersion == 6 {
		limit = 1280
	}
	if !q.IsICMPError() || q.Src != p.Dst || q.Dst != p.Src || q.IPLen > limit || q.IPVersion != p.IPVersion {
		t.Fatalf("error %+v for %+v", q, p)
	}
}

// FuzzTooBig: TooBig with any buffer and any claimed layout either fails
// or writes within the buffer.
func FuzzTooBig(f *testing.F) {
	for _, r := range parseRows(f) {
		var p Parsed
		if Parse(r.frame, &p) == nil {
			f.Add(append(make([]byte, 48), r.frame...), 48, p.L3Off, p.IPLen, p.IPVersion)
		}
	}
	f.Add([]byte{}, 0, 14, 1, uint8(4))
	f.Fuzz(func(t *testing.T, buf []byte, off, l3, ipLen int, version uint8) {
		p := Parsed{L3Off: l3, IPLen: ipLen, IPVersion: version}
		newOff, newLen, err := TooBig(buf, off, &p, [6]byte{2}, 1400, 1)
		if err != nil {
			return
		}
		if newOff < 0 || newOff+newLen > len(buf) || newLen > l3+TooBigHeadroom+ipLen {
			t.Fatalf("frame [%d:+%d] in %d bytes", newOff, newLen, len(buf))
		}
	})
}

func checkInvariants(t *testing.T, frame []byte, p *Parsed) {
	t.Helper()
	end := p.L3Off + p.IPLen
	minHdr := IPv4MinLen
	if p.IPVersion == 6 {
		minHdr = IPv6FixedLen
	}
	switch {
	case p.IPVersion != 4 && p.IPVersion != 6:
		t.Fatalf("IPVersion %d", p.IPVersion)
	case !p.DstValid:
		t.Fatal("parsed without DstValid")
	case p.L3Off < EthernetLen || (p.L3Off-EthernetLen)%VLANTagLen != 0 || p.HasVLAN != (p.L3Off > EthernetLen):
		t.Fatalf("L3Off %d HasVLAN %v", p.L3Off, p.HasVLAN)
	case end > len(frame) || p.IPLen < minHdr:
		t.Fatalf("IP packet [%d:%d] in a %d-byte frame", p.L3Off, end, len(frame))
	case p.IHL != p.L4Off-p.L3Off || p.IHL < minHdr || p.L4Off > end:
		t.Fatalf("IHL %d L4Off %d end %d", p.IHL, p.L4Off, end)
	case p.Frag > FragLater:
		t.Fatalf("Frag %d", p.Frag)
	}
	if p.HasPorts {
		need := UDPLen
		if p.Proto == ProtoTCP {
			need = TCPMinLen
		} else if p.Proto != ProtoUDP {
			t.Fatalf("ports on protocol %d", p.Proto)
		}
		if p.Frag == FragLater || p.L4Off+need > end {
			t.Fatalf("ports on frag %v, L4Off %d, end %d", p.Frag, p.L4Off, end)
		}
		if sp := binary.BigEndian.Uint16(frame[p.L4Off:]); sp != p.SrcPort {
			t.Fatalf("SrcPort %d, frame says %d", p.SrcPort, sp)
		}
	} else if p.Frag != FragLater && (p.Proto == ProtoTCP || p.Proto == ProtoUDP) {
		t.Fatal("TCP/UDP parsed without ports")
	}
	if p.HasInner && (p.Frag == FragLater || !p.IsICMPError()) {
		t.Fatal("inner flow outside an ICMP error")
	}
	if !p.HasInner && p.Inner != (Inner{}) {
		t.Fatal("Inner set without HasInner")
	}
	var dst []byte
	if p.IsV4() {
		dst = frame[p.L3Off+16 : p.L3Off+20]
		if !Is4(p.Dst) {
			t.Fatal("IPv4 Dst not mapped")
		}
	} else {
		dst = frame[p.L3Off+24 : p.L3Off+40]
	}
	if !bytes.HasSuffix(p.Dst[:], dst) {
		t.Fatalf("Dst %x, frame says %x", p.Dst, dst)
	}
}

func checkEncapRoundTrip(t *testing.T, frame []byte, p *Parsed, e *Encap) {
	t.Helper()
	const room = 64
	buf := make([]byte, room+len(frame))
	copy(buf[room:], frame)
	inner := append([]byte(nil), frame[p.L3Off:p.L3Off+p.IPLen]...)
	off, n, err := Encapsulate(buf, room, p, e, 1<<20)
	if err != nil {
		t.Fatalf("Encapsulate(%+v): %v", *e, err)
	}
	out := buf[off : off+n]
	if !bytes.Equal(out[n-len(inner):], inner) {
		t.Fatal("inner packet changed")
	}
	var q Parsed
	if err := Parse(out, &q); err != nil {
		t.Fatalf("Parse(encapsulated): %v", err)
	}
	if q.L3Off != p.L3Off || q.Dst != e.OuterDst || q.IPLen != n-p.L3Off || q.L4Off != p.L3Off+e.Overhead()-boolInt(e.GUE)*(UDPLen+GUEHeaderLen) {
		t.Fatalf("encapsulated frame parses as %+v", q)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// FuzzEncapsulate: whatever Parsed it is handed, Encapsulate stays inside
// buf and within maxLen, or fails.
func FuzzEncapsulate(f *testing.F) {
	for _, r := range encapRows(f) {
		var p Parsed
		_ = Parse(r.frame, &p)
		f.Add(append(make([]byte, 64), r.frame...), 64, p.L3Off, p.IPLen, p.IPVersion, r.encap.OuterV6, r.encap.GUE, 9000)
	}
	f.Add([]byte{}, 0, 14, 1, uint8(4), false, false, 100)
	f.Fuzz(func(t *testing.T, buf []byte, off, l3, ipLen int, version uint8, v6, gue bool, maxLen int) {
		p := Parsed{L3Off: l3, IPLen: ipLen, IPVersion: version}
		e := encap(v6, gue)
		newOff, newLen, err := Encapsulate(buf, off, &p, &e, maxLen)
		if err != nil {
			return
		}
		if newOff < 0 || newLen > maxLen || newOff+newLen > len(buf) || newOff+newLen != off+l3+ipLen {
			t.Fatalf("frame [%d:+%d] in %d bytes, maxLen %d", newOff, newLen, len(buf), maxLen)
		}
	})
}
