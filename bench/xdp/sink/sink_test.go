package sink

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"xlb/dataplane/craft"
	"xlb/dataplane/packet"

	"xlb/internal/nettest"
)

func TestHistogramBuckets(t *testing.T) {
	prev := -1
	for v := uint64(0); v < 1<<20; v += 1 + v/97 {
		b := bucket(v)
		if b < prev {
			t.Fatalf("bucket(%d) = %d < bucket of a smaller value %d", v, b, prev)
		}
		prev = b
		if lo := lowest(b); lo > v || (b+1 < numBuckets && lowest(b+1) <= v) {
			t.Fatalf("v %d in bucket %d = [%d, %d)", v, b, lo, lowest(b+1))
		}
		if w := lowest(b+1) - lowest(b); v >= subBuckets && float64(w) > float64(v)/subBuckets+1 {
			t.Fatalf("bucket of %d is %d wide, more than 1/%d of it", v, w, subBuckets)
		}
	}
	if b := bucket(1 << 62); b != numBuckets-1 {
		t.Fatalf("huge value in bucket %d, want the last", b)
	}
}

// TestHistogramQuantiles compares with exact quantiles of synthetic samples.
func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	var vals []uint64
	for range 100000 {
		// Log-uniform from 1 µs to 1 ms, like latencies.
		v := uint64(1000 * math.Exp2(10*rng.Float64()))
		vals = append(vals, v)
		h.Add(v)
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := vals[int(q*float64(len(vals)))-1]
		got := h.Quantile(q)
		if d := float64(got)/float64(want) - 1; d > 0.04 || d < -0.04 {
			t.Errorf("p%v = %d, exact %d (%.1f%% off)", q*100, got, want, d*100)
		}
	}
	if h.Quantile(1) != vals[len(vals)-1] && float64(h.Quantile(1)) < 0.96*float64(vals[len(vals)-1]) {
		t.Errorf("p100 = %d, max %d", h.Quantile(1), vals[len(vals)-1])
	}
	var mean float64
	for _, v := range vals {
		mean += float64(v)
	}
	if m := mean / float64(len(vals)); h.Mean() != m {
		t.Errorf("mean %v, want %v", h.Mean(), m)
	}

	// Small values are exact.
	var s Histogram
	for _, v := range []uint64{3, 3, 5, 7, 20} {
		s.Add(v)
	}
	if s.Quantile(0.5) != 5 || s.Quantile(0.2) != 3 || s.Quantile(1) != 20 || s.Max != 20 {
		t.Errorf("small: p50 %d p20 %d p100 %d", s.Quantile(0.5), s.Quantile(0.2), s.Quantile(1))
	}
	var o Histogram
	o.Merge(&s)
	o.Merge(&s)
	if o.N != 10 || o.Quantile(0.5) != 5 {
		t.Errorf("merged: n %d p50 %d", o.N, o.Quantile(0.5))
	}
	if (&Histogram{}).Quantile(0.5) != 0 {
		t.Error("empty histogram has a p50")
	}
	// Above: exact for small values, the values' count at and over a
	// threshold within a bucket's width above.
	if n := s.Above(5); n != 3 {
		t.Errorf("small: %d values >= 5, want 3", n)
	}
	var exact uint64
	for _, v := range vals {
		if v >= 100_000 {
			exact++
		}
	}
	if got := h.Above(100_000); float64(got) < float64(exact) || float64(got) > 1.04*float64(exact)+1 {
		t.Errorf("%d values >= 100 µs, exact %d", got, exact)
	}
	if h.Above(0) != h.N || h.Above(h.Max+h.Max/8) != 0 {
		t.Errorf("above 0: %d of %d; above 1.125 max: %d", h.Above(0), h.N, h.Above(h.Max+h.Max/8))
	}
}

