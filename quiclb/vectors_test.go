package quiclb

import (
	"bytes"
	"encoding/hex"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vector is one of the draft's test vectors ("Load Balancer Test
// Vectors"), corrected where the draft misprints it (see below).
type vector struct {
	name       string
	rotation   uint8
	sid, nonce string
	cid        string
}

// The draft's unencrypted vectors. The second is printed as nonce
// 3487d970b and CID 20a350d28b4203487d970b: its hex lost leading zeros.
// Five octets of server ID and a nonce of five octets (03487d970b) make an
// 11-octet ID whose first octet is config rotation 1, length 10: 0x2a.
var plainVectors = []vector{
	{"plain/1", 0, "c4605e", "4504cc4f", "07c4605e4504cc4f"},
	{"plain/2", 1, "350d28b420", "03487d970b", "2a350d28b42003487d970b"},
}

// The draft's encrypted vectors, key 8f95f09245765f80256934e50c66207f.
// The fourth is printed with first octet 0x12, config rotation 0; it is
// config rotation 3's (length 18 either way): 0x72.
var cryptVectors = []vector{
	{"aes/4pass-odd", 0, "ed793a", "ee080dbf", "0720b1d07b359d3c"},
	{"aes/4pass-sid-over-nonce", 1, "ed793a51d49b8f5fab65", "ee080dbf48", "2fcc381bc74cb4fbad2823a3d1f8fed2"},
	{"aes/single", 2, "ed793a51d49b8f5f", "ee080dbf48c0d1e5", "504dd2d05a7b0de9b2b9907afb5ecf8cc3"},
	{"aes/4pass-even-sid-over-half", 3, "ed793a51d49b8f5fab", "ee080dbf48c0d1e55d", "725779c9cc86beb3a3a4a3ca96fce4bfe0cdbc"},
}

const vectorKey = "8f95f09245765f80256934e50c66207f"

func (v vector) config(t *testing.T, key []byte) *Config {
	t.Helper()
	c, err := New(v.rotation, len(v.sid)/2, len(v.nonce)/2, key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDraftVectors: every test vector of the draft decodes to its server
// ID, and encoding its server ID and nonce gives its connection ID.
func TestDraftVectors(t *testing.T) {
	key := unhex(t, vectorKey)
	run := func(vs []vector, key []byte) {
		for _, v := range vs {
			t.Run(v.name, func(t *testing.T) {
				c := v.config(t, key)
				cid := unhex(t, v.cid)
				var s Scratch
				sid, err := c.ServerID(cid, &s)
				if err != nil || !bytes.Equal(sid, unhex(t, v.sid)) {
					t.Errorf("ServerID(%s) = %x, %v; want %s", v.cid, sid, err, v.sid)
				}
				if RotationOf(cid[0]) != v.rotation {
					t.Errorf("first octet %#x: config rotation %d, want %d", cid[0], RotationOf(cid[0]), v.rotation)
				}
				got, err := c.Encode(nil, unhex(t, v.sid), unhex(t, v.nonce), nil)
				if err != nil || !bytes.Equal(got, cid) {
					t.Errorf("Encode = %x, %v; want %s", got, err, v.cid)
				}
			})
		}
	}
	run(plainVectors, nil)
	run(cryptVectors, key)
}

// TestDraftEncryptionExample: the draft's worked example of the four-pass
// encryption (an odd block of 7 octets, its middle octet shared by the
// halves), with its own key.
func TestDraftEncryptionExample(t *testing.T) {
	c, err := New(0, 3, 4, unhex(t, "fdf726a9893ec05c0632d3956680baf0"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Encode(nil, unhex(t, "31441a"), unhex(t, "9c69c275"), nil)
	if want := unhex(t, "0767947d29be054a"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Encode = %x, %v; want %x", got, err, want)
	}
	var s Scratch
	if sid, err := c.ServerID(got, &s); err != nil || !bytes.Equal(sid, unhex(t, "31441a")) {
		t.Errorf("ServerID = %x, %v", sid, err)
	}
	if c.Passes() != 3 {
		t.Errorf("Passes = %d: a 3-octet server ID in a 7-octet block needs 3", c.Passes())
	}
}
