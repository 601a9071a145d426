// Package flows generates benchmark traffic: real Ethernet frames of TCP
// and UDP flows over IPv4 and IPv6, built ahead of time, in mixes described
// by their share of new connections (SYN) against established ones (ACK),
// of UDP and of IPv6, for a table of a given number of live flows and a
// given frame size. lbbench replays them through the engine; nothing here
// runs in a measured loop.
//
// Flows are numbered. A flow's number and family give its client address
// and port (IPv4 clients in 100.64.0.0/10, IPv6 in 2001:db8:c::/64, four
// source ports per address), so distinct numbers of one family are distinct
// 5-tuples up to MaxFlows. The live flows of a table of n are numbers 0..n-1
// (even ones IPv4, odd ones IPv6: every mix finds live flows of both
// families in the same table); new connections take numbers from n up, so
// they are never live already.
package flows

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"

	"xlb/dataplane/packet"
)

// MaxFlows bounds flow numbers: 2^22 client addresses of four ports each.
const MaxFlows = 1 << 24

// Kind is what a frame is.
type Kind uint8

const (
	ACK Kind = iota // TCP segment of an established connection (flag ACK)
	SYN             // TCP SYN opening a new connection
	UDP             // UDP datagram
)

func (k Kind) String() string {
	switch k {
	case ACK:
		return "ack"
	case SYN:
		return "syn"
	case UDP:
		return "udp"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Targets are where the frames go: the VIPs, ports and MACs the balancer's
// configuration must serve (TCP to TCPPort tracked, UDP to UDPPort).
type Targets struct {
	VIP4, VIP6       netip.Addr
	TCPPort, UDPPort uint16
	SrcMAC, DstMAC   [6]byte
}

// DefaultTargets are documentation addresses, with the MACs of
// dataplane/craft's frames.
var DefaultTargets = Targets{
	VIP4:    netip.MustParseAddr("203.0.113.10"),
	VIP6:    netip.MustParseAddr("2001:db8:f::10"),
	TCPPort: 80,
	UDPPort: 53,
	SrcMAC:  [6]byte{0x02, 0xc1, 0x1e, 0x00, 0x00, 0x01},
	DstMAC:  [6]byte{0x02, 0x1b, 0x00, 0x00, 0x00, 0x01},
}

// Flow is one frame's flow.
type Flow struct {
	ID   int
	V6   bool
	Kind Kind
}

// Live returns live flow i of a table (to be opened by a SYN, replayed by
// ACKs): even numbers are IPv4, odd ones IPv6.
func Live(i int) Flow { return Flow{ID: i, V6: i&1 == 1, Kind: ACK} }

// Client returns the source address and port of flow id of a family.
func Client(id int, v6 bool) (netip.Addr, uint16) {
	port := uint16(1024 + (id&3)*15000)
	h := uint32(id >> 2)
	if v6 {
		a := [16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0x0c}
		binary.BigEndian.PutUint32(a[12:], h)
		return netip.AddrFrom16(a), port
	}
	return netip.AddrFrom4([4]byte{100, 64 | byte(h>>16)&0x3f, byte(h >> 8), byte(h)}), port
}

// Header lengths without options: Ethernet, IPv4, IPv6, TCP, UDP.
const (
	ethLen  = 14
	ipv4Len = 20
	ipv6Len = 40
	tcpLen  = 20
	udpLen  = 8
)

// HeaderLen is the length of a frame of f with no payload: the smallest
// frame of that flow (54 bytes for IPv4 TCP, 74 for IPv6 TCP).
func HeaderLen(f Flow) int {
	n := ethLen + ipv4Len
	if f.V6 {
		n = ethLen + ipv6Len
	}
	if f.Kind == UDP {
		return n + udpLen
	}
	return n + tcpLen
}

// FrameLen is the length of f's frame for a requested size: the size, or
// the headers alone when they are longer (an IPv6 TCP frame has no 64-byte
// form).
func FrameLen(f Flow, size int) int { return max(size, HeaderLen(f)) }

// Put writes the frame of flow f, FrameLen(f, size) bytes, into dst (which
// must be that long) and returns it. The payload counts up from 0; the IP
// and L4 checksums are correct. The fields are those dataplane/craft sets,
// so that for a payload of at least one byte the frame is byte for byte
// what craft builds.
func (t *Targets) Put(dst []byte, f Flow, size int) []byte {
	n := FrameLen(f, size)
	b := dst[:n:n]
	copy(b[0:6], t.DstMAC[:])
	copy(b[6:12], t.SrcMAC[:])
	src, sport := Client(f.ID, f.V6)
	vip, dport, proto := t.VIP4, t.TCPPort, packet.ProtoTCP
	if f.V6 {
		vip = t.VIP6
	}
	l4h := tcpLen
	if f.Kind == UDP {
		dport, proto, l4h = t.UDPPort, packet.ProtoUDP, udpLen
	}
	var srcB, dstB []byte
	l4 := ethLen + ipv4Len
	if f.V6 {
		l4 = ethLen + ipv6Len
		binary.BigEndian.PutUint16(b[12:], packet.EtherTypeIPv6)
		ip := b[ethLen:l4]
		binary.BigEndian.PutUint32(ip[0:], 6<<28)
		binary.BigEndian.PutUint16(ip[4:], uint16(n-l4))
		ip[6], ip[7] = byte(proto), 64
		s, d := src.As16(), vip.As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		srcB, dstB = ip[8:24], ip[24:40]
	} else {
		binary.BigEndian.PutUint16(b[12:], packet.EtherTypeIPv4)
		ip := b[ethLen:l4]
		ip[0], ip[1] = 0x45, 0
		binary.BigEndian.PutUint16(ip[2:], uint16(n-ethLen))
		binary.BigEndian.PutUint16(ip[4:], 0x1234)
		binary.BigEndian.PutUint16(ip[6:], 0) // no flags, offset 0
		ip[8], ip[9] = 64, byte(proto)
		binary.BigEndian.PutUint16(ip[10:], 0)
		s, d := src.As4(), vip.As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		binary.BigEndian.PutUint16(ip[10:], packet.Checksum(ip, 0))
		srcB, dstB = ip[12:16], ip[16:20]
	}
	h := b[l4 : l4+l4h]
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	copy(b[l4+l4h:], payload[:])
	if f.Kind == UDP {
		binary.BigEndian.PutUint16(h[4:], uint16(n-l4))
		binary.BigEndian.PutUint16(h[6:], 0)
	} else {
		binary.BigEndian.PutUint32(h[4:], 1000) // seq
		var ack uint32
		flags := byte(0x02) // SYN
		if f.Kind == ACK {
			ack, flags = 1, 0x10
		}
		binary.BigEndian.PutUint32(h[8:], ack)
		h[12], h[13] = 5<<4, flags
		binary.BigEndian.PutUint16(h[14:], 65535) // window
		binary.BigEndian.PutUint16(h[16:], 0)     // checksum
		binary.BigEndian.PutUint16(h[18:], 0)     // urgent pointer
	}
	c := packet.Checksum(b[l4:n], packet.PseudoHeaderSum(proto, srcB, dstB, uint32(n-l4)))
	if f.Kind == UDP && c == 0 {
		c = 0xffff // RFC 768: a computed 0 is sent as all ones
	}
	if f.Kind == UDP {
		binary.BigEndian.PutUint16(h[6:], c)
	} else {
		binary.BigEndian.PutUint16(h[16:], c)
	}
	return b
}

// payload is what every frame carries after its headers: bytes counting up
// from 0, as craft's.
var payload = func() (p [9000]byte) {
	for i := range p {
		p[i] = byte(i)
	}
	return p
}()

// Mix is a kind of traffic, by shares of its frames.
type Mix struct {
	Name string
	// NewShare of the frames are SYNs of new TCP connections.
	NewShare float64
	// UDPShare of the frames are UDP datagrams (to a service that does not
	// track them).
	UDPShare float64
	// The rest are ACKs of established (live) TCP flows.
	// V6Share of the frames of each kind are IPv6.
	V6Share float64
}

// The mixes lbbench measures.
var (
	EstablishedV4 = Mix{Name: "established-v4"}
	EstablishedV6 = Mix{Name: "established-v6", V6Share: 1}
	// Realistic: one frame in ten opens a connection, one in ten is UDP, a
	// quarter IPv6.
	Realistic = Mix{Name: "realistic", NewShare: 0.10, UDPShare: 0.10, V6Share: 0.25}
	AllSYN    = Mix{Name: "syn", NewShare: 1}
	UDPOnly   = Mix{Name: "udp-untracked", UDPShare: 1}
)

// Mixes returns the standard mixes, those that only read the table first.
func Mixes() []Mix { return []Mix{EstablishedV4, EstablishedV6, Realistic, UDPOnly, AllSYN} }

// Spec asks for a replay set.
type Spec struct {
	Mix Mix
	// Live is the number of live flows of the table (Live(0..Live-1));
	// ACKs are drawn from them.
	Live int
	// Frames is the size of the replay set. ACKs take distinct live flows
	// of their family while there are enough, then cycle through them.
	Frames int
	// Size is the frame size in bytes (Ethernet header to end of payload,
	// no FCS); frames are never shorter than their headers.
	Size int
	// Seed makes the sample and the order reproducible.
	Seed uint64
	// Targets: zero means DefaultTargets.
	Targets *Targets
}

// Set is a generated replay set: Frames[i] is a frame of Flows[i], in a
// random order, in one backing array.
type Set struct {
	Frames [][]byte
	Flows  []Flow
	Bytes  int // total frame bytes
}

// Generate builds the replay set s asks for.
func Generate(s Spec) (*Set, error) {
	m := s.Mix
	for _, v := range []float64{m.NewShare, m.UDPShare, m.V6Share} {
		if v < 0 || v > 1 || math.IsNaN(v) {
			return nil, fmt.Errorf("mix %q: shares must be in [0, 1]", m.Name)
		}
	}
	if m.NewShare+m.UDPShare > 1+1e-9 {
		return nil, fmt.Errorf("mix %q: new %.2f + udp %.2f exceed 1", m.Name, m.NewShare, m.UDPShare)
	}
	if s.Frames <= 0 {
		return nil, errors.New("frames must be positive")
	}
	if s.Live < 0 || s.Live+s.Frames > MaxFlows {
		return nil, fmt.Errorf("live %d + frames %d: flow numbers beyond %d", s.Live, s.Frames, MaxFlows)
	}
	if s.Size < 0 || s.Size > 9000 {
		return nil, fmt.Errorf("frame size %d not in [0, 9000]", s.Size)
	}
	t := s.Targets
	if t == nil {
		t = &DefaultTargets
	}
	nSYN := int(math.Round(float64(s.Frames) * m.NewShare))
	nUDP := min(int(math.Round(float64(s.Frames)*m.UDPShare)), s.Frames-nSYN)
	nACK := s.Frames - nSYN - nUDP
	rng := rand.New(rand.NewPCG(s.Seed, 0x6c62))
	flows := make([]Flow, 0, s.Frames)

	// ACKs: the first k live flows of a family in the order of a random
	// affine permutation of that family's flows.
	live4, live6 := (s.Live+1)/2, s.Live/2
	a6 := int(math.Round(float64(nACK) * m.V6Share))
	for _, fam := range []struct {
		v6        bool
		n, avail  int
		first, by int
	}{{false, nACK - a6, live4, 0, 2}, {true, a6, live6, 1, 2}} {
		if fam.n == 0 {
			continue
		}
		if fam.avail == 0 {
			return nil, fmt.Errorf("mix %q: %d established IPv6=%v frames but no live flow of that family (live %d)", m.Name, fam.n, fam.v6, s.Live)
		}
		p := newPerm(fam.avail, rng)
		for j := range fam.n {
			flows = append(flows, Flow{ID: fam.first + fam.by*p.at(j%fam.avail), V6: fam.v6, Kind: ACK})
		}
	}
	// SYNs: new flows, numbered after the live ones.
	s6 := int(math.Round(float64(nSYN) * m.V6Share))
	for j := range nSYN {
		flows = append(flows, Flow{ID: s.Live + j, V6: j < s6, Kind: SYN})
	}
	// UDP: its own numbers (a UDP 5-tuple never meets a TCP one).
	u6 := int(math.Round(float64(nUDP) * m.V6Share))
	for j := range nUDP {
		flows = append(flows, Flow{ID: j, V6: j < u6, Kind: UDP})
	}
	rng.Shuffle(len(flows), func(i, j int) { flows[i], flows[j] = flows[j], flows[i] })

	total := 0
	for _, f := range flows {
		total += FrameLen(f, s.Size)
	}
	slab := make([]byte, total)
	set := &Set{Frames: make([][]byte, len(flows)), Flows: flows, Bytes: total}
	off := 0
	for i, f := range flows {
		n := FrameLen(f, s.Size)
		set.Frames[i] = t.Put(slab[off:off+n:off+n], f, s.Size)
		off += n
	}
	return set, nil
}

// Split deals the frames to n workers round-robin: worker w gets frames w,
// w+n, w+2n... When every flow appears once in the set, the workers' flows
// are disjoint, as RSS makes them on a NIC.
func (s *Set) Split(n int) [][][]byte {
	out := make([][][]byte, n)
	for w := range out {
		out[w] = make([][]byte, 0, (len(s.Frames)+n-1-w)/n)
	}
	for i, f := range s.Frames {
		out[i%n] = append(out[i%n], f)
	}
	return out
}

// perm is a random affine permutation of 0..n-1: i -> (a*i + b) mod n with
// a coprime to n. It spreads a sample over the whole range without a table
// of n entries.
type perm struct{ n, a, b uint64 }

func newPerm(n int, rng *rand.Rand) perm {
	p := perm{n: uint64(n), b: rng.Uint64N(uint64(n))}
	for {
		p.a = rng.Uint64N(uint64(n)) | 1
		if gcd(p.a, p.n) == 1 {
			return p
		}
	}
}

func (p perm) at(i int) int { return int((p.a*uint64(i) + p.b) % p.n) }

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
