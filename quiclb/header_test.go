package quiclb

import (
	"bytes"
	"testing"
)

// TestDCID: which packets carry a connection ID the server issued, and
// where it is.
func TestDCID(t *testing.T) {
	cid := []byte{0x07, 1, 2, 3, 4, 5, 6, 7}
	long := func(first byte, version uint32, dcid []byte) []byte {
		p := []byte{first, byte(version >> 24), byte(version >> 16), byte(version >> 8), byte(version), byte(len(dcid))}
		p = append(p, dcid...)
		return append(p, 0, 0, 0) // SCID length and more
	}
	for _, tc := range []struct {
		name string
		p    []byte
		kind Kind
		dcid []byte
	}{
		{"short", append([]byte{0x41}, append(cid, 9, 9)...), Short, append(append([]byte{}, cid...), 9, 9)},
		{"v1 handshake", long(0xe0, version1, cid), ServerChosen, cid},
		{"v1 initial", long(0xc0, version1, cid), ClientChosen, cid},
		{"v1 0-RTT", long(0xd0, version1, cid), ClientChosen, cid},
		{"v1 retry", long(0xf0, version1, cid), ClientChosen, cid},
		{"v2 handshake", long(0xf0, version2, cid), ServerChosen, cid},
		{"v2 initial", long(0xd0, version2, cid), ClientChosen, cid},
		{"unknown version", long(0xe0, 0x1a2a3a4a, cid), ClientChosen, cid},
		{"fixed bit clear", []byte{0x01, 2, 3}, NotQUIC, nil},
		{"one octet", []byte{0x41}, NotQUIC, nil},
		{"long cut in the version", []byte{0xc0, 0, 0}, NotQUIC, nil},
		{"long DCID over 20", long(0xe0, version1, make([]byte, 21)), NotQUIC, nil},
		{"long DCID past the end", long(0xe0, version1, cid)[:10], NotQUIC, nil},
	} {
		dcid, k := DCID(tc.p)
		if k != tc.kind || !bytes.Equal(dcid, tc.dcid) {
			t.Errorf("%s: DCID = %x, %v; want %x, %v", tc.name, dcid, k, tc.dcid, tc.kind)
		}
	}
}
