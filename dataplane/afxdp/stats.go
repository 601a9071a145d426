package afxdp

import (
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// KernelStats are the kernel's counters for the socket (XDP_STATISTICS).
type KernelStats struct {
	// RxDropped: frames dropped for want of a fill buffer, or too big
	// for a chunk.
	RxDropped uint64
	// RxInvalidDescs: fill descriptors the kernel refused.
	RxInvalidDescs uint64
	// TxInvalidDescs: TX descriptors the kernel refused.
	TxInvalidDescs uint64
	// RxRingFull: frames dropped because the rx ring was full.
	RxRingFull uint64
	// FillRingEmpty: times the kernel found the fill ring empty.
	FillRingEmpty uint64
	// TxRingEmpty: times the kernel found the TX ring empty.
	TxRingEmpty uint64
}

// Counters are the socket's own counters.
type Counters struct {
	RxFrames  uint64 // frames handed out by Receive
	TxFrames  uint64 // frames put on the TX ring
	Completed uint64 // frames the kernel returned after sending
	Recycled  uint64 // frames taken back by Recycle

	RxInvalid         uint64 // rx descriptors not in one chunk or for a held chunk
	TxInvalid         uint64 // descriptors Transmit refused
	RecycleInvalid    uint64 // addresses Recycle refused
	CompletionInvalid uint64 // completion addresses outside the umem or over the stack

	Kicks         uint64     // TX wakeups (sendto)
	KickTransient uint64     // ... refused for now: EAGAIN, EBUSY, ENOBUFS, ENETDOWN, EINTR
	KickErrors    uint64     // ... failed with another errno
	LastKickErrno unix.Errno // the last such errno
	Polls         uint64     // poll(2) calls
	PollWakeups   uint64     // ... that returned with the socket readable (the rest timed out)
}

// Stats is a snapshot of the kernel's and the socket's counters.
type Stats struct {
	Kernel KernelStats
	Counters
}

type counters struct {
	rxFrames, txFrames, completed, recycled                 atomic.Uint64
	rxInvalid, txInvalid, recycleInvalid, completionInvalid atomic.Uint64
	kicks, kickTransient, kickErrors, polls, pollWakeups    atomic.Uint64
	lastKickErrno                                           atomic.Uint32
}

// Counters returns the socket's own counters, without a syscall. Safe from
// any goroutine.
func (s *Socket) Counters() Counters {
	c := &s.c
	return Counters{
		RxFrames:          c.rxFrames.Load(),
		TxFrames:          c.txFrames.Load(),
		Completed:         c.completed.Load(),
		Recycled:          c.recycled.Load(),
		RxInvalid:         c.rxInvalid.Load(),
		TxInvalid:         c.txInvalid.Load(),
		RecycleInvalid:    c.recycleInvalid.Load(),
		CompletionInvalid: c.completionInvalid.Load(),
		Kicks:             c.kicks.Load(),
		KickTransient:     c.kickTransient.Load(),
		KickErrors:        c.kickErrors.Load(),
		LastKickErrno:     unix.Errno(c.lastKickErrno.Load()),
		Polls:             c.polls.Load(),
		PollWakeups:       c.pollWakeups.Load(),
	}
}

// Stats reads the kernel's counters (one getsockopt) and the socket's own.
// Safe from any goroutine, also concurrently with Close (then ErrClosed).
func (s *Socket) Stats() (Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Stats{}, ErrClosed
	}
	st := Stats{Counters: s.Counters()}
	if s.fd < 0 {
		return st, nil
	}
	k, err := getStatistics(s.fd)
	if err != nil {
		return st, fmt.Errorf("afxdp: reading XDP_STATISTICS: %w", err)
	}
	st.Kernel = KernelStats{
		RxDropped:      k.Rx_dropped,
		RxInvalidDescs: k.Rx_invalid_descs,
		TxInvalidDescs: k.Tx_invalid_descs,
		RxRingFull:     k.Rx_ring_full,
		FillRingEmpty:  k.Rx_fill_ring_empty_descs,
		TxRingEmpty:    k.Tx_ring_empty_descs,
	}
	return st, nil
}
