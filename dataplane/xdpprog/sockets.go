package xdpprog

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
)

// RegisterSocket makes the AF_XDP socket fd the destination of VIP frames
// that arrive on rx queue queue, replacing any earlier one. The socket must
// have its UMEM and RX ring set up (the kernel refuses it otherwise) and be
// bound to that queue of the interface the program is attached to, or the
// kernel drops what it redirects there. The kernel takes the socket out of
// the map when the socket is released, so a worker that dies passes its
// queue back to the kernel. It wraps ErrQueue when queue is not below
// Load's maxQueues.
func (o *Objects) RegisterSocket(queue int, fd int) error {
	if err := o.checkQueue(queue); err != nil {
		return err
	}
	if fd < 0 {
		return fmt.Errorf("xdpprog: registering queue %d: bad socket fd %d", queue, fd)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.Sockets == nil {
		return ErrClosed
	}
	// The socket first, then the record of it, as asavie's Register does.
	if err := o.Sockets.Update(uint32(queue), uint32(fd), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("xdpprog: registering socket for queue %d: %w", queue, err)
	}
	if err := o.Queues.Update(uint32(queue), uint32(1), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("xdpprog: recording queue %d: %w", queue, err)
	}
	return nil
}

// UnregisterSocket stops redirecting rx queue queue: its VIP frames go to
// the kernel again (XDP_PASS). Unregistering a queue without a socket is
// not an error.
func (o *Objects) UnregisterSocket(queue int) error {
	if err := o.checkQueue(queue); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.Sockets == nil {
		return ErrClosed
	}
	if err := o.Sockets.Delete(uint32(queue)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xdpprog: unregistering queue %d: %w", queue, err)
	}
	if err := o.Queues.Delete(uint32(queue)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xdpprog: unrecording queue %d: %w", queue, err)
	}
	return nil
}

// RegisteredQueues lists, sorted, the queues registered and not
// unregistered (an XSKMAP cannot be read from user space; the Queues map
// records them). A socket closed without UnregisterSocket leaves the
// kernel's map but not this record.
func (o *Objects) RegisteredQueues() ([]int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.Queues == nil {
		return nil, ErrClosed
	}
	var (
		qs   []int
		q, v uint32
	)
	it := o.Queues.Iterate()
	for it.Next(&q, &v) {
		qs = append(qs, int(q))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("xdpprog: reading queues: %w", err)
	}
	slices.Sort(qs)
	return qs, nil
}

func (o *Objects) checkQueue(queue int) error {
	if queue < 0 || queue >= o.maxQueues {
		return fmt.Errorf("%w: queue %d, loaded for %d", ErrQueue, queue, o.maxQueues)
	}
	return nil
}
