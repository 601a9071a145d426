package afxdp

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// MaxPollTimeout bounds one Poll, so a sleeping worker notices shutdown.
const MaxPollTimeout = time.Second

var errPollRevents = errors.New("afxdp: poll: POLLERR or POLLNVAL on the socket")

// Poll is for a worker's idle path, after Receive found nothing. It returns
// true at once, without a syscall, if the rx ring holds frames. Otherwise:
// with timeout 0 it calls poll(2) only if the kernel set need-wakeup on the
// fill ring (the driver waits for that call to go on receiving) and returns
// at once; with a timeout > 0 it sleeps in poll(2) until frames arrive or the
// timeout (at most MaxPollTimeout) passes, which also wakes the driver. So a
// busy worker calls Poll(0) between batches, and an idle one Poll(d) to stop
// burning its core. It reports whether frames are waiting.
func (s *Socket) Poll(timeout time.Duration) (bool, error) {
	if s.closed {
		return false, ErrClosed
	}
	if s.rx.pending() {
		return true, nil
	}
	if timeout <= 0 && !s.fill.needWakeup() {
		return false, nil
	}
	ms := 0
	if timeout > 0 {
		// Round up: poll(2) counts whole milliseconds and 0 would spin.
		ms = int((min(timeout, MaxPollTimeout) + time.Millisecond - 1) / time.Millisecond)
	}
	s.c.polls.Add(1)
	s.pollfd[0].Revents = 0
	n, err := unix.Poll(s.pollfd[:], ms)
	if n > 0 {
		s.c.pollWakeups.Add(1)
	}
	if err != nil {
		if errors.Is(err, unix.EINTR) {
			return s.rx.pending(), nil
		}
		return false, fmt.Errorf("afxdp: poll: %w", err)
	}
	if s.pollfd[0].Revents&(unix.POLLERR|unix.POLLNVAL) != 0 {
		return false, errPollRevents
	}
	return s.rx.pending(), nil
}
