package quiclb

import (
	"crypto/aes"
	"errors"
	"fmt"
)

// Scratch is the working space of one decoder: the AES input and output
// and the Feistel halves. A worker keeps one and passes it to every call,
// so that decoding allocates nothing; it must not be shared between
// goroutines.
type Scratch struct {
	in, out     [aes.BlockSize]byte
	left, right [aes.BlockSize]byte
	plain       [MaxBlockLen]byte
}

// ErrShort is a connection ID shorter than its configuration's.
var ErrShort = errors.New("connection ID shorter than the configuration's")

// ServerID decodes the server ID that cid (from its first octet on)
// carries under this configuration. The result points into cid (in the
// clear) or into s, and is valid until s is used again. It fails only when
// cid is too short; it does not check the first octet's config rotation,
// which chose c.
func (c *Config) ServerID(cid []byte, s *Scratch) ([]byte, error) {
	n := c.sidLen + c.nonceLen
	if len(cid) < 1+n {
		return nil, ErrShort
	}
	block := cid[1 : 1+n]
	switch {
	case c.block == nil:
		return block[:c.sidLen], nil
	case n == aes.BlockSize:
		c.block.Decrypt(s.plain[:], block)
		return s.plain[:c.sidLen], nil
	default:
		c.feistelDecrypt(block, s)
		return s.plain[:c.sidLen], nil
	}
}

// Encode writes a connection ID of this configuration for server ID sid
// and nonce into dst, followed by extra (the server's own bytes), and
// returns it. The first octet carries the config rotation and the length
// of what follows it. It allocates when dst is too small.
func (c *Config) Encode(dst, sid, nonce, extra []byte) ([]byte, error) {
	if len(sid) != c.sidLen || len(nonce) != c.nonceLen {
		return nil, fmt.Errorf("server ID of %d and nonce of %d octets: this configuration wants %d and %d", len(sid), len(nonce), c.sidLen, c.nonceLen)
	}
	n := c.sidLen + c.nonceLen
	total := 1 + n + len(extra)
	if total > 1+MaxBlockLen {
		return nil, fmt.Errorf("connection ID of %d octets: QUIC allows at most %d", total, 1+MaxBlockLen)
	}
	if cap(dst) < total {
		dst = make([]byte, total)
	}
	dst = dst[:total]
	dst[0] = c.rotation<<5 | byte(total-1)&0x1f
	block := dst[1 : 1+n]
	copy(block, sid)
	copy(block[c.sidLen:], nonce)
	copy(dst[1+n:], extra)
	switch {
	case c.block == nil:
	case n == aes.BlockSize:
		c.block.Encrypt(block, block)
	default:
		var s Scratch
		c.feistelEncrypt(block, &s)
	}
	return dst, nil
}
