package quiclb

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"
)

// Limits of the draft: connection IDs of QUIC version 1 are at most 20
// octets, one of which is the first octet.
const (
	MaxRotation    = 6  // 0b111 is reserved for unroutable IDs
	Unroutable     = 7  // the config rotation of a server without configuration
	MinServerIDLen = 1  //
	MinNonceLen    = 4  //
	MaxBlockLen    = 19 // server ID + nonce
	MaxServerIDLen = MaxBlockLen - MinNonceLen
	KeyLen         = 16 // AES-128
)

// Config is one QUIC-LB configuration: what the servers that use it put in
// their connection IDs. It is read-only once made and safe to share
// between goroutines.
type Config struct {
	rotation uint8
	sidLen   int
	nonceLen int
	block    cipher.Block // nil: the block is in the clear
}

// New checks and makes a configuration. key is nil for plaintext IDs, else
// KeyLen octets.
func New(rotation uint8, serverIDLen, nonceLen int, key []byte) (*Config, error) {
	if rotation > MaxRotation {
		return nil, fmt.Errorf("config rotation %d: want 0 to %d (%d marks unroutable IDs)", rotation, MaxRotation, Unroutable)
	}
	if serverIDLen < MinServerIDLen || serverIDLen > MaxServerIDLen {
		return nil, fmt.Errorf("server ID length %d: want %d to %d octets", serverIDLen, MinServerIDLen, MaxServerIDLen)
	}
	if nonceLen < MinNonceLen || serverIDLen+nonceLen > MaxBlockLen {
		return nil, fmt.Errorf("nonce length %d: want at least %d octets, and server ID + nonce at most %d (here %d)", nonceLen, MinNonceLen, MaxBlockLen, serverIDLen+nonceLen)
	}
	c := &Config{rotation: rotation, sidLen: serverIDLen, nonceLen: nonceLen}
	if key != nil {
		if len(key) != KeyLen {
			return nil, fmt.Errorf("key of %d octets: want %d (AES-128)", len(key), KeyLen)
		}
		b, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		c.block = b
	}
	return c, nil
}

// Rotation is the config rotation value the configuration's IDs carry.
func (c *Config) Rotation() uint8 { return c.rotation }

// ServerIDLen is the length of a server ID in octets.
func (c *Config) ServerIDLen() int { return c.sidLen }

// NonceLen is the length of the nonce in octets.
func (c *Config) NonceLen() int { return c.nonceLen }

// Encrypted says whether the block is encrypted.
func (c *Config) Encrypted() bool { return c.block != nil }

// CIDLen is the shortest connection ID of this configuration: the first
// octet, the server ID and the nonce.
func (c *Config) CIDLen() int { return 1 + c.sidLen + c.nonceLen }

// Passes is how many AES operations the balancer spends on one ID: 0 in
// the clear, 1 for a single block, 3 or 4 for the Feistel network.
func (c *Config) Passes() int {
	switch n := c.sidLen + c.nonceLen; {
	case c.block == nil:
		return 0
	case n == aes.BlockSize:
		return 1
	case c.sidLen <= n/2:
		return 3
	default:
		return 4
	}
}

func (c *Config) String() string {
	mode := "plaintext"
	switch c.Passes() {
	case 1:
		mode = "AES single pass"
	case 3, 4:
		mode = "AES four-pass"
	}
	return fmt.Sprintf("config rotation %d, server ID %d octets, nonce %d octets, %s", c.rotation, c.sidLen, c.nonceLen, mode)
}

// RotationOf is the config rotation value of a connection ID's first
// octet.
func RotationOf(first byte) uint8 { return first >> 5 }

// ServerIDKey is a server ID as a map key: its length, then its octets.
// A lookup by it allocates nothing.
type ServerIDKey [1 + MaxServerIDLen]byte

// KeyOf is sid's ServerIDKey; a server ID longer than MaxServerIDLen
// gives the zero key, which no server ID has.
func KeyOf(sid []byte) (k ServerIDKey) {
	if len(sid) == 0 || len(sid) > MaxServerIDLen {
		return k
	}
	k[0] = byte(len(sid))
	copy(k[1:], sid)
	return k
}

// ServerID is the server ID k holds.
func (k *ServerIDKey) ServerID() []byte { return k[1 : 1+int(k[0])] }
