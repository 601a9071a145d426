package dataplane

import (
	"encoding/binary"

	"xlb/dataplane/packet"
)

// FlowHash is the selection hash of SPEC §2, the Maglev lookup key.
//
// It must be identical on every instance and every version (S5: flows that
// upstream ECMP moves between balancers keep their backend), so it is fully
// specified here and pinned by a golden test:
//
//	words: w0..w3 = src[0:8], src[8:16], dst[0:8], dst[8:16] (little endian,
//	       addresses in 16-byte form, IPv4 as ::ffff:a.b.c.d);
//	       w4 = sport | dport<<16 | proto<<32 | kind<<40
//	       (ports 0 for 2T/3T, proto 0 for 2T)
//	h = 0x243F6A8885A308D3 (pi)
//	for each word w: h = splitmix64(h ^ w)
//
// where splitmix64(z) = z ^= z>>30; z *= 0xBF58476D1CE4E5B9; z ^= z>>27;
// z *= 0x94D049BB133111EB; z ^= z>>31.
func FlowHash(src, dst *[16]byte, sport, dport uint16, proto packet.Proto, kind uint8) uint64 {
	h := uint64(0x243F6A8885A308D3)
	h = splitmix64(h ^ binary.LittleEndian.Uint64(src[0:8]))
	h = splitmix64(h ^ binary.LittleEndian.Uint64(src[8:16]))
	h = splitmix64(h ^ binary.LittleEndian.Uint64(dst[0:8]))
	h = splitmix64(h ^ binary.LittleEndian.Uint64(dst[8:16]))
	w4 := uint64(sport) | uint64(dport)<<16 | uint64(proto)<<32 | uint64(kind)<<40
	return splitmix64(h ^ w4)
}

func splitmix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xBF58476D1CE4E5B9
	z ^= z >> 27
	z *= 0x94D049BB133111EB
	z ^= z >> 31
	return z
}
