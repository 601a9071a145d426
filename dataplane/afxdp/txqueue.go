package afxdp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// txQueue is where we give the kernel frames to send.
type txQueue struct {
	queue
	descs []unix.XDPDesc
}

func (q *txQueue) setDescs(p unsafe.Pointer) {
	q.descs = unsafe.Slice((*unix.XDPDesc)(p), q.size)
}

func (q *txQueue) set(i uint32, d unix.XDPDesc) { q.descs[i&q.mask] = d }