// frame builds a bench frame to dst MAC with transmit time ts and run id.
func frame(t *testing.T, dst net.HardwareAddr, ts int64, run uint32, size int) []byte {
	t.Helper()
	f, err := craft.Build(&craft.Packet{Src: netip.MustParseAddr("10.78.0.1"), Dst: netip.MustParseAddr("10.79.0.10"),
		Proto: packet.ProtoUDP, SrcPort: 1024, DstPort: PortLo, PayloadLen: size - PayloadOff, DstMAC: dst})
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(f[TSOff:], uint64(ts))
	binary.LittleEndian.PutUint32(f[MagicOff:], Magic)
	binary.LittleEndian.PutUint32(f[RunOff:], run)
	return f
}

func TestCounterRecord(t *testing.T) {
	macs := []net.HardwareAddr{{2, 0x77, 0, 0, 1, 1}, {2, 0x77, 0, 0, 1, 2}}
	c := NewCounter(macs, 7)
	// Windows of 1 µs from 0: the largest latency by send time.
	c.Windows = &Windows{Width: 1000, Max: make([]uint64, 3)}
	c.Record(frame(t, macs[0], 1000, 7, 60), 3000)  // 2 µs
	c.Record(frame(t, macs[1], 1000, 7, 60), 6000)  // 5 µs
	c.Record(frame(t, macs[1], 1000, 7, 200), 1500) // 0.5 µs
	c.Record(frame(t, net.HardwareAddr{2, 0, 0, 0, 0, 9}, 1000, 7, 60), 2000)
	c.Record(frame(t, macs[0], 5000, 7, 60), 4000) // timestamp after receive
	c.Record(frame(t, macs[0], 1000, 6, 60), 2000) // another run
	c.Record(make([]byte, 40), 2000)               // too short
	junk := frame(t, macs[0], 1000, 7, 60)
	junk[MagicOff] ^= 1
	c.Record(junk, 2000)

	if c.Frames != 5 || c.Bytes != 4*60+200 || c.Foreign != 3 || c.Other != 1 || c.Early != 1 {
		t.Fatalf("frames %d bytes %d foreign %d other %d early %d", c.Frames, c.Bytes, c.Foreign, c.Other, c.Early)
	}
	if !slices.Equal(c.PerBackend, []uint64{2, 2}) {
		t.Fatalf("per backend %v", c.PerBackend)
	}
	// Sent at 1000 (window 1): 2, 5, 0.5 and 1 µs; at 5000: out of range.
	if !slices.Equal(c.Windows.Max, []uint64{0, 5000, 0}) {
		t.Errorf("windows %v, want [0 5000 0]", c.Windows.Max)
	}
	// Latencies: 0, 500, 1000, 2000, 5000.
	if c.Latency.N != 5 || c.Latency.Max != 5000 || c.Latency.Sum != 8500 {
		t.Fatalf("latency n %d max %d sum %d", c.Latency.N, c.Latency.Max, c.Latency.Sum)
	}
	if p := c.Latency.Quantile(0.5); p < 970 || p > 1030 {
		t.Fatalf("p50 %d, want about 1000", p)
	}
}

