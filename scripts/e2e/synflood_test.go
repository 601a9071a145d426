package e2e

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/internal/nettest"
	"xlb/internal/nsx"
	"xlb/scripts/testbed"
)

// tcpFlooder sends TCP segments (SYNs, or ACKs: mid-flow packets of
// flows nobody opened) from spoofed sources (198.18.0.0/15, a new
// 5-tuple each) from a host's interface to the VIP, as fast as the
// kernel takes them: an AF_PACKET socket that bypasses the qdisc (a
// veth has none to speak of; the bypass saves its locking) and hands the
// kernel a batch of frames per sendmmsg call.
type tcpFlooder struct {
	fd     int
	frames [][]byte
	iovs   []unix.Iovec
	msgs   []mmsghdr
	n      uint32 // frames built so far: the next one's index
}

// mmsghdr is struct mmsghdr: a msghdr and the byte count the kernel
// writes back.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// floodBatch is the frames per sendmmsg call: large enough that the
// syscall's cost is spread thin, small enough that a batch is built in
// the cache.
const floodBatch = 64

func newTCPFlooder(h testbed.Host, dstMAC net.HardwareAddr, dst netip.AddrPort, flags string) (*tcpFlooder, error) {
	f := &tcpFlooder{fd: -1}
	err := nsx.Do(h.NS, func() error {
		ifc, err := net.InterfaceByName(h.Iface)
		if err != nil {
			return err
		}
		// Protocol 0: the socket sends and receives nothing.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		f.fd = fd
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
			return fmt.Errorf("PACKET_QDISC_BYPASS: %w", err)
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: nettest.Htons(unix.ETH_P_IP), Ifindex: ifc.Index})
	})
	if err != nil {
		f.close()
		return nil, fmt.Errorf("packet socket on %s in %s: %w", h.Iface, h.NS, err)
	}
	tmpl, err := craft.Build(&craft.Packet{
		Src: netip.MustParseAddr("198.18.0.1"), Dst: dst.Addr(), Proto: packet.ProtoTCP,
		SrcPort: 1024, DstPort: dst.Port(), Flags: flags, SrcMAC: h.MAC, DstMAC: dstMAC,
	})
	if err != nil {
		f.close()
		return nil, err
	}
	f.frames = make([][]byte, floodBatch)
	f.iovs = make([]unix.Iovec, floodBatch)
	f.msgs = make([]mmsghdr, floodBatch)
	for i := range f.frames {
		f.frames[i] = append([]byte(nil), tmpl...)
		f.iovs[i].Base = &f.frames[i][0]
		f.iovs[i].SetLen(len(tmpl))
		f.msgs[i].hdr.Iov = &f.iovs[i]
		f.msgs[i].hdr.SetIovlen(1)
	}
	return f, nil
}

// sendBatch rewrites the batch's frames to the next new 5-tuples and
// sends them; it returns how many the kernel took. The IPv4 header
// checksum is redone (a bridge with netfilter drops a bad one); the TCP
// checksum is left stale, so the backends drop the segments, as nothing would
// answer a spoofed source anyway.
func (f *tcpFlooder) sendBatch() (int, error) {
	const srcOff, sportOff = 14 + 12, 14 + 20
	for _, fr := range f.frames {
		n := f.n
		f.n++
		binary.BigEndian.PutUint32(fr[srcOff:], 0xc6120000+(n>>10)&0x1ffff) // 198.18.0.0/15
		binary.BigEndian.PutUint16(fr[sportOff:], uint16(1024+n&1023))
		ipv4HeaderChecksum(fr[14:34])
	}
	sent := 0
	for sent < len(f.msgs) {
		r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(f.fd),
			uintptr(unsafe.Pointer(&f.msgs[sent])), uintptr(len(f.msgs)-sent), 0, 0, 0)
		runtime.KeepAlive(f.frames)
		switch {
		case errno == unix.EINTR:
			continue
		case errors.Is(errno, unix.ENOBUFS) || errors.Is(errno, unix.EAGAIN):
			// The device refused a frame (its queue stopped): count
			// what went, drop the rest of the batch, as a flood would.
			return sent, nil
		case errno != 0:
			return sent, errno
		}
		sent += int(r)
	}
	return sent, nil
}

func (f *tcpFlooder) close() {
	if f.fd >= 0 {
		unix.Close(f.fd)
		f.fd = -1
	}
}

// ipv4HeaderChecksum recomputes the checksum of a 20-byte IPv4 header in
// place.
func ipv4HeaderChecksum(h []byte) {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], packet.Checksum(h, 0))
}

// linkStats are an interface's counters as `ip -s link` reads them:
// rx_packets, rx_dropped, tx_packets, tx_dropped, ...
func linkStats(ns, dev string) (map[string]float64, error) {
	out, err := testbed.Exec(ns, "ip", "-s", "-j", "link", "show", "dev", dev)
	if err != nil {
		return nil, fmt.Errorf("ip -s link show %s in %s: %v: %s", dev, ns, err, out)
	}
	var links []struct {
		Stats64 struct {
			Rx map[string]float64 `json:"rx"`
			Tx map[string]float64 `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		return nil, fmt.Errorf("ip -s -j link show %s in %s: %v: %s", dev, ns, err, out)
	}
	m := map[string]float64{}
	for k, v := range links[0].Stats64.Rx {
		m["rx_"+k] = v
	}
	for k, v := range links[0].Stats64.Tx {
		m["tx_"+k] = v
	}
	return m, nil
}
