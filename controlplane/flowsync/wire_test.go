package flowsync

import (
	"net/netip"
	"testing"

	"xlb/conntrack"
	"xlb/dataplane"
)

func sampleRecords() []Record {
	v4s, v4d := dataplane.Addr16(netip.MustParseAddr("192.0.2.7")), dataplane.Addr16(netip.MustParseAddr("198.51.100.1"))
	v6s, v6d := dataplane.Addr16(netip.MustParseAddr("2001:db8::7")), dataplane.Addr16(netip.MustParseAddr("2001:db8:1::1"))
	var out []Record
	for i, k := range []conntrack.Key{
		{Src: v4s, Dst: v4d, Kind: conntrack.Kind2T},
		{Src: v4s, Dst: v4d, Proto: 17, Kind: conntrack.Kind3T},
		{Src: v4s, Dst: v4d, SrcPort: 40000, DstPort: 443, Proto: 6, Kind: conntrack.Kind5T},
		{Src: v6s, Dst: v6d, Kind: conntrack.Kind2T},
		{Src: v6s, Dst: v6d, Proto: 58, Kind: conntrack.Kind3T},
		{Src: v6s, Dst: v6d, SrcPort: 65535, DstPort: 1, Proto: 132, Kind: conntrack.Kind5T},
		// An IPv4-mapped source with a real IPv6 destination: 16-byte form.
		{Src: v4s, Dst: v6d, SrcPort: 1, DstPort: 2, Proto: 6, Kind: conntrack.Kind5T},
	} {
		out = append(out, Record{Key: k, FleetID: 0x0123456789abcdef ^ uint64(i), Side: uint8(i % 2), AgeMs: uint32(i) * 1e6})
	}
	return out
}

// sealRecords builds one records datagram from sender self under kr.
func sealRecords(kr *keyring, self, seq uint64, wall int64, recs []Record) []byte {
	e := newEncoder(maxPayload)
	for i := range recs {
		if !e.add(&recs[i]) {
			panic("does not fit")
		}
	}
	h := header{kind: kindRecords, keyID: kr.sealID(), sender: self, seq: seq, wall: wall}
	return append([]byte(nil), e.seal(kr.seal, &h, nil)...)
}

func TestWire_RoundTrip(t *testing.T) {
	const self = 0xfeedface
	kr, err := newKeyring([][32]byte{keyA}, self)
	if err != nil {
		t.Fatal(err)
	}
	recs := sampleRecords()
	msg := sealRecords(kr, self, 7, 1_700_000_000_123, recs)
	if len(msg) > maxPayload {
		t.Fatalf("%d bytes", len(msg))
	}
	h, r := parseHeader(msg)
	if r != reasonNone || h.kind != kindRecords || h.sender != self || h.seq != 7 || h.wall != 1_700_000_000_123 || h.keyID != keyID(&keyA) {
		t.Fatalf("header %+v %v", h, r)
	}
	// Another process holding the key opens it.
	rx, _ := newKeyring([][32]byte{keyA}, 99)
	var sc scratch
	body, ok := rx.open(&sc, &h, msg, nil)
	if !ok {
		t.Fatal("does not open")
	}
	got, ok := decodeRecords(body, make([]Record, 0, maxRecordsPerDatagram))
	if !ok || len(got) != len(recs) {
		t.Fatalf("decoded %d of %d, ok %v", len(got), len(recs), ok)
	}
	for i := range recs {
		if got[i] != recs[i] {
			t.Errorf("record %d: got %+v\nwant %+v", i, got[i], recs[i])
		}
	}
}

