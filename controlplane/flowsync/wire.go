package flowsync

import (
	"crypto/cipher"
	"encoding/binary"
	"math"
	"net/netip"
	"time"
	"xlb/controlplane"

	"xlb/conntrack"
)

// The wire format, version 1. It is an interface between instances that
// may run different versions of xlb: change it only with a new version.
// Every integer is big endian.
//
// A message (a UDP datagram, or one frame of a TCP pull) is a header in
// the clear, authenticated as AES-256-GCM associated data, then the sealed
// body and its 16-byte tag:
//
//	offset size field
//	     0    4 magic "XLBF"
//	     4    1 version (1)
//	     5    1 kind: 1 records (UDP), 2 pull request, 3 pull records, 4 pull end,
//	              5 pull backends
//	     6    2 reserved, sent as 0 (authenticated, ignored)
//	     8    4 key ID: the first 4 bytes of SHA-256(key)
//	    12    8 sender ID: random per process
//	    20    8 sequence number: per sender, from 1, +1 per message
//	    28    8 sender's wall clock, unix ms
//	    36    n sealed body (n >= 16: the body and the GCM tag)
//
// The AEAD key is HKDF-SHA256(key, salt = the sender ID's 8 bytes, info
// "xlb flow sync v1", 32 bytes), so that no two senders share a key; the
// nonce is 4 zero bytes then the sequence number's 8, so that a sender
// never repeats one. A pull's response frames add the puller's 16-byte
// request nonce to the associated data (header then nonce).
//
// A records body (kinds 1 and 3) is records back to back, nothing else
// (a heartbeat has none). A record:
//
//	size    field
//	   1    flags: bits 0-1 key kind (0 2T, 1 3T, 2 5T), bit 2 IPv6, bits 3-7 zero
//	   1    protocol (3T, 5T only)
//	 4|16   source address (4 bytes for IPv4, 16 with the IPv6 bit)
//	 4|16   destination address
//	   2    source port (5T only)
//	   2    destination port (5T only)
//	   8    backend fleet ID (dataplane.FleetID)
//	   1    side of the eligible set (E5)
//	   4    age, ms since the flow's last packet at the sender (saturates)
//
// which is 22 bytes for an IPv4 2T key, 23 for 3T, 27 for 5T (49 to a
// datagram) and 51 for an IPv6 5T key. A pull request's body is its
// 16-byte nonce; a pull end's is the number of records sent (8 bytes).
//
// A pull backends body (kind 5, sent before any pull records frame: the
// backends the server drains, M5, so that a puller whose configuration
// lacks one adopts it before its records arrive) is a count then that
// many backends; each string is a 2-byte length then its bytes:
//
//	size    field
//	   2    count (>= 1)
//	then per backend:
//	 2+n    service name
//	 2+n    endpoint name
//	   1    address length (4 or 16), then the address
//	 2+n    group name
//	   1    flags: bit 0 failover, bits 1-7 zero
//	   4    drain left, ms (saturates)
//
// A pull sends at most maxPullBackends backends, in as many frames as
// they need.
const (
	magic      = "XLBF"
	version    = 1
	headerLen  = 36
	tagLen     = 16
	nonceLen   = 16 // a pull request's nonce
	maxPayload = 1400

	kindRecords      = 1
	kindPullRequest  = 2
	kindPullRecords  = 3
	kindPullEnd      = 4
	kindPullBackends = 5

	flagKindMask = 0x3
	flagV6       = 0x4
	flagsKnown   = flagKindMask | flagV6

	maxRecordLen = 1 + 1 + 16 + 16 + 2 + 2 + 8 + 1 + 4
	// maxRecordsPerDatagram bounds the records one datagram can carry
	// (all IPv4 2T: the smallest record).
	maxRecordsPerDatagram = (maxPayload - headerLen - tagLen) / minRecordLen
	minRecordLen          = 1 + 4 + 4 + 8 + 1 + 4
)

