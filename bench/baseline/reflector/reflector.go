package reflector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/link"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"xlb/dataplane/afxdp"
	"xlb/dataplane/worker"
	"xlb/dataplane/xdpprog"
	"xlb/internal/nsx"
)

// ErrConfig is wrapped by Start for a configuration it refuses.
var ErrConfig = errors.New("reflector: invalid configuration")

// Config says where the reflector runs and where it sends. Zero values take
// the defaults named.
type Config struct {
	// NS is the named network namespace (/run/netns/NS) of Iface; "" is
	// the caller's.
	NS string
	// Iface is the interface frames arrive on and leave by.
	Iface string
	// Queues are the rx queues served, one socket and worker each
	// (default: every rx queue of Iface).
	Queues []int
	// CPUs pins worker i to CPUs[i] (default: not pinned); when set it
	// has one entry per queue.
	CPUs []int
	// VIPs are the destinations the XDP program redirects to the sockets;
	// other traffic goes to the kernel.
	VIPs []netip.Addr
	// Backends are the destination MACs, taken in turn.
	Backends []net.HardwareAddr
	// Mode is the XDP attach mode (default xdpprog.ModeAuto).
	Mode xdpprog.Mode
	// ZeroCopy is the socket bind mode (default afxdp.ZeroCopyAuto).
	ZeroCopy afxdp.ZeroCopy
	// RingSize is the size of each of the four rings (default 2048), and
	// the umem holds twice as many frames, as xlb run sizes them.
	RingSize uint32
	// FrameSize is the umem chunk size, 2048 or 4096 (default 4096).
	FrameSize uint32
	// Batch, Spin and IdleWait are the worker policy (defaults those of
	// dataplane/worker: 64, 50µs, 10ms).
	Batch    int
	Spin     time.Duration
	IdleWait time.Duration
	// Log receives start and stop lines (default: none).
	Log *zap.Logger
}

func (c *Config) withDefaults(rxQueues int) error {
	var bad []string
	if c.Iface == "" {
		bad = append(bad, "Iface is required")
	}
	if len(c.Queues) == 0 {
		for q := range rxQueues {
			c.Queues = append(c.Queues, q)
		}
	}
	seen := map[int]bool{}
	for _, q := range c.Queues {
		if q < 0 || q >= xdpprog.MaxQueues || seen[q] {
			bad = append(bad, fmt.Sprintf("queue %d: want distinct queues 0..%d", q, xdpprog.MaxQueues-1))
		}
		seen[q] = true
	}
	if c.CPUs != nil && len(c.CPUs) != len(c.Queues) {
		bad = append(bad, fmt.Sprintf("%d CPUs for %d queues", len(c.CPUs), len(c.Queues)))
	}
	if len(c.VIPs) == 0 {
		bad = append(bad, "at least one VIP is required")
	}
	if len(c.Backends) == 0 {
		bad = append(bad, "at least one backend is required")
	}
	for _, m := range c.Backends {
		if len(m) != 6 {
			bad = append(bad, fmt.Sprintf("backend MAC %q: want 6 bytes", m))
		}
	}
	if c.Mode == "" {
		c.Mode = xdpprog.ModeAuto
	}
	if c.RingSize == 0 {
		c.RingSize = 2048
	}
	if c.FrameSize == 0 {
		c.FrameSize = 4096
	}
	if c.Batch == 0 {
		c.Batch = worker.DefaultBatch
	}
	if c.Batch < 0 || c.Batch > int(c.RingSize) {
		bad = append(bad, fmt.Sprintf("batch %d: want 1..RingSize", c.Batch))
	}
	if c.Spin == 0 {
		c.Spin = worker.DefaultSpin
	}
	if c.IdleWait == 0 {
		c.IdleWait = worker.DefaultIdleWait
	}
	if c.Spin < 0 || c.IdleWait < 0 || c.IdleWait > afxdp.MaxPollTimeout {
		bad = append(bad, fmt.Sprintf("spin %v, idle wait %v: want >= 0 and idle wait <= %v", c.Spin, c.IdleWait, afxdp.MaxPollTimeout))
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(bad, "; "))
	}
	return nil
}

