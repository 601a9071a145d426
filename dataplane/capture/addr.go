package capture

import (
	"encoding/binary"
	"net/netip"
)

// destination reads a frame's IP destination address (Ethernet, up to two
// VLAN tags, IPv4 or IPv6); false when the frame is not IP or too short.
func destination(f []byte) (netip.Addr, bool) {
	const eth = 14
	if len(f) < eth {
		return netip.Addr{}, false
	}
	off, typ := eth, binary.BigEndian.Uint16(f[12:14])
	for range 2 {
		if typ != 0x8100 && typ != 0x88a8 {
			break
		}
		if len(f) < off+4 {
			return netip.Addr{}, false
		}
		typ = binary.BigEndian.Uint16(f[off+2 : off+4])
		off += 4
	}
	switch typ {
	case 0x0800:
		if len(f) < off+20 {
			return netip.Addr{}, false
		}
		return netip.AddrFrom4([4]byte(f[off+16 : off+20])), true
	case 0x86dd:
		if len(f) < off+40 {
			return netip.Addr{}, false
		}
		return netip.AddrFrom16([16]byte(f[off+24 : off+40])), true
	}
	return netip.Addr{}, false
}
