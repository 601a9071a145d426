package quiclb

import (
	"bytes"
	"testing"
)

// FuzzServerID: any bytes, under any configuration, decode without a
// panic or a read past the ID, to a server ID of the configuration's
// length; and any server ID and nonce encode to an ID that decodes back.
func FuzzServerID(f *testing.F) {
	f.Add(uint8(3), uint8(4), true, []byte{0x07, 0x20, 0xb1, 0xd0, 0x7b, 0x35, 0x9d, 0x3c})
	f.Add(uint8(8), uint8(8), true, make([]byte, 17))
	f.Add(uint8(10), uint8(5), false, []byte{0x2f})
	f.Fuzz(func(t *testing.T, sl, nl uint8, keyed bool, b []byte) {
		var key []byte
		if keyed {
			key = testKey
		}
		c, err := New(0, int(sl), int(nl), key)
		if err != nil {
			return
		}
		var s Scratch
		// A copy with no room past its end: a read beyond it panics.
		cid := bytes.Clone(b)
		sid, err := c.ServerID(cid[:len(cid):len(cid)], &s)
		if err == nil && len(sid) != c.ServerIDLen() {
			t.Fatalf("%v: server ID of %d octets", c, len(sid))
		}
		if err != nil && len(b) >= c.CIDLen() {
			t.Fatalf("%v: %d octets refused: %v", c, len(b), err)
		}
		if !bytes.Equal(cid, b) {
			t.Fatal("ServerID wrote into the packet")
		}
		// The same bytes as server ID and nonce round-trip.
		if len(b) >= c.ServerIDLen()+c.NonceLen() {
			want := b[:c.ServerIDLen()]
			id, err := c.Encode(nil, want, b[c.ServerIDLen():c.ServerIDLen()+c.NonceLen()], nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := c.ServerID(id, &s); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%v: round trip of %x gave %x, %v", c, want, got, err)
			}
		}
		_, _ = DCID(b[:len(b):len(b)])
	})
}
