package flowsync

import (
	"bytes"
	"testing"
)

// FuzzDecode feeds arbitrary datagrams to the receive path of a Syncer
// whose peer the fuzzer speaks for, and arbitrary frames to the pull
// reader: nothing panics, and nothing but a datagram sealed with the key
// is applied.
func FuzzDecode(f *testing.F) {
	snap := testSnapshot(1, 2, 0, 1, 300)
	a := newNode(f, snap, 1024, keyA)
	b := newNode(f, snap, 1024, keyA)
	b.peerWith(a)
	// A fixed sender, so that the seeds are the same in every process of
	// the fuzzer (any sender ID works with the key).
	const sender = 42
	akeys, _ := newKeyring([][32]byte{keyA}, sender)
	wall := int64(1_700_000_000_000)
	b.s.wall = func() int64 { return wall }
	recs := sampleRecords()
	recs[0].FleetID = knownRecord(f, snap).FleetID
	f.Add(sealRecords(akeys, sender, 1, wall, recs))
	f.Add(sealRecords(akeys, sender, 2, wall, nil))
	f.Add([]byte("XLBF\x01\x01"))
	f.Add(bytes.Repeat([]byte{0xff}, 100))
	f.Fuzz(func(t *testing.T, data []byte) {
		msg := append([]byte(nil), data...)
		r := b.s.receive(msg, a.s.addr())
		if r >= numReasons {
			t.Fatalf("reason %d", r)
		}
		parseHeader(data)
		decodeRecords(data, make([]Record, 0, 8))
		readFrame(bytes.NewReader(data), make([]byte, 256))
		if r == reasonNone && len(data) >= headerLen+tagLen {
			// It authenticated: it must be one of the seeds sealed here.
			h, _ := parseHeader(data)
			if h.sender != sender || h.seq > 2 {
				t.Fatalf("a datagram not sealed with the key was accepted: %x", data)
			}
		}
	})
}
