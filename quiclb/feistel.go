package quiclb

// The four-pass construction of the draft, for a block of n octets
// (server ID + nonce, n ≠ 16): the block splits into two halves of
// half = ⌈n/2⌉ octets; when n is odd the middle octet is shared, its high
// nibble the left half's and its low nibble the right half's. Each pass
// encrypts one half, expanded to an AES block (expand), and XORs the
// result into the other:
//
//	right1 = right0 ⊕ AES(expand(left0, 1))
//	left1  = left0  ⊕ AES(expand(right1, 2))
//	right2 = right1 ⊕ AES(expand(left1, 3))
//	left2  = left1  ⊕ AES(expand(right2, 4))
//
// and the connection ID carries left2 ‖ right2. Decoding runs the passes
// backwards and stops after pass 2 when the server ID lies in the left
// half.

// expand fills s.in with half, zeros, then n and pass in the last two
// octets, and encrypts it into s.out.
func (c *Config) expand(s *Scratch, half []byte, n int, pass byte) {
	s.in = [16]byte{}
	copy(s.in[:], half)
	s.in[14] = byte(n)
	s.in[15] = pass
	c.block.Encrypt(s.out[:], s.in[:])
}

// xorHalf is dst ⊕= s.out's first len(dst) octets, then the shared nibble
// cleared: the left half keeps its high nibble, the right half its low one.
func xorHalf(dst []byte, s *Scratch, odd, left bool) {
	for i := range dst {
		dst[i] ^= s.out[i]
	}
	clearNibble(dst, odd, left)
}

func clearNibble(h []byte, odd, left bool) {
	if !odd {
		return
	}
	if left {
		h[len(h)-1] &= 0xf0
	} else {
		h[0] &= 0x0f
	}
}

// split copies block into s.left and s.right, half octets each.
func split(block []byte, s *Scratch) (l, r []byte, odd bool) {
	n := len(block)
	half := (n + 1) / 2
	odd = n%2 == 1
	l, r = s.left[:half], s.right[:half]
	copy(l, block[:half])
	copy(r, block[n-half:])
	clearNibble(l, odd, true)
	clearNibble(r, odd, false)
	return l, r, odd
}

// join writes l ‖ r back over block, the shared nibbles merged.
func join(block, l, r []byte, odd bool) {
	n := len(block)
	half := len(l)
	copy(block[n-half:], r)
	if odd {
		mid := r[0]
		copy(block, l)
		block[half-1] |= mid
		return
	}
	copy(block, l)
}

func (c *Config) feistelEncrypt(block []byte, s *Scratch) {
	n := len(block)
	l, r, odd := split(block, s)
	c.expand(s, l, n, 1)
	xorHalf(r, s, odd, false)
	c.expand(s, r, n, 2)
	xorHalf(l, s, odd, true)
	c.expand(s, l, n, 3)
	xorHalf(r, s, odd, false)
	c.expand(s, r, n, 4)
	xorHalf(l, s, odd, true)
	join(block, l, r, odd)
}

// feistelDecrypt leaves the plaintext's first server-ID octets in s.plain
// (the whole block when the fourth pass is needed, else its left half).
func (c *Config) feistelDecrypt(block []byte, s *Scratch) {
	n := len(block)
	l, r, odd := split(block, s)
	c.expand(s, r, n, 4)
	xorHalf(l, s, odd, true) // left1
	c.expand(s, l, n, 3)
	xorHalf(r, s, odd, false) // right1
	c.expand(s, r, n, 2)
	xorHalf(l, s, odd, true) // left0
	if c.sidLen <= n/2 {
		copy(s.plain[:], l)
		return
	}
	c.expand(s, l, n, 1)
	xorHalf(r, s, odd, false) // right0
	join(s.plain[:n], l, r, odd)
}