// Record is one flow as the wire carries it: the key without its local
// service ID, the backend's fleet ID, the side and the age.
type Record struct {
	Key     conntrack.Key // Service is not sent
	FleetID uint64
	Side    uint8
	AgeMs   uint32
}

// header is a message's clear header.
type header struct {
	kind   uint8
	keyID  [4]byte
	sender uint64
	seq    uint64
	wall   int64 // unix ms
}

func (h *header) put(b []byte) {
	_ = b[headerLen-1]
	copy(b[0:4], magic)
	b[4] = version
	b[5] = h.kind
	b[6], b[7] = 0, 0
	copy(b[8:12], h.keyID[:])
	binary.BigEndian.PutUint64(b[12:20], h.sender)
	binary.BigEndian.PutUint64(b[20:28], h.seq)
	binary.BigEndian.PutUint64(b[28:36], uint64(h.wall))
}

// parseHeader reads b's header; refusals: malformed (too short, not ours),
// version.
func parseHeader(b []byte) (header, reason) {
	if len(b) < headerLen+tagLen || string(b[0:4]) != magic {
		return header{}, reasonMalformed
	}
	if b[4] != version {
		return header{}, reasonVersion
	}
	h := header{
		kind:   b[5],
		sender: binary.BigEndian.Uint64(b[12:20]),
		seq:    binary.BigEndian.Uint64(b[20:28]),
		wall:   int64(binary.BigEndian.Uint64(b[28:36])),
	}
	copy(h.keyID[:], b[8:12])
	return h, reasonNone
}

// recordLen is the encoded size of r.
func recordLen(k *conntrack.Key) int {
	n := 1 + 8 + 8 + 1 + 4
	if !isV4(k) {
		n += 24
	}
	switch k.Kind {
	case conntrack.Kind3T:
		n++
	case conntrack.Kind5T:
		n += 5
	}
	return n
}

var v4Prefix = [12]byte{10: 0xff, 11: 0xff}

func isV4(k *conntrack.Key) bool {
	return [12]byte(k.Src[:12]) == v4Prefix && [12]byte(k.Dst[:12]) == v4Prefix
}

// putRecord writes r at b (len(b) >= recordLen) and returns its length.
// It reports false for a key of an unknown kind.
func putRecord(b []byte, r *Record) (int, bool) {
	k := &r.Key
	var f byte
	switch k.Kind {
	case conntrack.Kind2T:
	case conntrack.Kind3T:
		f = 1
	case conntrack.Kind5T:
		f = 2
	default:
		return 0, false
	}
	v4 := isV4(k)
	if !v4 {
		f |= flagV6
	}
	b[0] = f
	n := 1
	if k.Kind != conntrack.Kind2T {
		b[n] = k.Proto
		n++
	}
	if v4 {
		n += copy(b[n:n+4], k.Src[12:])
		n += copy(b[n:n+4], k.Dst[12:])
	} else {
		n += copy(b[n:n+16], k.Src[:])
		n += copy(b[n:n+16], k.Dst[:])
	}
	if k.Kind == conntrack.Kind5T {
		binary.BigEndian.PutUint16(b[n:], k.SrcPort)
		binary.BigEndian.PutUint16(b[n+2:], k.DstPort)
		n += 4
	}
	binary.BigEndian.PutUint64(b[n:], r.FleetID)
	b[n+8] = r.Side
	binary.BigEndian.PutUint32(b[n+9:], r.AgeMs)
	return n + 13, true
}

