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
package sink

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
