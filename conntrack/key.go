package conntrack

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
)

// Kind is the tuple a Key is built from (SPEC T2).
type Kind uint8

const (
	Kind2T Kind = 2 // src IP, dst IP
	Kind3T Kind = 3 // src IP, dst IP, protocol
	Kind5T Kind = 5 // src IP, src port, protocol, dst IP, dst port
)

func (k Kind) String() string {
	switch k {
	case Kind2T:
		return "2T"
	case Kind3T:
		return "3T"
	case Kind5T:
		return "5T"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Key is an exact flow key (T3): packed, pointer-free, comparable, 40 bytes.
// IPv4 addresses use the IPv4-mapped 16-byte form. Fields not part of Kind
// are zero (ports for 2T/3T; Proto for 2T). Service scopes the key (T4).
type Key struct {
	Src, Dst         [16]byte
	SrcPort, DstPort uint16
	Proto            uint8
	Kind             Kind
	Service          uint16
}

// String formats k for humans (explain, status); not for the hot path.
func (k Key) String() string {
	src, dst := netip.AddrFrom16(k.Src).Unmap(), netip.AddrFrom16(k.Dst).Unmap()
	switch k.Kind {
	case Kind5T:
		return fmt.Sprintf("svc %d 5T proto %d %s -> %s", k.Service, k.Proto,
			netip.AddrPortFrom(src, k.SrcPort), netip.AddrPortFrom(dst, k.DstPort))
	case Kind3T:
		return fmt.Sprintf("svc %d 3T proto %d %s -> %s", k.Service, k.Proto, src, dst)
	}
	return fmt.Sprintf("svc %d %s %s -> %s", k.Service, k.Kind, src, dst)
}

// keyWords is a Key as the five 64-bit words stored in a slot.
type keyWords [5]uint64

func (w *keyWords) from(k *Key) {
	w[0] = binary.LittleEndian.Uint64(k.Src[0:8])
	w[1] = binary.LittleEndian.Uint64(k.Src[8:16])
	w[2] = binary.LittleEndian.Uint64(k.Dst[0:8])
	w[3] = binary.LittleEndian.Uint64(k.Dst[8:16])
	w[4] = uint64(k.SrcPort) | uint64(k.DstPort)<<16 | uint64(k.Proto)<<32 |
		uint64(k.Kind)<<40 | uint64(k.Service)<<48
}

func (w *keyWords) key() Key {
	var k Key
	binary.LittleEndian.PutUint64(k.Src[0:8], w[0])
	binary.LittleEndian.PutUint64(k.Src[8:16], w[1])
	binary.LittleEndian.PutUint64(k.Dst[0:8], w[2])
	binary.LittleEndian.PutUint64(k.Dst[8:16], w[3])
	k.SrcPort = uint16(w[4])
	k.DstPort = uint16(w[4] >> 16)
	k.Proto = uint8(w[4] >> 32)
	k.Kind = Kind(w[4] >> 40)
	k.Service = uint16(w[4] >> 48)
	return k
}

// mix folds the 128-bit product of a and b: every output bit depends on
// every input bit, at the cost of one multiply.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// v4Mapped is the low half of an IPv4-mapped address's second word:
// ::ffff:a.b.c.d has 0xffff in bytes 10-11 (little endian).
const v4Mapped = 0xffff << 16

// hash mixes the key words with the per-table secret seed. Two independent
// multiplies, then one to combine them, then a finalizer: keys that differ
// only in a few bits of w[4] (ports, service) change the folded product
// a*b only a little in its low bits, and for about 1 % of seeds dozens of
// such keys would share a bucket (and evict each other in an empty table);
// the finalizer spreads every bit over the low bits the bucket index uses.
// A key of two IPv4 addresses has only 96 bits that vary (the addresses
// and w[4]): one multiply of them, then the finalizer, half the work. The
// two forms need not agree: a hash only places a key, and keys are
// compared whole (T3).
func hash(w *keyWords, s *[6]uint64) uint64 {
	var h uint64
	if w[0]|w[2] == 0 && uint32(w[1]) == v4Mapped && uint32(w[3]) == v4Mapped {
		h = mix(w[1]>>32|w[3]&^0xffffffff^s[0], w[4]^s[1])
	} else {
		a := mix(w[0]^s[0], w[1]^s[1])
		b := mix(w[2]^s[2], w[3]^s[3])
		h = mix(a^w[4]^s[4], b^s[5])
	}
	h ^= h >> 32
	h *= 0x9e3779b97f4a7c15
	return h ^ h>>29
}
