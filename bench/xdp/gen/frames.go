// Package gen is lbbench xdp's traffic generator: frames with many distinct
// 5-tuples built ahead of time, sent from an AF_XDP socket (ours,
// dataplane/afxdp) at full speed or at a set rate, each stamped with its
// transmit time just before it is queued; the same socket receives what
// the middle hop sends back and hands it to the sink's counter.
package gen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"xlb/bench/xdp/sink"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// FlowSpec describes the flows: Sources source addresses counting up from
// Clients' first address, times Ports source ports counting up from 1024,
// all to Dst:DstPort over UDP.
type FlowSpec struct {
	SrcMAC, DstMAC net.HardwareAddr
	Clients        netip.Prefix
	Sources, Ports int
	Dst            netip.Addr
	DstPort        uint16
	// FrameLen is the frame's length as handed to the device: without
	// the 4-byte FCS a wire adds (a "64-byte frame" is 60 bytes here).
	FrameLen int
}

// Frames holds the flows' headers and one payload template; frame i is
// header i followed by the payload.
type Frames struct {
	n, frameLen int
	hdrs        []byte // n headers of hdrLen bytes
	payload     []byte
}

const hdrLen = sink.PayloadOff // Ethernet + IPv4 + UDP

// Build makes the frames of spec. Each is what craft.Build gives for its
// flow, with the UDP checksum 0 (none, which IPv4 allows), so that the
// timestamp written per frame needs no checksum update.
func Build(spec FlowSpec) (*Frames, error) {
	switch {
	case spec.FrameLen < sink.MinFrame || spec.FrameLen > 1514:
		return nil, fmt.Errorf("gen: frame length %d: want %d..1514", spec.FrameLen, sink.MinFrame)
	case spec.Sources < 1 || spec.Ports < 1 || spec.Ports > 65535-1024:
		return nil, fmt.Errorf("gen: %d sources x %d ports: want at least 1 x 1, at most %d ports", spec.Sources, spec.Ports, 65535-1024)
	case !spec.Clients.Addr().Is4() || !spec.Dst.Is4():
		return nil, errors.New("gen: IPv4 clients and destination only")
	case spec.Clients.Bits() > 32-bitsFor(spec.Sources):
		return nil, fmt.Errorf("gen: %d sources do not fit %s", spec.Sources, spec.Clients)
	}
	f := &Frames{n: spec.Sources * spec.Ports, frameLen: spec.FrameLen}
	f.hdrs = make([]byte, f.n*hdrLen)
	var tmpl []byte
	for i := range f.n {
		src, sport := spec.flow(i)
		if i == 0 {
			b, err := craft.Build(&craft.Packet{Src: src, Dst: spec.Dst, Proto: packet.ProtoUDP, SrcPort: sport, DstPort: spec.DstPort,
				PayloadLen: spec.FrameLen - hdrLen, SrcMAC: spec.SrcMAC, DstMAC: spec.DstMAC})
			if err != nil {
				return nil, fmt.Errorf("gen: %w", err)
			}
			if len(b) != spec.FrameLen {
				return nil, fmt.Errorf("gen: crafted frame is %d bytes, want %d", len(b), spec.FrameLen)
			}
			binary.BigEndian.PutUint16(b[hdrLen-2:], 0) // no UDP checksum
			tmpl, f.payload = b[:hdrLen], b[hdrLen:]
		}
		h := f.hdrs[i*hdrLen : (i+1)*hdrLen]
		copy(h, tmpl)
		a := src.As4()
		copy(h[14+12:], a[:])
		binary.BigEndian.PutUint16(h[14+20:], sport)
		binary.BigEndian.PutUint16(h[14+10:], 0)
		binary.BigEndian.PutUint16(h[14+10:], packet.Checksum(h[14:14+20], 0))
	}
	return f, nil
}

func bitsFor(n int) int {
	b := 0
	for 1<<b < n {
		b++
	}
	return b
}

// flow returns flow i's source address and port.
func (s FlowSpec) flow(i int) (netip.Addr, uint16) {
	a := s.Clients.Addr().As4()
	v := binary.BigEndian.Uint32(a[:]) + uint32(i/s.Ports)
	binary.BigEndian.PutUint32(a[:], v)
	return netip.AddrFrom4(a), uint16(1024 + i%s.Ports)
}

// N is the number of flows.
func (f *Frames) N() int { return f.n }

// Len is the length of every frame.
func (f *Frames) Len() int { return f.frameLen }

// Write writes frame i into dst (at least Len bytes) with transmit time ts
// and run id run. No allocation.
func (f *Frames) Write(dst []byte, i int, ts int64, run uint32) {
	copy(dst[:hdrLen], f.hdrs[i*hdrLen:(i+1)*hdrLen])
	copy(dst[hdrLen:f.frameLen], f.payload)
	binary.LittleEndian.PutUint64(dst[sink.TSOff:], uint64(ts))
	binary.LittleEndian.PutUint32(dst[sink.MagicOff:], sink.Magic)
	binary.LittleEndian.PutUint32(dst[sink.RunOff:], run)
}

// Frame returns a copy of frame i (tests, checks).
func (f *Frames) Frame(i int, ts int64, run uint32) []byte {
	b := make([]byte, f.frameLen)
	f.Write(b, i, ts, run)
	return b
}
