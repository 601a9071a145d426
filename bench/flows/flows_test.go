package flows

import (
	"fmt"
	"math"
	"net/netip"
	"testing"

	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// TestPutMatchesCraft: a generated frame is byte for byte what craft
// (gopacket) builds for the same flow and payload length, checksums
// included.
func TestPutMatchesCraft(t *testing.T) {
	tg := &DefaultTargets
	for _, f := range []Flow{
		{ID: 0, Kind: ACK}, {ID: 7, Kind: SYN}, {ID: 1<<22 + 5, Kind: ACK},
		{ID: 3, V6: true, Kind: ACK}, {ID: 1 << 20, V6: true, Kind: SYN},
		{ID: 2, Kind: UDP}, {ID: 9, V6: true, Kind: UDP},
	} {
		for _, size := range []int{64, 65, 128, 1500} {
			payload := FrameLen(f, size) - HeaderLen(f)
			if payload == 0 {
				continue // craft cannot build an empty payload (0 means its default)
			}
			src, sport := Client(f.ID, f.V6)
			p := craft.Packet{Src: src, Dst: tg.VIP4, Proto: packet.ProtoTCP, SrcPort: sport, DstPort: tg.TCPPort, PayloadLen: payload, Flags: "A"}
			if f.V6 {
				p.Dst = tg.VIP6
			}
			switch f.Kind {
			case SYN:
				p.Flags = "S"
			case UDP:
				p.Proto, p.DstPort, p.Flags = packet.ProtoUDP, tg.UDPPort, ""
			}
			want, err := craft.Build(&p)
			if err != nil {
				t.Fatal(err)
			}
			got := tg.Put(make([]byte, FrameLen(f, size)), f, size)
			if len(got) != size {
				t.Errorf("%+v size %d: frame of %d bytes", f, size, len(got))
			}
			if string(got) != string(want) {
				t.Errorf("%+v size %d: differs from craft's frame\n got %x\nwant %x", f, size, got, want)
			}
		}
	}
}

// TestHeaderOnlyFrames: when the requested size is below the headers (IPv6
// TCP at 64 bytes) the frame is the headers alone, and still valid.
func TestHeaderOnlyFrames(t *testing.T) {
	for _, f := range []Flow{{ID: 1, V6: true, Kind: ACK}, {ID: 1, V6: true, Kind: SYN}, {ID: 4, Kind: ACK}} {
		b := DefaultTargets.Put(make([]byte, FrameLen(f, 0)), f, 0)
		if len(b) != HeaderLen(f) {
			t.Errorf("%+v: %d bytes, want %d", f, len(b), HeaderLen(f))
		}
		checkFrame(t, b, f, &DefaultTargets)
	}
	if got := FrameLen(Flow{V6: true}, 64); got != 74 {
		t.Errorf("IPv6 TCP frame for 64 bytes: %d, want 74", got)
	}
	if got := FrameLen(Flow{}, 64); got != 64 {
		t.Errorf("IPv4 TCP frame for 64 bytes: %d, want 64", got)
	}
}

// checkFrame parses b with the engine's parser and checks it is f's frame
// with valid checksums.
func checkFrame(t *testing.T, b []byte, f Flow, tg *Targets) {
	t.Helper()
	var p packet.Parsed
	if err := packet.Parse(b, &p); err != nil {
		t.Fatalf("%+v: parse: %v", f, err)
	}
	src, sport := Client(f.ID, f.V6)
	vip, dport, proto := tg.VIP4, tg.TCPPort, packet.ProtoTCP
	if f.V6 {
		vip = tg.VIP6
	}
	if f.Kind == UDP {
		dport, proto = tg.UDPPort, packet.ProtoUDP
	}
	if p.SrcAddr() != src || p.DstAddr() != vip || p.SrcPort != sport || p.DstPort != dport || p.Proto != proto ||
		!p.HasPortInfo() || p.IPVersion != map[bool]uint8{false: 4, true: 6}[f.V6] || p.IPLen+p.L3Off != len(b) {
		t.Fatalf("%+v: parsed %+v", f, p)
	}
	if proto == packet.ProtoTCP {
		syn, ack := p.TCPFlags&packet.TCPSyn != 0, p.TCPFlags&packet.TCPAck != 0
		if syn != (f.Kind == SYN) || ack != (f.Kind == ACK) {
			t.Fatalf("%+v: TCP flags %#x", f, p.TCPFlags)
		}
	}
	var srcB, dstB []byte
	if f.V6 {
		srcB, dstB = b[p.L3Off+8:p.L3Off+24], b[p.L3Off+24:p.L3Off+40]
	} else {
		if c := packet.Checksum(b[p.L3Off:p.L4Off], 0); c != 0 {
			t.Fatalf("%+v: IPv4 header checksum off by %#x", f, c)
		}
		srcB, dstB = b[p.L3Off+12:p.L3Off+16], b[p.L3Off+16:p.L3Off+20]
	}
	if c := packet.Checksum(b[p.L4Off:], packet.PseudoHeaderSum(proto, srcB, dstB, uint32(len(b)-p.L4Off))); c != 0 {
		t.Fatalf("%+v: L4 checksum off by %#x", f, c)
	}
}

// TestGenerateMixes: every mix has the shares of SYN, ACK, UDP and IPv6 it
// asks for, ACKs are of live flows and SYNs of new ones, all 5-tuples are
// distinct (while the live flows suffice), and every frame is valid.
func TestGenerateMixes(t *testing.T) {
	type tuple struct {
		src, dst     netip.Addr
		sport, dport uint16
		proto        packet.Proto
	}
	for _, m := range append(Mixes(), Mix{Name: "odd", NewShare: 0.3, UDPShare: 0.2, V6Share: 0.5}) {
		for _, c := range []struct{ live, frames, size int }{{1000, 900, 64}, {100000, 4096, 1500}, {3, 2, 64}} {
			t.Run(fmt.Sprintf("%s/%d/%d", m.Name, c.live, c.frames), func(t *testing.T) {
				set, err := Generate(Spec{Mix: m, Live: c.live, Frames: c.frames, Size: c.size, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				if len(set.Frames) != c.frames || len(set.Flows) != c.frames {
					t.Fatalf("%d frames, %d flows, want %d", len(set.Frames), len(set.Flows), c.frames)
				}
				var count [3][2]int // kind, v6
				seen := map[tuple]bool{}
				bytes := 0
				for i, f := range set.Flows {
					b := set.Frames[i]
					bytes += len(b)
					if len(b) != FrameLen(f, c.size) {
						t.Fatalf("frame %d: %d bytes, want %d", i, len(b), FrameLen(f, c.size))
					}
					checkFrame(t, b, f, &DefaultTargets)
					var p packet.Parsed
					_ = packet.Parse(b, &p)
					seen[tuple{p.SrcAddr(), p.DstAddr(), p.SrcPort, p.DstPort, p.Proto}] = true
					v6 := 0
					if f.V6 {
						v6 = 1
					}
					count[f.Kind][v6]++
					switch f.Kind {
					case ACK:
						if f.ID >= c.live || Live(f.ID).V6 != f.V6 {
							t.Fatalf("ACK of %+v: not a live flow of that family", f)
						}
					case SYN:
						if f.ID < c.live {
							t.Fatalf("SYN of %+v: a live flow", f)
						}
					}
				}
				if bytes != set.Bytes {
					t.Errorf("Bytes %d, frames sum to %d", set.Bytes, bytes)
				}
				near := func(what string, got int, want float64) {
					if math.Abs(float64(got)-want) > 1 {
						t.Errorf("%s: %d frames, want %.1f", what, got, want)
					}
				}
				n := float64(c.frames)
				nSYN, nUDP := count[SYN][0]+count[SYN][1], count[UDP][0]+count[UDP][1]
				nACK := count[ACK][0] + count[ACK][1]
				near("SYN", nSYN, n*m.NewShare)
				near("UDP", nUDP, n*m.UDPShare)
				near("ACK", nACK, n*(1-m.NewShare-m.UDPShare))
				for k, nk := range []int{nACK, nSYN, nUDP} {
					near(Kind(k).String()+" IPv6", count[k][1], float64(nk)*m.V6Share)
				}
				// Distinct 5-tuples, unless the mix asked for more ACKs of
				// a family than it has live flows.
				maxACK := max(count[ACK][0]-(c.live+1)/2, count[ACK][1]-c.live/2)
				if maxACK <= 0 && len(seen) != c.frames {
					t.Errorf("%d distinct 5-tuples in %d frames", len(seen), c.frames)
				}
			})
		}
	}
}

// TestGenerateCycles: with more ACK frames than live flows, the set cycles
// through all of them.
func TestGenerateCycles(t *testing.T) {
	set, err := Generate(Spec{Mix: EstablishedV4, Live: 20, Frames: 35, Size: 64, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int]int{}
	for _, f := range set.Flows {
		ids[f.ID]++
	}
	if len(ids) != 10 {
		t.Fatalf("%d distinct live IPv4 flows of 10: %v", len(ids), ids)
	}
	for id, n := range ids {
		if id%2 != 0 || n < 3 || n > 4 {
			t.Errorf("flow %d appears %d times", id, n)
		}
	}
}

// TestGenerateSeed: the same spec gives the same set; another seed another
// order.
func TestGenerateSeed(t *testing.T) {
	spec := Spec{Mix: Realistic, Live: 10000, Frames: 1000, Size: 64, Seed: 7}
	a, _ := Generate(spec)
	b, _ := Generate(spec)
	spec.Seed = 8
	c, _ := Generate(spec)
	same, differ := true, false
	for i := range a.Flows {
		same = same && a.Flows[i] == b.Flows[i] && string(a.Frames[i]) == string(b.Frames[i])
		differ = differ || a.Flows[i] != c.Flows[i]
	}
	if !same || !differ {
		t.Errorf("same seed same set: %v; other seed other set: %v", same, differ)
	}
}

func TestGenerateErrors(t *testing.T) {
	for _, s := range []Spec{
		{Mix: EstablishedV4, Live: 0, Frames: 10},                      // no live flow to replay
		{Mix: EstablishedV6, Live: 1, Frames: 10},                      // the one live flow is IPv4
		{Mix: Mix{NewShare: 0.7, UDPShare: 0.5}, Live: 10, Frames: 10}, // shares above 1
		{Mix: Mix{V6Share: -0.1}, Live: 10, Frames: 10},
		{Mix: AllSYN, Live: 10, Frames: 0},
		{Mix: AllSYN, Live: MaxFlows, Frames: 1},
		{Mix: AllSYN, Live: 10, Frames: 1, Size: 10000},
	} {
		if _, err := Generate(s); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
	if _, err := Generate(Spec{Mix: AllSYN, Live: 0, Frames: 10}); err != nil {
		t.Errorf("SYNs need no live flow: %v", err)
	}
}

// TestSplit: the workers' shares are disjoint and cover the set.
func TestSplit(t *testing.T) {
	set, err := Generate(Spec{Mix: Realistic, Live: 5000, Frames: 1001, Size: 64, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	parts := set.Split(3)
	seen := map[*byte]int{}
	total := 0
	for w, p := range parts {
		total += len(p)
		if len(p) < 333 || len(p) > 334 {
			t.Errorf("worker %d: %d frames", w, len(p))
		}
		for _, f := range p {
			if _, dup := seen[&f[0]]; dup {
				t.Fatalf("a frame dealt twice")
			}
			seen[&f[0]] = w
		}
	}
	if total != len(set.Frames) {
		t.Errorf("%d frames dealt of %d", total, len(set.Frames))
	}
}
