package afxdp

import (
	"fmt"
	"math/bits"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"xlb/dataplane"
)

// ZeroCopy says how New binds: zero-copy, copy, or whatever the driver can.
type ZeroCopy uint8

const (
	// ZeroCopyAuto binds zero-copy where the driver supports it and falls
	// back to copy mode where it does not (no bind flag: the kernel tries
	// zero-copy and falls back itself). Socket.Mode says which it got.
	ZeroCopyAuto ZeroCopy = iota
	// ZeroCopyOn binds with XDP_ZEROCOPY and fails if the driver refuses.
	ZeroCopyOn
	// ZeroCopyOff binds with XDP_COPY.
	ZeroCopyOff
	numZeroCopy
)

var zeroCopyNames = [...]string{"auto", "on", "off"}

func (z ZeroCopy) String() string {
	if z >= numZeroCopy {
		return fmt.Sprintf("ZeroCopy(%d)", uint8(z))
	}
	return zeroCopyNames[z]
}

// ParseZeroCopy reads the config words "auto", "on" and "off".
func ParseZeroCopy(s string) (ZeroCopy, error) {
	for i, n := range zeroCopyNames {
		if s == n {
			return ZeroCopy(i), nil
		}
	}
	return 0, fmt.Errorf("%w: zero_copy %q: must be auto, on or off", ErrInvalidOpts, s)
}

// Opts configure a Socket. Start from DefaultOpts.
type Opts struct {
	// NumFrames is the number of UMEM chunks (frames in flight: fill,
	// rx, held by the caller, tx and completion together).
	NumFrames uint32
	// FrameSize is the chunk size: 2048 or 4096.
	FrameSize uint32
	// Headroom is reserved in front of every received frame, in addition
	// to the kernel's own XDP_PACKET_HEADROOM, for encapsulation. It must
	// leave room for a full 1518-byte Ethernet frame in the chunk.
	Headroom uint32
	// Ring sizes in descriptors, each a power of two; the completion ring
	// must hold at least as many as the TX ring, or TX stalls.
	FillRingSize       uint32
	CompletionRingSize uint32
	RxRingSize         uint32
	TxRingSize         uint32
	// ZeroCopy chooses the bind mode.
	ZeroCopy ZeroCopy
	// NeedWakeup binds with XDP_USE_NEED_WAKEUP, so the kernel sets a
	// ring's flag when it needs a syscall to make progress and the hot
	// path makes none otherwise.
	NeedWakeup bool
	// BindRetry is how long New retries a bind that fails with EBUSY (the
	// kernel frees a closed socket's queue asynchronously); 0: no retry.
	BindRetry time.Duration
}

// DefaultOpts returns the options xlb runs with: 4096 chunks of 4096 bytes
// (16 MiB per queue), dataplane.Headroom bytes of headroom, 2048-descriptor
// rings, zero-copy where the driver can, need-wakeup on.
func DefaultOpts() Opts {
	return Opts{
		NumFrames:          4096,
		FrameSize:          4096,
		Headroom:           dataplane.Headroom,
		FillRingSize:       2048,
		CompletionRingSize: 2048,
		RxRingSize:         2048,
		TxRingSize:         2048,
		ZeroCopy:           ZeroCopyAuto,
		NeedWakeup:         true,
		BindRetry:          time.Second,
	}
}

const (
	maxFrames   = 1 << 20
	maxRingSize = 1 << 20
	// minFrameRoom is what a chunk must hold after both headrooms: an
	// Ethernet frame with an 802.1Q tag at MTU 1500.
	minFrameRoom = 1518
)

// Validate reports every option out of range, wrapping ErrInvalidOpts.
func (o Opts) Validate() error {
	var bad []string
	if o.NumFrames == 0 || o.NumFrames > maxFrames {
		bad = append(bad, fmt.Sprintf("NumFrames %d: must be 1..%d", o.NumFrames, maxFrames))
	}
	if o.FrameSize != 2048 && o.FrameSize != 4096 {
		bad = append(bad, fmt.Sprintf("FrameSize %d: must be 2048 or 4096", o.FrameSize))
	} else if room := int64(o.FrameSize) - int64(o.Headroom) - unix.XDP_PACKET_HEADROOM; room < minFrameRoom {
		bad = append(bad, fmt.Sprintf("Headroom %d: leaves %d bytes of a %d-byte frame (the kernel keeps %d more); a frame needs %d",
			o.Headroom, max(room, 0), o.FrameSize, unix.XDP_PACKET_HEADROOM, minFrameRoom))
	}
	for _, r := range []struct {
		name string
		n    uint32
	}{
		{"FillRingSize", o.FillRingSize},
		{"CompletionRingSize", o.CompletionRingSize},
		{"RxRingSize", o.RxRingSize},
		{"TxRingSize", o.TxRingSize},
	} {
		if bits.OnesCount32(r.n) != 1 || r.n > maxRingSize {
			bad = append(bad, fmt.Sprintf("%s %d: must be a power of 2 up to %d", r.name, r.n, maxRingSize))
		}
	}
	if o.CompletionRingSize < o.TxRingSize {
		bad = append(bad, fmt.Sprintf("CompletionRingSize %d: must be >= TxRingSize %d", o.CompletionRingSize, o.TxRingSize))
	}
	if o.ZeroCopy >= numZeroCopy {
		bad = append(bad, fmt.Sprintf("ZeroCopy %d: must be ZeroCopyAuto, ZeroCopyOn or ZeroCopyOff", uint8(o.ZeroCopy)))
	}
	if o.BindRetry < 0 {
		bad = append(bad, fmt.Sprintf("BindRetry %v: must be >= 0", o.BindRetry))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidOpts, strings.Join(bad, "; "))
	}
	return nil
}
