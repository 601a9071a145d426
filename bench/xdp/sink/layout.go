// Package sink is the receiving end of lbbench xdp: a small XDP program
// that hands the bench's frames arriving at the generator's interface to an
// AF_XDP socket (everything else, ARP and health checks, goes to the kernel),
// and the accounting of what arrives: frames per backend by destination
// MAC, and latency from the transmit timestamp each frame carries in its
// payload to the moment it is received, in a log-linear histogram.
//
// Payload layout (after Ethernet, a 20-byte IPv4 header and UDP):
//
//	0..8   transmit time, ns on the process's monotonic clock, little endian
//	8..12  Magic
//	12..16 run id: frames of an earlier case that arrive late are not counted
//
// Metadata the sink's XDP program puts in front of each frame it hands to
// the socket (MetaLen bytes, right before the frame in its umem chunk):
//
//	0..8   receive time, ns on CLOCK_MONOTONIC (bpf_ktime_get_ns), little endian
//	8..12  MetaMagic; the receiver clears it, so a chunk used again without
//	       fresh metadata is not read as stamped
//	12..16 zero
//
// The receive time is taken where the frame is received, before the
// receiving thread gets to it, so a receiver that was off its core or busy
// sending does not add its delay to the latency.
package sink

import "encoding/binary"

// Frame layout of the bench's frames.
const (
	PayloadOff = 14 + 20 + 8 // Ethernet, IPv4 without options, UDP
	TSOff      = PayloadOff
	MagicOff   = PayloadOff + 8
	RunOff     = PayloadOff + 12
	// MinFrame is the shortest frame carrying the whole layout.
	MinFrame = PayloadOff + 16
	// Magic marks the bench's frames ("xlbT").
	Magic uint32 = 0x54626c78
)

// UDP destination ports the bench's frames use: the XDP program redirects
// IPv4 UDP frames to PortLo..PortHi and passes everything else.
const (
	PortLo = 7770
	PortHi = 7779
)

// Metadata layout.
const (
	MetaLen   = 16
	metaTime  = 0
	metaMagic = 8
	// MetaMagic marks metadata written by the sink's program ("xlbR").
	MetaMagic uint32 = 0x52626c78
)

// RxStamp returns the receive time (ns, CLOCK_MONOTONIC) from the metadata
// in front of the frame at offset off of its umem chunk, and clears the
// mark; false when there is none.
func RxStamp(chunk []byte, off int) (int64, bool) {
	if off < MetaLen || off > len(chunk) {
		return 0, false
	}
	m := chunk[off-MetaLen : off]
	if binary.LittleEndian.Uint32(m[metaMagic:]) != MetaMagic {
		return 0, false
	}
	binary.LittleEndian.PutUint32(m[metaMagic:], 0)
	return int64(binary.LittleEndian.Uint64(m[metaTime:])), true
}