// TestProgramVerdicts runs the sink's XDP program on frames: the bench's
// UDP frames take the redirect path (here, with no socket, the test's miss
// verdict), ARP, TCP, other ports, IPv4 options and short frames are passed.
func TestProgramVerdicts(t *testing.T) {
	nettest.RequireRoot(t)
	const xdpDrop = 1
	p, err := load(1, xdpDrop)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	mac := net.HardwareAddr{2, 0x77, 0, 0, 1, 1}
	bench := frame(t, mac, 1, 1, 60)
	hi := frame(t, mac, 1, 1, 60)
	binary.BigEndian.PutUint16(hi[14+20+2:], PortHi)
	build := func(p *craft.Packet) []byte {
		f, err := craft.Build(p)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	src, dst := netip.MustParseAddr("10.78.0.1"), netip.MustParseAddr("10.77.0.11")
	tcp := build(&craft.Packet{Src: src, Dst: dst, Proto: packet.ProtoTCP, SrcPort: 1, DstPort: PortLo, Flags: "S"})
	otherPort := build(&craft.Packet{Src: src, Dst: dst, Proto: packet.ProtoUDP, SrcPort: 1, DstPort: PortHi + 1})
	lowPort := build(&craft.Packet{Src: src, Dst: dst, Proto: packet.ProtoUDP, SrcPort: 1, DstPort: PortLo - 1})
	v6 := build(&craft.Packet{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), Proto: packet.ProtoUDP, SrcPort: 1, DstPort: PortLo})
	arp := append(make([]byte, 12), 0x08, 0x06)
	arp = append(arp, make([]byte, 46)...)
	opts := slices.Clone(bench)
	opts[14] = 0x46
	for _, c := range []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"bench frame", bench, xdpDrop},
		{"bench frame, last port", hi, xdpDrop},
		{"tcp", tcp, xdpPass},
		{"udp above the ports", otherPort, xdpPass},
		{"udp below the ports", lowPort, xdpPass},
		{"ipv6", v6, xdpPass},
		{"arp", arp, xdpPass},
		{"ipv4 options", opts, xdpPass},
		{"short", bench[:14+20+7], xdpPass},
	} {
		var before unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &before)
		got, out, err := p.Run(c.frame)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var after unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &after)
		if got != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, c.want)
		}
		// Frames for the socket carry the receive time in front; the
		// others go on untouched.
		if c.want == xdpPass {
			if !bytes.Equal(out, c.frame) {
				t.Errorf("%s: passed frame changed (%d bytes out of %d)", c.name, len(out), len(c.frame))
			}
			continue
		}
		if len(out) != MetaLen+len(c.frame) || !bytes.Equal(out[MetaLen:], c.frame) {
			t.Errorf("%s: %d bytes out, want metadata and the frame (%d)", c.name, len(out), MetaLen+len(c.frame))
			continue
		}
		ts, ok := RxStamp(out, MetaLen)
		if !ok || ts < before.Nano() || ts > after.Nano() {
			t.Errorf("%s: receive stamp %d (%v), want within [%d, %d]", c.name, ts, ok, before.Nano(), after.Nano())
		}
	}
}

// TestRecordAllocs: accounting for a received frame allocates nothing.
func TestRecordAllocs(t *testing.T) {
	macs := []net.HardwareAddr{{2, 0x77, 0, 0, 1, 1}, {2, 0x77, 0, 0, 1, 2}}
	c := NewCounter(macs, 3)
	f := frame(t, macs[1], 1000, 3, 60)
	if n := testing.AllocsPerRun(1000, func() { c.Record(f, 5000) }); n != 0 {
		t.Fatalf("Record allocates %v times per frame", n)
	}
	if c.PerBackend[1] == 0 {
		t.Fatal("nothing recorded")
	}
}

// TestRxStamp: the receive time is read from the metadata in front of a
// frame, and only once (the mark is cleared, so a chunk used again without
// fresh metadata is not read as stamped); no metadata, no stamp.
func TestRxStamp(t *testing.T) {
	chunk := make([]byte, 2048)
	off := 256
	m := chunk[off-MetaLen : off]
	binary.LittleEndian.PutUint64(m[metaTime:], 123456789)
	binary.LittleEndian.PutUint32(m[metaMagic:], MetaMagic)
	if ts, ok := RxStamp(chunk, off); !ok || ts != 123456789 {
		t.Fatalf("stamp %d, %v", ts, ok)
	}
	if _, ok := RxStamp(chunk, off); ok {
		t.Fatal("stamp read twice")
	}
	binary.LittleEndian.PutUint32(chunk[metaMagic:], MetaMagic)
	if _, ok := RxStamp(chunk, MetaLen-1); ok {
		t.Fatal("stamp without room for metadata")
	}
	if _, ok := RxStamp(chunk, len(chunk)+1); ok {
		t.Fatal("stamp past the chunk")
	}
}
