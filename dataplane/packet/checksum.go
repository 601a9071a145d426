package packet

import "encoding/binary"

// Internet checksum helpers (RFC 1071) and incremental updates (RFC 1624).
//
// A "sum" is the 16-bit one's complement sum, not yet complemented; a
// "checksum" is its complement, the value stored in a header. Sums combine by
// adding them with SumAdd, so a pseudo-header and a payload are summed apart.

// Sum returns the one's complement sum of b added to initial. b is read as
// big-endian 16-bit words, an odd last byte padded with zero; to sum a
// message in pieces, every piece but the last must have an even length.
func Sum(b []byte, initial uint16) uint16 {
	n := len(b)
	b = b[:n:n]
	// 32-bit words into a 64-bit accumulator cannot overflow for any frame;
	// the fold at the end is exact because 2^16 ≡ 1 (mod 2^16-1).
	acc := uint64(initial)
	for len(b) >= 16 {
		acc += uint64(binary.BigEndian.Uint32(b[0:])) +
			uint64(binary.BigEndian.Uint32(b[4:])) +
			uint64(binary.BigEndian.Uint32(b[8:])) +
			uint64(binary.BigEndian.Uint32(b[12:]))
		b = b[16:]
	}
	for len(b) >= 4 {
		acc += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return fold(acc)
}

// fold reduces a wide one's complement accumulator to 16 bits.
func fold(acc uint64) uint16 {
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return uint16(acc)
}

// SumAdd adds two one's complement sums.
func SumAdd(a, b uint16) uint16 { return fold(uint64(a) + uint64(b)) }

// Checksum returns the Internet checksum of b, starting from initial (for
// example a PseudoHeaderSum): the complement of Sum. A header whose checksum
// field is filled in sums to 0xffff, so Checksum over it returns 0. For UDP a
// computed 0 must be sent as 0xffff (RFC 768).
func Checksum(b []byte, initial uint16) uint16 { return ^Sum(b, initial) }

// PseudoHeaderSum returns the sum of the TCP/UDP/ICMPv6 pseudo-header for
// src and dst (both 4 bytes for IPv4 or 16 for IPv6), the protocol and the
// upper-layer length (RFC 768, RFC 8200 8.1). The two forms sum alike but for
// the addresses, so one function serves both.
func PseudoHeaderSum(proto Proto, src, dst []byte, length uint32) uint16 {
	s := Sum(src, 0)
	s = Sum(dst, s)
	return fold(uint64(s) + uint64(proto) + uint64(length>>16) + uint64(length&0xffff))
}

// ChecksumUpdate16 returns checksum check updated for one 16-bit word of the
// covered data changing from old to new, by RFC 1624 equation 3:
// HC' = ~(~HC + ~m + m'), which never produces -0 for a non-zero sum.
func ChecksumUpdate16(check, old, new uint16) uint16 {
	return ^fold(uint64(^check) + uint64(^old) + uint64(new))
}

// ChecksumUpdate is ChecksumUpdate16 for a run of words, such as an address:
// old and new must have the same even length (4 or 16 for addresses).
func ChecksumUpdate(check uint16, old, new []byte) uint16 {
	return ^fold(uint64(^check) + uint64(^Sum(old, 0)) + uint64(Sum(new, 0)))
}
