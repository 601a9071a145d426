package quiclb

import (
	"bytes"
	"strings"
	"testing"
)

var testKey = []byte("0123456789abcdef")

// everyShape calls fn with every configuration the draft allows: each
// server ID and nonce length, in the clear and encrypted.
func everyShape(t *testing.T, fn func(t *testing.T, c *Config)) {
	for _, key := range [][]byte{nil, testKey} {
		for sl := MinServerIDLen; sl <= MaxServerIDLen; sl++ {
			for nl := MinNonceLen; sl+nl <= MaxBlockLen; nl++ {
				c, err := New(uint8(sl%7), sl, nl, key)
				if err != nil {
					t.Fatalf("New(%d, %d): %v", sl, nl, err)
				}
				fn(t, c)
			}
		}
	}
}

// TestRoundTrip: for every shape, a server ID encoded with any nonce (and
// the server's own bytes after it) decodes back to itself; an encrypted
// ID does not show its server ID; the first octet names the rotation and
// the length.
func TestRoundTrip(t *testing.T) {
	everyShape(t, func(t *testing.T, c *Config) {
		var s Scratch
		for i := 0; i < 16; i++ {
			sid := bytes.Repeat([]byte{byte(0x11 * i)}, c.ServerIDLen())
			sid[0] ^= byte(i)
			nonce := bytes.Repeat([]byte{byte(i*7 + 3)}, c.NonceLen())
			extra := []byte{0xee}[:i%2*min(1, 20-c.CIDLen())]
			cid, err := c.Encode(nil, sid, nonce, extra)
			if err != nil {
				t.Fatal(err)
			}
			if RotationOf(cid[0]) != c.Rotation() || int(cid[0]&0x1f) != len(cid)-1 {
				t.Fatalf("%v: first octet %#x for a %d-octet ID", c, cid[0], len(cid))
			}
			got, err := c.ServerID(cid, &s)
			if err != nil || !bytes.Equal(got, sid) {
				t.Fatalf("%v: ServerID(Encode(%x)) = %x, %v", c, sid, got, err)
			}
			if c.Encrypted() && bytes.Contains(cid[1:], sid) && len(sid) > 2 {
				t.Errorf("%v: encrypted ID %x shows its server ID %x", c, cid, sid)
			}
		}
	})
}

// TestNonceChangesCiphertext: with a key, two nonces give IDs that differ
// in the server ID's place too (an observer cannot group a server's IDs).
func TestNonceChangesCiphertext(t *testing.T) {
	everyShape(t, func(t *testing.T, c *Config) {
		if !c.Encrypted() {
			return
		}
		sid := make([]byte, c.ServerIDLen())
		a, _ := c.Encode(nil, sid, bytes.Repeat([]byte{1}, c.NonceLen()), nil)
		b, _ := c.Encode(nil, sid, bytes.Repeat([]byte{2}, c.NonceLen()), nil)
		if bytes.Equal(a[1:1+len(sid)], b[1:1+len(sid)]) {
			t.Errorf("%v: nonces 01… and 02… give the same leading octets %x", c, a[1:1+len(sid)])
		}
	})
}

// TestServerIDShort: an ID shorter than the configuration's is refused,
// whatever its shape.
func TestServerIDShort(t *testing.T) {
	everyShape(t, func(t *testing.T, c *Config) {
		var s Scratch
		cid := make([]byte, c.CIDLen()-1)
		if _, err := c.ServerID(cid, &s); err != ErrShort {
			t.Errorf("%v: ServerID of %d octets: %v, want ErrShort", c, len(cid), err)
		}
	})
}

// TestNewLimits: what New refuses, and why.
func TestNewLimits(t *testing.T) {
	for _, tc := range []struct {
		rot      uint8
		sid, non int
		key      []byte
		says     string
	}{
		{7, 3, 4, nil, "config rotation 7"},
		{0, 0, 4, nil, "server ID length 0"},
		{0, 16, 4, nil, "server ID length 16"},
		{0, 3, 3, nil, "nonce length 3"},
		{0, 10, 10, nil, "at most 19 (here 20)"},
		{0, 3, 4, []byte("short"), "key of 5 octets"},
	} {
		if _, err := New(tc.rot, tc.sid, tc.non, tc.key); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("New(%d, %d, %d, %q) = %v, want %q", tc.rot, tc.sid, tc.non, tc.key, err, tc.says)
		}
	}
	if _, err := New(6, 15, 4, testKey); err != nil {
		t.Errorf("the largest shape: %v", err)
	}
}

// TestEncodeRefuses: wrong lengths, or more than QUIC's 20 octets.
func TestEncodeRefuses(t *testing.T) {
	c, _ := New(1, 3, 4, nil)
	if _, err := c.Encode(nil, []byte{1, 2}, make([]byte, 4), nil); err == nil {
		t.Error("a 2-octet server ID for a 3-octet configuration was encoded")
	}
	if _, err := c.Encode(nil, []byte{1, 2, 3}, make([]byte, 4), make([]byte, 13)); err == nil {
		t.Error("a 21-octet connection ID was encoded")
	}
}

// TestPasses: how many AES operations the balancer spends per shape.
func TestPasses(t *testing.T) {
	for _, tc := range []struct {
		sid, non int
		key      []byte
		want     int
	}{
		{3, 4, nil, 0}, {8, 8, testKey, 1}, {3, 4, testKey, 3}, {4, 4, testKey, 3}, {5, 4, testKey, 4}, {10, 5, testKey, 4},
	} {
		c, _ := New(0, tc.sid, tc.non, tc.key)
		if got := c.Passes(); got != tc.want {
			t.Errorf("%v: Passes = %d, want %d", c, got, tc.want)
		}
	}
}

// TestServerIDDoesNotAllocate: the data plane's call allocates nothing.
func TestServerIDDoesNotAllocate(t *testing.T) {
	everyShape(t, func(t *testing.T, c *Config) {
		var s Scratch
		cid, _ := c.Encode(nil, make([]byte, c.ServerIDLen()), make([]byte, c.NonceLen()), nil)
		if n := testing.AllocsPerRun(10, func() { _, _ = c.ServerID(cid, &s) }); n != 0 {
			t.Errorf("%v: %v allocations per ServerID", c, n)
		}
	})
}
