package afxdp

import "unsafe"

// fillQueue is where we give the kernel empty chunks to receive into.
type fillQueue struct {
	queue
	addrs []uint64
}

func (q *fillQueue) setDescs(p unsafe.Pointer) {
	q.addrs = unsafe.Slice((*uint64)(p), q.size)
}

// refill moves as many chunks from the free stack onto the ring as both
// have, and returns how many.
func (q *fillQueue) refill(u *umem) uint32 {
	if u.nfree == 0 {
		return 0
	}
	n := min(q.free(u.nfree), u.nfree)
	if n == 0 {
		return 0
	}
	idx := q.cachedProd
	for i := range n {
		a, _ := u.pop()
		q.addrs[(idx+i)&q.mask] = a
	}
	q.submit(n)
	return n
}