// TestWire_Sizes reports the bytes each flow costs on the wire.
func TestWire_Sizes(t *testing.T) {
	for _, c := range []struct {
		name     string
		rec      Record
		wantLen  int
		wantPerD int
	}{
		{"v4 2T", sampleRecords()[0], 22, 61},
		{"v4 3T", sampleRecords()[1], 23, 58},
		{"v4 5T", sampleRecords()[2], 27, 49},
		{"v6 5T", sampleRecords()[5], 51, 26},
	} {
		if n := recordLen(&c.rec.Key); n != c.wantLen {
			t.Errorf("%s: record of %d bytes, want %d", c.name, n, c.wantLen)
		}
		e := newEncoder(maxPayload)
		for e.add(&c.rec) {
		}
		if e.count != c.wantPerD {
			t.Errorf("%s: %d records a datagram, want %d", c.name, e.count, c.wantPerD)
		}
		wire := e.n + tagLen + 28 // + IPv4 and UDP headers
		t.Logf("%s: %d B/record, %d records/datagram, %.1f B/flow on the wire (IPv4+UDP included)",
			c.name, c.wantLen, e.count, float64(wire)/float64(e.count))
	}
}

func TestWire_NoAllocs(t *testing.T) {
	kr, _ := newKeyring([][32]byte{keyA}, 1)
	recs := sampleRecords()
	e := newEncoder(maxPayload)
	dst := make([]Record, 0, maxRecordsPerDatagram)
	buf := make([]byte, maxPayload)
	var sc scratch
	seq := uint64(0)
	allocs := testing.AllocsPerRun(100, func() {
		e.reset()
		for i := range recs {
			e.add(&recs[i])
		}
		seq++
		h := header{kind: kindRecords, keyID: kr.sealID(), sender: 1, seq: seq, wall: 1}
		msg := buf[:copy(buf, e.seal(kr.seal, &h, nil))]
		h2, _ := parseHeader(msg)
		body, ok := sc.open(kr.seal, &h2, msg, nil)
		if !ok {
			panic("open")
		}
		if _, ok := decodeRecords(body, dst); !ok {
			panic("decode")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per datagram sealed and opened", allocs)
	}
}

func TestWire_MalformedRecords(t *testing.T) {
	r := sampleRecords()[2]
	var b [maxRecordLen]byte
	n, _ := putRecord(b[:], &r)
	dst := make([]Record, 0, 4)
	for cut := 1; cut < n; cut++ {
		if _, ok := decodeRecords(b[:cut], dst); ok {
			t.Errorf("a record cut to %d of %d bytes decoded", cut, n)
		}
	}
	for _, f := range []byte{0x03, 0x08, 0x80, 0x07} {
		c := b
		c[0] = f
		if _, ok := decodeRecords(c[:n], dst); ok {
			t.Errorf("flags %#x decoded", f)
		}
	}
	// More records than the destination holds: refused, not overrun.
	many := make([]byte, 0, 5*n)
	for range 5 {
		many = append(many, b[:n]...)
	}
	if _, ok := decodeRecords(many, dst); ok {
		t.Error("5 records into room for 4")
	}
}

func TestKeys_DerivedPerSender(t *testing.T) {
	kr, _ := newKeyring([][32]byte{keyA, keyB}, 1)
	if kr.index(keyID(&keyA)) != 0 || kr.index(keyID(&keyB)) != 1 || kr.index(keyID(&keyC)) != -1 {
		t.Fatal("key IDs")
	}
	if _, err := newKeyring(nil, 1); err == nil {
		t.Error("no key accepted")
	}
	if _, err := newKeyring([][32]byte{keyA, keyB, keyC}, 1); err == nil {
		t.Error("three keys accepted")
	}
	// Two senders under one key: different AEAD keys, so the same
	// sequence number never means the same nonce under the same key.
	a1, a2 := deriveAEAD(&keyA, 1), deriveAEAD(&keyA, 2)
	var nonce [12]byte
	if string(a1.Seal(nil, nonce[:], []byte("x"), nil)) == string(a2.Seal(nil, nonce[:], []byte("x"), nil)) {
		t.Error("two senders seal alike")
	}
	// A sender's AEAD is cached once a message opened, and only then.
	tx, _ := newKeyring([][32]byte{keyA}, 5)
	msg := sealRecords(tx, 5, 1, 1, nil)
	h, _ := parseHeader(msg)
	bad := append([]byte(nil), msg...)
	bad[len(bad)-1] ^= 1
	var sc scratch
	if _, ok := kr.open(&sc, &h, bad, nil); ok || len(kr.cache) != 0 {
		t.Fatalf("a forged message opened or was cached (%d cached)", len(kr.cache))
	}
	if _, ok := kr.open(&sc, &h, msg, nil); !ok || len(kr.cache) != 1 {
		t.Fatalf("opened %v, %d cached", ok, len(kr.cache))
	}
	cached := kr.cache[cacheKey{0, 5}]
	msg2 := sealRecords(tx, 5, 2, 1, nil)
	h2, _ := parseHeader(msg2)
	if _, ok := kr.open(&sc, &h2, msg2, nil); !ok || kr.cache[cacheKey{0, 5}] != cached {
		t.Fatal("derived again while cached")
	}
	// The cache is bounded.
	for i := range uint64(2 * maxCachedAEADs) {
		tx, _ := newKeyring([][32]byte{keyA}, 100+i)
		m := sealRecords(tx, 100+i, 1, 1, nil)
		h, _ := parseHeader(m)
		kr.open(&sc, &h, m, nil)
	}
	if len(kr.cache) > maxCachedAEADs {
		t.Errorf("%d cached", len(kr.cache))
	}
	// A reload keeps what it can.
	kr2, _ := newKeyring([][32]byte{keyB, keyA}, 1)
	kr2.carryCache(kr)
	for ck := range kr2.cache {
		if kr2.keys[ck.key] != keyA {
			t.Fatal("carried an AEAD to the wrong key")
		}
	}
	if len(kr2.cache) == 0 {
		t.Error("nothing carried")
	}
}

func TestReplay_Window(t *testing.T) {
	var w window
	acc := func(seq uint64) reason {
		r := w.check(seq)
		if r == reasonNone {
			w.accept(seq)
		}
		return r
	}
	for _, c := range []struct {
		seq  uint64
		want reason
	}{
		{0, reasonStale}, {1, reasonNone}, {1, reasonRepeat}, {3, reasonNone}, {2, reasonNone}, {2, reasonRepeat},
		{1000, reasonNone}, {4, reasonNone}, {1026, reasonNone}, {2, reasonStale}, {3, reasonRepeat},
		{1000, reasonRepeat}, {5000, reasonNone}, {1026, reasonStale}, {3976, reasonStale}, {3977, reasonNone},
		{3977, reasonRepeat}, {4999, reasonNone}, {5000, reasonRepeat}, {5001, reasonNone},
	} {
		if got := acc(c.seq); got != c.want {
			t.Errorf("seq %d: %v, want %v", c.seq, got, c.want)
		}
	}
}

func TestReplay_SendersBoundedAndClock(t *testing.T) {
	var s senders
	const now = 1_700_000_000_000
	if r := s.check(1, 1, now-maxClockSkewMs-1, now); r != reasonStale {
		t.Errorf("a clock 30 s behind: %v", r)
	}
	if r := s.check(1, 1, now+maxClockSkewMs+1, now); r != reasonStale {
		t.Errorf("a clock 30 s ahead: %v", r)
	}
	if r := s.check(1, 1, now-maxClockSkewMs, now); r != reasonNone {
		t.Errorf("a clock 30 s behind exactly: %v", r)
	}
	for i := range uint64(3 * maxSenders) {
		s.check(10+i, 1, now, now+int64(i))
	}
	if len(s.m) > maxSenders {
		t.Errorf("%d senders kept", len(s.m))
	}
	if s.m[10+3*maxSenders-1] == nil {
		t.Error("the latest sender was evicted")
	}
}