// readRecord decodes one record from b into r; n == 0: malformed.
func readRecord(b []byte, r *Record) int {
	if len(b) < minRecordLen {
		return 0
	}
	f := b[0]
	if f&^flagsKnown != 0 || f&flagKindMask == 3 {
		return 0
	}
	kind := [3]conntrack.Kind{conntrack.Kind2T, conntrack.Kind3T, conntrack.Kind5T}[f&flagKindMask]
	need := 1 + 8 + 13
	if f&flagV6 != 0 {
		need += 24
	}
	switch kind {
	case conntrack.Kind3T:
		need++
	case conntrack.Kind5T:
		need += 5
	}
	if len(b) < need {
		return 0
	}
	k := &r.Key
	*k = conntrack.Key{Kind: kind}
	n := 1
	if kind != conntrack.Kind2T {
		k.Proto = b[n]
		n++
	}
	if f&flagV6 != 0 {
		copy(k.Src[:], b[n:n+16])
		copy(k.Dst[:], b[n+16:n+32])
		n += 32
	} else {
		copy(k.Src[:12], v4Prefix[:])
		copy(k.Dst[:12], v4Prefix[:])
		copy(k.Src[12:], b[n:n+4])
		copy(k.Dst[12:], b[n+4:n+8])
		n += 8
	}
	if kind == conntrack.Kind5T {
		k.SrcPort = binary.BigEndian.Uint16(b[n:])
		k.DstPort = binary.BigEndian.Uint16(b[n+2:])
		n += 4
	}
	r.FleetID = binary.BigEndian.Uint64(b[n:])
	r.Side = b[n+8]
	r.AgeMs = binary.BigEndian.Uint32(b[n+9:])
	return n + 13
}

// decodeRecords decodes a whole records body into dst (reused), or
// reports false (malformed: a truncated record, unknown flags, more
// records than dst holds). Nothing is applied before the whole body is
// known to be well formed.
func decodeRecords(body []byte, dst []Record) ([]Record, bool) {
	dst = dst[:0]
	for len(body) > 0 {
		if len(dst) == cap(dst) {
			return dst, false
		}
		dst = dst[:len(dst)+1]
		n := readRecord(body, &dst[len(dst)-1])
		if n == 0 {
			return dst[:0], false
		}
		body = body[n:]
	}
	return dst, true
}

// maxPullBackends bounds the draining backends one pull carries.
const maxPullBackends = 65535

// DrainingBackend is a backend a peer drains (removed from its
// configuration, M5) while flows still go to it, as a pull carries it
// (DrainLeft with ms precision): the control plane's own type, which
// adopts it.
type DrainingBackend = controlplane.DrainingBackend

// drainingLen is b's encoded size.
func drainingLen(b *DrainingBackend) int {
	return 2 + len(b.Service) + 2 + len(b.Name) + 1 + b.IP.Unmap().BitLen()/8 + 2 + len(b.Group) + 1 + 4
}

// putDraining appends b to dst; false when a string is too long for its
// length or the address is not valid (it is not sent).
func putDraining(dst []byte, b *DrainingBackend) ([]byte, bool) {
	if len(b.Service) > math.MaxUint16 || len(b.Name) > math.MaxUint16 || len(b.Group) > math.MaxUint16 || !b.IP.IsValid() {
		return dst, false
	}
	str := func(s string) {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
		dst = append(dst, s...)
	}
	str(b.Service)
	str(b.Name)
	ip := b.IP.Unmap().AsSlice()
	dst = append(dst, byte(len(ip)))
	dst = append(dst, ip...)
	str(b.Group)
	var f byte
	if b.Failover {
		f = 1
	}
	dst = append(dst, f)
	return binary.BigEndian.AppendUint32(dst, uint32(min(max(b.DrainLeft.Milliseconds(), 0), math.MaxUint32))), true
}

