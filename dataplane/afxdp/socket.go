package afxdp

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BindMode is how the kernel bound a socket.
type BindMode uint8

const (
	// ModeCopy: the kernel copies frames between the driver and the umem.
	ModeCopy BindMode = iota
	// ModeZeroCopy: the driver DMAs straight into the umem.
	ModeZeroCopy
)

func (m BindMode) String() string {
	if m == ModeZeroCopy {
		return "zero-copy"
	}
	return "copy"
}

// Socket is one AF_XDP socket with its own umem, bound to one rx queue.
// See the package comment for which methods may run concurrently.
type Socket struct {
	fd      int
	ifindex int
	queueID int
	opts    Opts
	mode    BindMode

	umem umem
	fill fillQueue
	rx   rxQueue
	tx   txQueue
	comp completionQueue

	// kickPending: the last TX wakeup was refused for now (EAGAIN...) or
	// did not send everything; Complete retries it.
	kickPending bool
	pollfd      [1]unix.PollFd
	// bindAttempts counts bind calls, EBUSY retries included (tests).
	bindAttempts int

	c counters

	// mu orders Close against Stats; the hot path does not take it.
	mu     sync.Mutex
	closed bool
}

// New creates an AF_XDP socket with its umem and rings and binds it to rx
// queue queue of interface ifindex. The fill ring is stocked before the bind,
// so frames arriving at once find buffers. To receive, an XDP program on the
// interface must redirect into an XSKMAP holding FD() at key queue.
//
// Errors wrap ErrInvalidOpts, ErrUnsupported, ErrZeroCopyUnsupported,
// ErrQueueBusy, or the errno of the step that failed.
func New(ifindex, queue int, opts Opts) (*Socket, error) {
	err := opts.Validate()
	var bad []string
	if ifindex <= 0 || ifindex > math.MaxInt32 {
		bad = append(bad, fmt.Sprintf("ifindex %d: must be > 0", ifindex))
	}
	if queue < 0 || queue > math.MaxInt32 {
		bad = append(bad, fmt.Sprintf("queue %d: must be >= 0", queue))
	}
	if len(bad) > 0 {
		err = errors.Join(err, fmt.Errorf("%w: %s", ErrInvalidOpts, strings.Join(bad, "; ")))
	}
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EAFNOSUPPORT) {
			return nil, fmt.Errorf("%w: AF_XDP socket: %v", ErrUnsupported, err)
		}
		return nil, fmt.Errorf("afxdp: creating AF_XDP socket: %w", err)
	}
	s := &Socket{fd: fd, ifindex: ifindex, queueID: queue, opts: opts}
	if err := s.setup(); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Socket) setup() error {
	o := &s.opts
	u, err := newUmem(o.NumFrames, o.FrameSize)
	if err != nil {
		return err
	}
	s.umem = u
	reg := unix.XDPUmemReg{
		Addr:     uint64(uintptr(unsafe.Pointer(unsafe.SliceData(u.mem)))),
		Len:      uint64(len(u.mem)),
		Size:     o.FrameSize,
		Headroom: o.Headroom,
	}
	if err := setsockoptUmemReg(s.fd, &reg); err != nil {
		return fmt.Errorf("afxdp: registering umem of %d bytes (RLIMIT_MEMLOCK applies without CAP_IPC_LOCK): %w", len(u.mem), err)
	}
	for _, r := range []struct {
		opt  int
		name string
		n    uint32
	}{
		{unix.XDP_UMEM_FILL_RING, "fill", o.FillRingSize},
		{unix.XDP_UMEM_COMPLETION_RING, "completion", o.CompletionRingSize},
		{unix.XDP_RX_RING, "rx", o.RxRingSize},
		{unix.XDP_TX_RING, "tx", o.TxRingSize},
	} {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_XDP, r.opt, int(r.n)); err != nil {
			return fmt.Errorf("afxdp: sizing %s ring to %d: %w", r.name, r.n, err)
		}
	}
	off, n, err := getMmapOffsets(s.fd)
	if err != nil {
		return fmt.Errorf("afxdp: reading ring offsets: %w", err)
	}
	if n < unsafe.Sizeof(off) {
		return fmt.Errorf("%w: ring offsets without flags words (need-wakeup needs Linux >= 5.4)", ErrUnsupported)
	}
	var mems [4][]byte
	for i, r := range []struct {
		name     string
		pgoff    int64
		off      unix.XDPRingOffset
		n        uint32
		descSize uintptr
	}{
		{"fill", unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, o.FillRingSize, 8},
		{"completion", unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, o.CompletionRingSize, 8},
		{"rx", unix.XDP_PGOFF_RX_RING, off.Rx, o.RxRingSize, unsafe.Sizeof(unix.XDPDesc{})},
		{"tx", unix.XDP_PGOFF_TX_RING, off.Tx, o.TxRingSize, unsafe.Sizeof(unix.XDPDesc{})},
	} {
		size := int(r.off.Desc) + int(r.n)*int(r.descSize)
		m, err := unix.Mmap(s.fd, r.pgoff, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			s.adoptMappings(mems)
			return fmt.Errorf("afxdp: mapping %s ring (%d bytes): %w", r.name, size, err)
		}
		mems[i] = m
	}
	if err := s.initRings(mems, off); err != nil {
		return err
	}
	s.fill.refill(&s.umem)
	if err := s.bind(); err != nil {
		return err
	}
	s.pollfd[0] = unix.PollFd{Fd: int32(s.fd), Events: unix.POLLIN}
	return nil
}

