package quiclb

import "testing"

// BenchmarkServerID: what the balancer spends decoding one connection ID,
// per shape (lbbench core measures it inside the engine).
func BenchmarkServerID(b *testing.B) {
	for _, tc := range []struct {
		name     string
		sid, non int
		key      []byte
	}{
		{"plaintext", 3, 4, nil},
		{"aes-single-pass", 8, 8, testKey},
		{"aes-4pass-3rounds", 3, 4, testKey},
		{"aes-4pass-4rounds", 10, 5, testKey},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := New(1, tc.sid, tc.non, tc.key)
			if err != nil {
				b.Fatal(err)
			}
			cid, _ := c.Encode(nil, make([]byte, tc.sid), make([]byte, tc.non), nil)
			var s Scratch
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.ServerID(cid, &s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
