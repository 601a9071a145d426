package afxdp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// queue is what the four AF_XDP rings have in common: a power-of-two array
// of descriptors in memory shared with the kernel, a producer and a consumer
// index that run freely (uint32, wrapping) and are masked to index the array,
// and a flags word where the kernel sets XDP_RING_NEED_WAKEUP.
//
// We keep cached copies of both indexes and touch the shared ones only once
// per batch: a producer (fill, tx) stores its producer index after writing a
// batch and reloads the kernel's consumer index only when the cached view has
// too little room; a consumer (rx, completion) reloads the producer index only
// when the cached view is short, and stores its consumer index after reading a
// batch.
//
// Memory ordering. The kernel (net/xdp/xsk_queue.h) publishes with
// smp_store_release(producer) after writing descriptors, and reads our
// producer with smp_load_acquire before reading ours; it frees slots with
// smp_store_release(consumer) after reading them. So we need: an acquire load
// of the other side's index before touching descriptors, and a release store
// of our index after touching them. Go's sync/atomic loads and stores are
// sequentially consistent, which is stronger than both: the compiler does not
// move ordinary loads and stores across them, and they compile to what
// smp_load_acquire/smp_store_release compile to or stronger (amd64: MOV for
// loads, which x86 orders as acquire, and XCHG, a full barrier, for stores;
// arm64: LDAR and STLR). The flags word is read with an atomic load too; after
// a producer's store (a full barrier on amd64, STLR then LDAR on arm64, which
// are not reordered) the flag we read is no older than our published index,
// so a need-wakeup the kernel set before seeing our batch is not missed.
type queue struct {
	mem      []byte // the whole mapping, for munmap
	producer *atomic.Uint32
	consumer *atomic.Uint32
	flags    *atomic.Uint32
	size     uint32
	mask     uint32

	// Producer rings keep cachedCons one ring size ahead of the real
	// consumer, so free slots are cachedCons - cachedProd.
	cachedProd uint32
	cachedCons uint32
}

// init points q into mem at the kernel's offsets and returns the address of
// the descriptor array, after checking that everything lies inside mem.
func (q *queue) init(mem []byte, off unix.XDPRingOffset, size uint32, descSize uintptr, producerSide bool) (unsafe.Pointer, error) {
	q.mem = mem // first, so Close unmaps it even if the offsets are bad
	end := uint64(len(mem))
	for _, o := range []uint64{off.Producer, off.Consumer, off.Flags} {
		if o%4 != 0 || o+4 > end {
			return nil, fmt.Errorf("afxdp: ring offset %d outside a %d-byte mapping", o, end)
		}
	}
	if off.Desc%8 != 0 || off.Desc+uint64(size)*uint64(descSize) > end {
		return nil, fmt.Errorf("afxdp: ring descriptors at %d (%d of %d bytes) outside a %d-byte mapping", off.Desc, size, descSize, end)
	}
	q.producer = (*atomic.Uint32)(unsafe.Pointer(&mem[off.Producer]))
	q.consumer = (*atomic.Uint32)(unsafe.Pointer(&mem[off.Consumer]))
	q.flags = (*atomic.Uint32)(unsafe.Pointer(&mem[off.Flags]))
	q.size = size
	q.mask = size - 1
	q.cachedProd = q.producer.Load()
	q.cachedCons = q.consumer.Load()
	if producerSide {
		q.cachedCons += size
	}
	return unsafe.Pointer(&mem[off.Desc]), nil
}

// unmap releases the mapping; the queue must not be used afterwards.
func (q *queue) unmap() error {
	if q.mem == nil {
		return nil
	}
	err := unix.Munmap(q.mem)
	*q = queue{}
	return err
}

// needWakeup reports whether the kernel set XDP_RING_NEED_WAKEUP.
func (q *queue) needWakeup() bool {
	return q.flags.Load()&unix.XDP_RING_NEED_WAKEUP != 0
}

// free (producer side) returns how many slots can be written now, reading
// the kernel's consumer index only if fewer than want are known to be free.
func (q *queue) free(want uint32) uint32 {
	n := q.cachedCons - q.cachedProd
	if n >= want {
		return n
	}
	q.cachedCons = q.consumer.Load() + q.size
	return q.cachedCons - q.cachedProd
}

// submit (producer side) publishes n written slots to the kernel.
func (q *queue) submit(n uint32) {
	q.cachedProd += n
	q.producer.Store(q.cachedProd)
}

// ready (consumer side) returns how many slots, up to want, can be read now
// starting at cachedCons, reading the kernel's producer index only if fewer
// than want are known.
func (q *queue) ready(want uint32) uint32 {
	n := q.cachedProd - q.cachedCons
	if n < want {
		q.cachedProd = q.producer.Load()
		n = q.cachedProd - q.cachedCons
	}
	// A producer index more than a ring ahead is a kernel bug; never read
	// a slot twice in one batch because of it.
	return min(n, want, q.size)
}

// release (consumer side) hands n read slots back to the kernel.
func (q *queue) release(n uint32) {
	q.cachedCons += n
	q.consumer.Store(q.cachedCons)
}

// pending (consumer side) reports whether the kernel has produced anything
// not yet read, without consuming it.
func (q *queue) pending() bool {
	return q.cachedProd != q.cachedCons || q.producer.Load() != q.cachedCons
}

// outstanding (producer side) reports whether the kernel has not yet
// consumed everything we submitted.
func (q *queue) outstanding() bool {
	return q.consumer.Load() != q.cachedProd
}
