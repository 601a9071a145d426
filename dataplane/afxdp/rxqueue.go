package afxdp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// rxQueue is where the kernel hands us received frames.
type rxQueue struct {
	queue
	descs []unix.XDPDesc
}

func (q *rxQueue) setDescs(p unsafe.Pointer) {
	q.descs = unsafe.Slice((*unix.XDPDesc)(p), q.size)
}

func (q *rxQueue) get(i uint32) unix.XDPDesc { return q.descs[i&q.mask] }