// decodeDraining decodes a whole pull backends body, appending to dst, or
// reports false (malformed: no backend, a truncated one, a bad address or
// flags, bytes after the last).
func decodeDraining(body []byte, dst []DrainingBackend) ([]DrainingBackend, bool) {
	if len(body) < 2 {
		return dst, false
	}
	n := int(binary.BigEndian.Uint16(body))
	body = body[2:]
	if n == 0 {
		return dst, false
	}
	bad := false
	take := func(l int) []byte {
		if bad || len(body) < l {
			bad = true
			return nil
		}
		b := body[:l]
		body = body[l:]
		return b
	}
	str := func() string {
		l := take(2)
		if bad {
			return ""
		}
		return string(take(int(binary.BigEndian.Uint16(l))))
	}
	start := len(dst)
	for range n {
		var b DrainingBackend
		b.Service, b.Name = str(), str()
		if l := take(1); !bad && (l[0] == 4 || l[0] == 16) {
			b.IP, _ = netip.AddrFromSlice(take(int(l[0])))
		} else {
			bad = true
		}
		b.Group = str()
		f := take(1)
		ms := take(4)
		if bad || f[0]&^1 != 0 {
			return dst[:start], false
		}
		b.Failover = f[0] == 1
		b.DrainLeft = time.Duration(binary.BigEndian.Uint32(ms)) * time.Millisecond
		dst = append(dst, b)
	}
	if len(body) != 0 {
		return dst[:start], false
	}
	return dst, true
}

// encoder builds one message in a buffer of its own, reused: add records,
// then seal. The body is written where it will be sealed in place.
type encoder struct {
	buf   []byte // capacity: the message's limit
	n     int    // bytes written (header included)
	count int    // records added
	sc    scratch
}

func newEncoder(limit int) *encoder {
	return &encoder{buf: make([]byte, limit), n: headerLen}
}

func (e *encoder) reset() { e.n, e.count = headerLen, 0 }

// add appends r; false when it does not fit (seal first) or its key is
// of no known kind (dropped: count is unchanged either way).
func (e *encoder) add(r *Record) bool {
	if e.n+recordLen(&r.Key)+tagLen > len(e.buf) {
		return false
	}
	n, ok := putRecord(e.buf[e.n:], r)
	if !ok {
		return true // never sendable: skip it rather than stall
	}
	e.n += n
	e.count++
	return true
}

// room reports whether a record of any size still fits.
func (e *encoder) room() bool { return e.n+maxRecordLen+tagLen <= len(e.buf) }

// putBody appends raw body bytes (a pull request's nonce, an end's count).
func (e *encoder) putBody(b []byte) { e.n += copy(e.buf[e.n:], b) }

// scratch is the nonce and associated data of one seal or open, kept
// where it does not escape per message.
type scratch struct {
	nonce [12]byte
	ad    [headerLen + nonceLen]byte
}

// prepare fills the nonce from seq and the associated data from the
// header at msg and extra; it returns the associated data.
func (sc *scratch) prepare(seq uint64, msg, extra []byte) []byte {
	sc.nonce = [12]byte{}
	binary.BigEndian.PutUint64(sc.nonce[4:], seq)
	if len(extra) == 0 {
		return msg[:headerLen]
	}
	copy(sc.ad[:], msg[:headerLen])
	copy(sc.ad[headerLen:], extra)
	return sc.ad[:headerLen+len(extra)]
}

// seal writes h and seals the body with a under associated data header ||
// extra; the message is valid until the next reset.
func (e *encoder) seal(a cipher.AEAD, h *header, extra []byte) []byte {
	h.put(e.buf)
	ad := e.sc.prepare(h.seq, e.buf, extra)
	out := a.Seal(e.buf[headerLen:headerLen], e.sc.nonce[:], e.buf[headerLen:e.n], ad)
	return e.buf[:headerLen+len(out)]
}

// open authenticates msg (header h already parsed) with a and returns its
// body, decrypted in place; false: it does not open.
func (sc *scratch) open(a cipher.AEAD, h *header, msg []byte, extra []byte) ([]byte, bool) {
	ad := sc.prepare(h.seq, msg, extra)
	body, err := a.Open(msg[headerLen:headerLen], sc.nonce[:], msg[headerLen:], ad)
	return body, err == nil
}
