package flowsync

import (
	"testing"
	"time"
)

// BenchmarkEncode: records encoded and sealed into datagrams per second
// on one core (IPv4 5T records, 49 a datagram).
func BenchmarkEncode(b *testing.B) {
	kr, _ := newKeyring([][32]byte{keyA}, 1)
	r := sampleRecords()[2]
	e := newEncoder(maxPayload)
	seq := uint64(0)
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		if !e.add(&r) {
			seq++
			h := header{kind: kindRecords, keyID: kr.sealID(), sender: 1, seq: seq, wall: 1}
			e.seal(kr.seal, &h, nil)
			e.reset()
			e.add(&r)
		}
		n++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkApply: records received, opened, checked and merged per second
// on one core (full datagrams of IPv4 5T records; the table is the fake
// until conntrack's Merge lands).
func BenchmarkApply(b *testing.B) {
	snap := testSnapshot(1, 2, 0, 1, 300)
	a := newNode(b, snap, 1<<20, keyA)
	rx := newNode(b, snap, 1<<20, keyA)
	rx.peerWith(a)
	wall := time.Now().UnixMilli()
	rx.s.wall = func() int64 { return wall }
	fleet := backendOf(b, snap, svcWeb, webIPs[0]).FleetID
	akeys := a.s.state.Load().keys
	// 64 distinct datagrams, sealed again with new sequence numbers.
	e := newEncoder(maxPayload)
	per := 0
	for i := 0; e.add(&Record{Key: key5("192.0.2.1", "203.0.113.10", uint16(i), 443, 0), FleetID: fleet, AgeMs: 10}); i++ {
		per++
	}
	body := append([]byte(nil), e.buf[headerLen:e.n]...)
	msg := make([]byte, maxPayload)
	seq := uint64(0)
	recs := 0
	b.ReportAllocs()
	for b.Loop() {
		seq++
		e.reset()
		e.putBody(body)
		e.count = per
		h := header{kind: kindRecords, keyID: akeys.sealID(), sender: a.s.id, seq: seq, wall: wall}
		m := msg[:copy(msg, e.seal(akeys.seal, &h, nil))]
		if r := rx.s.receive(m, a.s.addr()); r != reasonNone {
			b.Fatal(r)
		}
		recs += per
	}
	b.ReportMetric(float64(recs)/b.Elapsed().Seconds(), "records/s")
}