func (c *Config) socketOpts() afxdp.Opts {
	o := afxdp.DefaultOpts()
	o.FrameSize = c.FrameSize
	o.FillRingSize, o.CompletionRingSize, o.RxRingSize, o.TxRingSize = c.RingSize, c.RingSize, c.RingSize, c.RingSize
	o.NumFrames = 2 * c.RingSize
	o.ZeroCopy = c.ZeroCopy
	return o
}

// Reflector is a running reflector.
type Reflector struct {
	cfg    Config
	link   nsx.Link
	objs   *xdpprog.Objects
	xdp    link.Link
	mode   xdpprog.Mode
	queues []*queue

	cancel context.CancelFunc
	wg     sync.WaitGroup
	errMu  sync.Mutex
	err    error

	closeOnce sync.Once
	closeErr  error
}

// Start loads xlb's XDP program with cfg.VIPs, attaches it to cfg.Iface,
// binds one AF_XDP socket per queue and starts the workers; frames are
// reflected once it returns. The workers stop when ctx ends or at Close;
// Close must be called either way to release everything.
func Start(ctx context.Context, cfg Config) (_ *Reflector, err error) {
	l, err := nsx.LookupLink(cfg.NS, cfg.Iface)
	if err != nil {
		if cfg.Iface == "" {
			return nil, fmt.Errorf("%w: Iface is required", ErrConfig)
		}
		return nil, fmt.Errorf("reflector: %w", err)
	}
	if err := cfg.withDefaults(l.RxQueues); err != nil {
		return nil, err
	}
	r := &Reflector{cfg: cfg, link: l}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	maxQueue := 0
	for _, q := range cfg.Queues {
		maxQueue = max(maxQueue, q)
	}
	if r.objs, err = xdpprog.Load(maxQueue + 1); err != nil {
		return nil, fmt.Errorf("reflector: %w", err)
	}
	if err := r.objs.SetVIPs(cfg.VIPs); err != nil {
		return nil, fmt.Errorf("reflector: %w", err)
	}
	err = nsx.Do(cfg.NS, func() error {
		var err error
		if r.xdp, r.mode, err = r.objs.Attach(l.Index, cfg.Mode); err != nil {
			return err
		}
		opts := cfg.socketOpts()
		for i, q := range cfg.Queues {
			s, err := afxdp.New(l.Index, q, opts)
			if err != nil {
				return fmt.Errorf("AF_XDP socket on queue %d: %w", q, err)
			}
			cpu := -1
			if cfg.CPUs != nil {
				cpu = cfg.CPUs[i]
			}
			r.queues = append(r.queues, newQueue(s, cpu, &cfg, l.MAC))
			if err := r.objs.RegisterSocket(q, s.FD()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reflector: %s: %w", nsx.Where(cfg.Iface, cfg.NS), err)
	}
	wctx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	for _, q := range r.queues {
		r.wg.Go(func() {
			if err := q.run(wctx.Done()); err != nil {
				r.errMu.Lock()
				if r.err == nil {
					r.err = err
				}
				r.errMu.Unlock()
				cfg.Log.Error("reflector worker stopped", zap.Int("queue", q.s.Queue()), zap.Error(err))
			}
		})
	}
	modes := make([]string, len(r.queues))
	for i, q := range r.queues {
		modes[i] = q.s.Mode().String()
	}
	cfg.Log.Info("reflector started", zap.String("iface", cfg.Iface), zap.String("ns", cfg.NS), zap.String("xdp_mode", string(r.mode)),
		zap.Ints("queues", cfg.Queues), zap.Strings("bind_modes", modes), zap.Int("backends", len(cfg.Backends)))
	return r, nil
}

// Mode is the XDP attach mode in use.
func (r *Reflector) Mode() xdpprog.Mode { return r.mode }

// BindModes are the sockets' bind modes (copy or zero-copy), by queue.
func (r *Reflector) BindModes() []afxdp.BindMode {
	out := make([]afxdp.BindMode, len(r.queues))
	for i, q := range r.queues {
		out[i] = q.s.Mode()
	}
	return out
}

// Link is the interface the reflector runs on.
func (r *Reflector) Link() nsx.Link { return r.link }

// Err is the error that stopped a worker, nil while all run.
func (r *Reflector) Err() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.err
}

// Close stops the workers, closes the sockets and detaches the program. It
// returns the first worker error, if any, with any error of its own; it is
// idempotent.
func (r *Reflector) Close() error {
	r.closeOnce.Do(func() {
		if r.cancel != nil {
			r.cancel()
		}
		r.wg.Wait()
		errs := []error{r.Err()}
		for _, q := range r.queues {
			errs = append(errs, q.s.Close())
		}
		if r.xdp != nil {
			errs = append(errs, r.xdp.Close())
		}
		if r.objs != nil {
			errs = append(errs, r.objs.Close())
		}
		if err := errors.Join(errs...); err != nil {
			r.closeErr = fmt.Errorf("reflector: %w", err)
		}
		r.cfg.Log.Info("reflector stopped")
	})
	return r.closeErr
}

// QueueStats are one queue's counters.
type QueueStats struct {
	Queue  int
	RX     uint64        // frames received
	TX     uint64        // frames put on the TX ring
	TxFull uint64        // frames recycled: the TX ring stayed full
	Short  uint64        // frames under 14 bytes, recycled
	CPU    time.Duration // CPU time of the worker's thread (user + system)
	Socket afxdp.Stats   // the socket's and the kernel's counters
}

// Drops are the frames lost at this queue: recycled by the worker, or
// dropped by the kernel for want of a fill buffer or rx ring room.
func (q QueueStats) Drops() uint64 {
	return q.TxFull + q.Short + q.Socket.Kernel.RxDropped + q.Socket.Kernel.RxRingFull
}

// Stats are the reflector's counters, summed, and per queue.
type Stats struct {
	RX, TX, Drops uint64
	// CPU is the CPU time of all workers' threads.
	CPU    time.Duration
	Queues []QueueStats
	// XDP are the program's verdicts: VIP frames of a queue without a
	// socket show up as PassedNoSocket.
	XDP xdpprog.Stats
}

// Stats reads the counters; safe from any goroutine while the reflector
// runs (after Close it returns the workers' last counts without the
// socket and program figures).
func (r *Reflector) Stats() Stats {
	var st Stats
	for _, q := range r.queues {
		qs := QueueStats{
			Queue:  q.s.Queue(),
			RX:     q.rx.Load(),
			TX:     q.tx.Load(),
			TxFull: q.txFull.Load(),
			Short:  q.short.Load(),
			CPU:    q.cpuTime(),
		}
		qs.Socket, _ = q.s.Stats()
		st.RX += qs.RX
		st.TX += qs.TX
		st.Drops += qs.Drops()
		st.CPU += qs.CPU
		st.Queues = append(st.Queues, qs)
	}
	if r.objs != nil {
		st.XDP, _ = r.objs.Stats()
	}
	return st
}

// queue is one socket and its worker.
type queue struct {
	s        *afxdp.Socket
	cpu      int
	batch    int
	spin     time.Duration
	idleWait time.Duration
	descs    []unix.XDPDesc
	left     []uint64
	backends [][6]byte
	src      [6]byte
	next     int // round-robin position

	rx, tx, txFull, short atomic.Uint64
	tid                   atomic.Int32 // the worker's thread while it runs
	cpuFinal              atomic.Int64 // its CPU time in ns once it stopped
}

func newQueue(s *afxdp.Socket, cpu int, cfg *Config, src net.HardwareAddr) *queue {
	q := &queue{
		s: s, cpu: cpu, batch: cfg.Batch, spin: cfg.Spin, idleWait: cfg.IdleWait,
		descs:    make([]unix.XDPDesc, cfg.Batch),
		left:     make([]uint64, cfg.Batch),
		backends: make([][6]byte, len(cfg.Backends)),
	}
	for i, m := range cfg.Backends {
		copy(q.backends[i][:], m)
	}
	copy(q.src[:], src)
	return q
}

// run is the worker: xlb's loop (dataplane/worker) with the reflection in
// place of the engine.
func (q *queue) run(done <-chan struct{}) error {
	runtime.LockOSThread()
	if q.cpu >= 0 {
		// A pinned thread is never handed back (it ends with the
		// goroutine), so no other goroutine inherits its CPU mask.
		var set unix.CPUSet
		set.Set(q.cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("queue %d: pinning to CPU %d: %w", q.s.Queue(), q.cpu, err)
		}
	} else {
		defer runtime.UnlockOSThread()
	}
	q.tid.Store(int32(unix.Gettid()))
	defer func() {
		q.cpuFinal.Store(int64(ownThreadCPU()))
		q.tid.Store(0)
	}()
	idle := false
	var idleSince time.Time
	for {
		select {
		case <-done:
			return nil
		default:
		}
		q.s.Complete()
		if n := q.s.Receive(q.descs); n > 0 {
			q.reflect(q.descs[:n])
			idle = false
			continue
		}
		now := time.Now()
		if !idle {
			idle, idleSince = true, now
		}
		var timeout time.Duration
		if now.Sub(idleSince) >= q.spin {
			timeout = q.idleWait
		}
		if _, err := q.s.Poll(timeout); err != nil {
			return fmt.Errorf("queue %d: %w", q.s.Queue(), err)
		}
	}
}

// reflect rewrites the MACs of the received frames and transmits them.
func (q *queue) reflect(descs []unix.XDPDesc) {
	n := len(descs)
	k, short := 0, 0
	for _, d := range descs {
		f := q.s.Frame(d)
		if len(f) < 14 {
			q.left[short] = d.Addr
			short++
			continue
		}
		copy(f[0:6], q.backends[q.next][:])
		copy(f[6:12], q.src[:])
		if q.next++; q.next == len(q.backends) {
			q.next = 0
		}
		descs[k] = d
		k++
	}
	if short > 0 {
		q.s.Recycle(q.left[:short])
		q.short.Store(q.short.Load() + uint64(short))
	}
	m := q.s.Transmit(descs[:k])
	if m < k {
		q.s.Complete()
		m += q.s.Transmit(descs[m:k])
	}
	if m < k {
		for i, d := range descs[m:k] {
			q.left[i] = d.Addr
		}
		q.s.Recycle(q.left[:k-m])
		q.txFull.Store(q.txFull.Load() + uint64(k-m))
	}
	// Single writer: a load and a store, no locked read-modify-write.
	q.rx.Store(q.rx.Load() + uint64(n))
	q.tx.Store(q.tx.Load() + uint64(m))
}

// cpuTime is the worker thread's CPU time: read from its thread clock while
// it runs, the figure it left when it stopped afterwards.
func (q *queue) cpuTime() time.Duration {
	if tid := q.tid.Load(); tid != 0 {
		if d, ok := threadCPU(tid); ok {
			return d
		}
	}
	return time.Duration(q.cpuFinal.Load())
}

// threadCPU reads the CPU clock of thread tid of this process
// (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) of the kernel's
// posix-cpu-timers: the clock pthread_getcpuclockid gives).
func threadCPU(tid int32) (time.Duration, bool) {
	clock := int32(^uint32(tid)<<3) | 4 | 2
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}

// ownThreadCPU is the calling thread's CPU time (user and system), on the
// same clock as threadCPU.
func ownThreadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
