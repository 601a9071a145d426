package capture

import (
	"encoding/binary"
	"io"
	"time"
)

// pcapng blocks, little-endian (the byte-order magic tells readers). Our
// own writer: gopacket's pcapgo writes no per-packet comments.
const (
	blockSHB = 0x0A0D0D0A // section header
	blockIDB = 0x00000001 // interface description
	blockISB = 0x00000005 // interface statistics
	blockEPB = 0x00000006 // enhanced packet

	optEnd     = 0
	optComment = 1
	optIfName  = 2
	optTSResol = 9
	optIfDrop  = 5 // isb_ifdrop

	linkEthernet = 1
)

// ngWriter writes one pcapng section with nanosecond timestamps.
type ngWriter struct {
	w   io.Writer
	buf []byte
	err error
}

func pad4(n int) int { return (n + 3) &^ 3 }

// block writes a block of typ around body (which excludes the type, the
// two lengths and the trailing length).
func (n *ngWriter) block(typ uint32, body []byte) {
	if n.err != nil {
		return
	}
	total := 12 + len(body)
	b := n.buf[:0]
	b = binary.LittleEndian.AppendUint32(b, typ)
	b = binary.LittleEndian.AppendUint32(b, uint32(total))
	b = append(b, body...)
	b = binary.LittleEndian.AppendUint32(b, uint32(total))
	n.buf = b
	_, n.err = n.w.Write(b)
}

// option appends one option, padded to 32 bits.
func option(b []byte, code uint16, v []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, code)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
	b = append(b, v...)
	return append(b, make([]byte, pad4(len(v))-len(v))...)
}

func endOptions(b []byte) []byte { return binary.LittleEndian.AppendUint32(b, optEnd) }

func (n *ngWriter) sectionHeader() {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, 0x1A2B3C4D) // byte-order magic
	b = binary.LittleEndian.AppendUint16(b, 1)          // major
	b = binary.LittleEndian.AppendUint16(b, 0)          // minor
	b = binary.LittleEndian.AppendUint64(b, ^uint64(0)) // section length: not given
	n.block(blockSHB, b)
}

// iface describes an Ethernet interface named name.
func (n *ngWriter) iface(name string, snap int) {
	var b []byte
	b = binary.LittleEndian.AppendUint16(b, linkEthernet)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(snap))
	b = option(b, optIfName, []byte(name))
	b = option(b, optTSResol, []byte{9}) // 10^-9 s
	n.block(blockIDB, endOptions(b))
}

func appendTime(b []byte, t time.Time) []byte {
	ns := uint64(t.UnixNano())
	b = binary.LittleEndian.AppendUint32(b, uint32(ns>>32))
	return binary.LittleEndian.AppendUint32(b, uint32(ns))
}

// packet writes data (captured from a frame of orig bytes) on interface id.
func (n *ngWriter) packet(id uint32, t time.Time, data []byte, orig int, comment string) {
	b := make([]byte, 0, 28+pad4(len(data))+8+pad4(len(comment)))
	b = binary.LittleEndian.AppendUint32(b, id)
	b = appendTime(b, t)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	b = binary.LittleEndian.AppendUint32(b, uint32(orig))
	b = append(b, data...)
	b = append(b, make([]byte, pad4(len(data))-len(data))...)
	if comment != "" {
		b = option(b, optComment, []byte(comment))
	}
	n.block(blockEPB, endOptions(b))
}

// stats writes interface id's statistics: drop copies lost.
func (n *ngWriter) stats(id uint32, t time.Time, drop uint64) {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, id)
	b = appendTime(b, t)
	b = option(b, optIfDrop, binary.LittleEndian.AppendUint64(nil, drop))
	n.block(blockISB, endOptions(b))
}