// initRings points the four queues into their mappings (fill, completion,
// rx, tx) at the kernel's offsets. The queues own the mappings from here on,
// also on error.
func (s *Socket) initRings(mems [4][]byte, off unix.XDPMmapOffsets) error {
	o := &s.opts
	p, err := s.fill.init(mems[0], off.Fr, o.FillRingSize, 8, true)
	if err == nil {
		s.fill.setDescs(p)
	}
	p, err2 := s.comp.init(mems[1], off.Cr, o.CompletionRingSize, 8, false)
	if err2 == nil {
		s.comp.setDescs(p)
	}
	p, err3 := s.rx.init(mems[2], off.Rx, o.RxRingSize, unsafe.Sizeof(unix.XDPDesc{}), false)
	if err3 == nil {
		s.rx.setDescs(p)
	}
	p, err4 := s.tx.init(mems[3], off.Tx, o.TxRingSize, unsafe.Sizeof(unix.XDPDesc{}), true)
	if err4 == nil {
		s.tx.setDescs(p)
	}
	return errors.Join(err, err2, err3, err4)
}

// adoptMappings hands already-made mappings to the queues so that Close
// unmaps them after a failed setup.
func (s *Socket) adoptMappings(mems [4][]byte) {
	s.fill.mem, s.comp.mem, s.rx.mem, s.tx.mem = mems[0], mems[1], mems[2], mems[3]
}

// Close unmaps the four rings and the umem and closes the socket, which
// unbinds the queue and takes the socket out of any XSKMAP. Frames and
// slices obtained from the socket are invalid afterwards. Close is
// idempotent; it must not run concurrently with the hot-path methods, which
// return 0 (or ErrClosed) once it has run.
func (s *Socket) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	errs := []error{s.fill.unmap(), s.comp.unmap(), s.rx.unmap(), s.tx.unmap()}
	if s.fd >= 0 {
		errs = append(errs, unix.Close(s.fd))
		s.fd = -1
	}
	errs = append(errs, s.umem.unmap())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("afxdp: closing: %w", err)
	}
	return nil
}

// FD returns the socket's file descriptor, for the XSKMAP (-1 once closed).
func (s *Socket) FD() int { return s.fd }

// Mode returns how the kernel bound the socket.
func (s *Socket) Mode() BindMode { return s.mode }

// Ifindex returns the interface the socket is bound to.
func (s *Socket) Ifindex() int { return s.ifindex }

// Queue returns the rx queue the socket is bound to.
func (s *Socket) Queue() int { return s.queueID }

// Opts returns the options the socket was made with.
func (s *Socket) Opts() Opts { return s.opts }

// FillNeedsWakeup reports whether the kernel set need-wakeup on the fill
// ring: it needs a poll(2) to go on receiving (see Poll).
func (s *Socket) FillNeedsWakeup() bool { return !s.closed && s.fill.needWakeup() }

// TxNeedsWakeup reports whether the kernel set need-wakeup on the TX ring:
// it needs a sendto(2) to go on sending; Transmit does that itself. In copy
// mode the flag stays set, since the kernel sends from the syscall.
func (s *Socket) TxNeedsWakeup() bool { return !s.closed && s.tx.needWakeup() }
