package packet

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/google/gopacket/layers"
)

func TestSumRFC1071Example(t *testing.T) {
	// RFC 1071 section 3: the sum of these bytes is ddf2.
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if got := Sum(b, 0); got != 0xddf2 {
		t.Fatalf("Sum = %#04x, want 0xddf2", got)
	}
	if got := Checksum(b, 0); got != ^uint16(0xddf2) {
		t.Fatalf("Checksum = %#04x", got)
	}
}

func TestChecksumIPv4Header(t *testing.T) {
	// A well-known IPv4 header; its checksum field (bytes 10-11) is b861.
	h := []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00,
		0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if got := Checksum(h, 0); got != 0xb861 {
		t.Fatalf("Checksum = %#04x, want 0xb861", got)
	}
	binary.BigEndian.PutUint16(h[10:], 0xb861)
	if got := Checksum(h, 0); got != 0 {
		t.Fatalf("Checksum over a valid header = %#04x, want 0", got)
	}
}

func TestChecksumMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 300; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if got, want := Checksum(b, 0), refChecksum(b); got != want {
			t.Fatalf("len %d: Checksum = %#04x, reference %#04x", n, got, want)
		}
		// In pieces: every piece but the last of even length.
		k := (r.IntN(n+1) / 2) * 2
		if got, want := Sum(b[k:], Sum(b[:k], 0)), Sum(b, 0); got != want {
			t.Fatalf("len %d split %d: %#04x != %#04x", n, k, got, want)
		}
	}
}

// TestPseudoHeaderSum checks the pseudo-header against checksums gopacket
// computed for real TCP segments.
func TestPseudoHeaderSum(t *testing.T) {
	ip := ip4L(layers.IPProtocolTCP)
	f4 := serialize(t, ethL(layers.EthernetTypeIPv4), ip, tcpL(ip, 1, 2), payload(33))
	ip6 := ip6L(layers.IPProtocolTCP)
	f6 := serialize(t, ethL(layers.EthernetTypeIPv6), ip6, tcpL(ip6, 1, 2), payload(33))
	for _, f := range [][]byte{f4, f6} {
		var p Parsed
		if err := Parse(f, &p); err != nil {
			t.Fatal(err)
		}
		seg := f[p.L4Off : p.L3Off+p.IPLen]
		src, dst := p.Src[12:], p.Dst[12:]
		if !p.IsV4() {
			src, dst = p.Src[:], p.Dst[:]
		}
		if c := Checksum(seg, PseudoHeaderSum(ProtoTCP, src, dst, uint32(len(seg)))); c != 0 {
			t.Errorf("IPv%d: checksum over a gopacket segment = %#04x, want 0", p.IPVersion, c)
		}
	}
}

// TestChecksumUpdate checks RFC 1624 incremental updates against a full
// recomputation.
func TestChecksumUpdate(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 10000; i++ {
		h := make([]byte, 40)
		for j := range h {
			h[j] = byte(r.Uint32())
		}
		check := Checksum(h, 0)

		w := r.IntN(len(h)/2) * 2
		old := binary.BigEndian.Uint16(h[w:])
		nw := uint16(r.Uint32())
		binary.BigEndian.PutUint16(h[w:], nw)
		if got, want := ChecksumUpdate16(check, old, nw), Checksum(h, 0); got != want {
			t.Fatalf("ChecksumUpdate16 = %#04x, recomputed %#04x", got, want)
		}

		check = Checksum(h, 0)
		n := 4
		if r.IntN(2) == 0 {
			n = 16
		}
		at := r.IntN((len(h)-n)/2+1) * 2
		oldAddr := append([]byte(nil), h[at:at+n]...)
		for j := at; j < at+n; j++ {
			h[j] = byte(r.Uint32())
		}
		if got, want := ChecksumUpdate(check, oldAddr, h[at:at+n]), Checksum(h, 0); got != want {
			t.Fatalf("ChecksumUpdate(%d bytes) = %#04x, recomputed %#04x", n, got, want)
		}
	}
}

func TestSumAdd(t *testing.T) {
	b := payload(100)
	if got, want := SumAdd(Sum(b[:40], 0), Sum(b[40:], 0)), Sum(b, 0); got != want {
		t.Fatalf("SumAdd = %#04x, want %#04x", got, want)
	}
}

func BenchmarkChecksum1500(b *testing.B) {
	buf := payload(1500)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		_ = Checksum(buf, 0)
	}
}
