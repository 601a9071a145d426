package afxdp

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

const maxBindBackoff = 50 * time.Millisecond

// bind binds the socket to its queue, retrying EBUSY for Opts.BindRetry with
// a doubling backoff: a closed socket's queue is freed by deferred kernel
// work, so an immediate re-bind can find it still taken. It then asks the
// kernel which mode it chose.
func (s *Socket) bind() error {
	var flags uint16
	if s.opts.NeedWakeup {
		flags |= unix.XDP_USE_NEED_WAKEUP
	}
	switch s.opts.ZeroCopy {
	case ZeroCopyOn:
		flags |= unix.XDP_ZEROCOPY
	case ZeroCopyOff:
		flags |= unix.XDP_COPY
	}
	// No mode flag (ZeroCopyAuto): the kernel tries zero-copy and falls
	// back to copy where the driver refuses it.
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(s.ifindex), QueueID: uint32(s.queueID)}
	deadline := time.Now().Add(s.opts.BindRetry)
	wait := time.Millisecond
	for {
		s.bindAttempts++
		err := unix.Bind(s.fd, sa)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EBUSY) {
			return s.bindError(err)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w: ifindex %d queue %d: still held by another AF_XDP socket after %d attempts in %v",
				ErrQueueBusy, s.ifindex, s.queueID, s.bindAttempts, s.opts.BindRetry)
		}
		time.Sleep(min(wait, left))
		wait = min(2*wait, maxBindBackoff)
	}
	v, err := unix.GetsockoptInt(s.fd, unix.SOL_XDP, unix.XDP_OPTIONS)
	if err != nil {
		return fmt.Errorf("afxdp: reading bind mode (XDP_OPTIONS): %w", err)
	}
	if v&unix.XDP_OPTIONS_ZEROCOPY != 0 {
		s.mode = ModeZeroCopy
	}
	return nil
}

func (s *Socket) bindError(err error) error {
	where := fmt.Sprintf("ifindex %d queue %d", s.ifindex, s.queueID)
	switch {
	case s.opts.ZeroCopy == ZeroCopyOn && errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("%w: binding %s with XDP_ZEROCOPY: %v (use zero_copy = auto or off)", ErrZeroCopyUnsupported, where, err)
	case errors.Is(err, unix.ENODEV):
		return fmt.Errorf("afxdp: binding %s: no such interface: %w", where, err)
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("afxdp: binding %s: %w (is the queue beyond the interface's queues?)", where, err)
	}
	return fmt.Errorf("afxdp: binding %s: %w", where, err)
}
