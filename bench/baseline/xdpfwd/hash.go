package xdpfwd

import (
	"encoding/binary"

	"xlb/dataplane/packet"
)

// BackendIndex is the program's choice for frame in Go: the index of the
// backend (0..n-1) it sends the frame to, and false where the program
// would not forward it whatever the VIPs (not IPv4 or IPv6 UDP/TCP, or
// truncated). The sink of a benchmark can use it to check per-flow
// placement; the tests hold the program to it.
func BackendIndex(frame []byte, n int) (int, bool) {
	h, ok := flowHash(frame)
	if !ok || n <= 0 {
		return 0, false
	}
	return int(h % uint32(n)), true
}

// flowHash mirrors the program: the XOR of the addresses' 32-bit words,
// the protocol and the ports word (each as a native-endian load, like the
// program's), then mixed.
func flowHash(f []byte) (uint32, bool) {
	ne := binary.NativeEndian
	if len(f) < packet.EthernetLen {
		return 0, false
	}
	var h uint32
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		ip := f[packet.EthernetLen:]
		if len(ip) < packet.IPv4MinLen || ip[0]>>4 != 4 || ip[0]&0xf < 5 {
			return 0, false
		}
		ihl := int(ip[0]&0xf) * 4
		proto := packet.Proto(ip[9])
		if proto != packet.ProtoTCP && proto != packet.ProtoUDP {
			return 0, false
		}
		h = ne.Uint32(ip[12:]) ^ ne.Uint32(ip[16:]) ^ uint32(proto)
		if binary.BigEndian.Uint16(ip[6:])&0x3fff == 0 {
			if len(ip) < ihl+4 {
				return 0, false
			}
			h ^= ne.Uint32(ip[ihl:])
		}
	case 0x86dd:
		ip := f[packet.EthernetLen:]
		if len(ip) < packet.IPv6FixedLen+4 || ip[0]>>4 != 6 {
			return 0, false
		}
		proto := packet.Proto(ip[6])
		if proto != packet.ProtoTCP && proto != packet.ProtoUDP {
			return 0, false
		}
		h = uint32(proto)
		for off := 8; off < packet.IPv6FixedLen+4; off += 4 {
			h ^= ne.Uint32(ip[off:])
		}
	default:
		return 0, false
	}
	h ^= h >> 16
	h *= hashMul
	h ^= h >> 15
	return h, true
}

// putCount stores the backend count as the program loads it (a native
// 32-bit word).
func putCount(b []byte, n uint32) { binary.NativeEndian.PutUint32(b, n) }
