package afxdp

import "unsafe"

// completionQueue is where the kernel returns the addresses of sent frames.
type completionQueue struct {
	queue
	addrs []uint64
}

func (q *completionQueue) setDescs(p unsafe.Pointer) {
	q.addrs = unsafe.Slice((*uint64)(p), q.size)
}

func (q *completionQueue) get(i uint32) uint64 { return q.addrs[i&q.mask] }
