package dataplane_test

import (
	"encoding/binary"
	"testing"

	"xlb/controlplane/cptest"
	"xlb/dataplane"
)

// TestEncapOuterIPv4IDsDiffer: an outer IPv4 header that may be fragmented
// (inner IPv4 without DF) needs identifications that do not repeat from one
// datagram to the next (RFC 6864), or the backend's reassembly could splice
// two packets together. Consecutive IPIP frames of one worker differ.
func TestEncapOuterIPv4IDsDiffer(t *testing.T) {
	r := cptest.New(t, cptest.Testdata(t, "encap_ipid.toml")) // IPIP to one IPv4 backend
	seen := map[uint16]bool{}
	for i := range 100 {
		res := r.Send(cptest.TCP("198.51.100.7", "192.0.2.10", uint16(40000+i), 80, "S"))
		if res.Verdict != dataplane.VerdictForward {
			t.Fatalf("frame %d: %v %v", i, res.Verdict, res.Reason)
		}
		outer := res.Out[14:]
		if outer[0] != 0x45 || outer[9] != 4 {
			t.Fatalf("frame %d: not IPv4-in-IPv4: % x", i, outer[:20])
		}
		id := binary.BigEndian.Uint16(outer[4:6])
		if seen[id] {
			t.Fatalf("frame %d: outer IPv4 ID %d repeats", i, id)
		}
		seen[id] = true
	}
}
