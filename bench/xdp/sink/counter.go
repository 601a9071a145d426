package sink

import (
	"encoding/binary"
	"net"
)

// Counter accounts for received frames. It belongs to the one goroutine
// that receives; Record allocates nothing.
type Counter struct {
	macs [][6]byte
	run  uint32

	// PerBackend counts frames by destination MAC, in the order of the
	// MACs given to NewCounter; Other counts frames to any other MAC.
	PerBackend []uint64
	Other      uint64
	// Frames and Bytes count every frame of this run.
	Frames, Bytes uint64
	// Foreign counts frames without the layout or of another run.
	Foreign uint64
	// Early counts frames whose timestamp is after their receive time
	// (a clock error; their latency is counted as 0).
	Early   uint64
	Latency Histogram
	// Windows, when set, also keeps the largest latency per window of
	// send time.
	Windows *Windows
}

// Windows is the largest latency (ns) of the frames sent in each window of
// Width ns from Start (the payload timestamp's clock); frames sent outside
// are not kept.
type Windows struct {
	Start, Width int64
	Max          []uint64
}

func (w *Windows) add(ts int64, d uint64) {
	if ts < w.Start || w.Width <= 0 {
		return
	}
	if i := (ts - w.Start) / w.Width; i < int64(len(w.Max)) && d > w.Max[i] {
		w.Max[i] = d
	}
}

// NewCounter counts frames of run id run sent to the given backend MACs.
func NewCounter(backends []net.HardwareAddr, run uint32) *Counter {
	c := &Counter{run: run, PerBackend: make([]uint64, len(backends))}
	for _, m := range backends {
		var a [6]byte
		copy(a[:], m)
		c.macs = append(c.macs, a)
	}
	return c
}

// Record accounts for one received frame at time now (ns, the clock of the
// payload's timestamp).
func (c *Counter) Record(f []byte, now int64) {
	if len(f) < MinFrame || binary.LittleEndian.Uint32(f[MagicOff:]) != Magic ||
		binary.LittleEndian.Uint32(f[RunOff:]) != c.run {
		c.Foreign++
		return
	}
	c.Frames++
	c.Bytes += uint64(len(f))
	dst := [6]byte(f[0:6])
	found := false
	for i := range c.macs {
		if c.macs[i] == dst {
			c.PerBackend[i]++
			found = true
			break
		}
	}
	if !found {
		c.Other++
	}
	ts := int64(binary.LittleEndian.Uint64(f[TSOff:]))
	var d uint64
	if now >= ts {
		d = uint64(now - ts)
	} else {
		c.Early++
	}
	c.Latency.Add(d)
	if c.Windows != nil {
		c.Windows.add(ts, d)
	}
}
