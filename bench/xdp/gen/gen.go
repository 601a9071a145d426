package gen

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"xlb/bench/xdp/sink"
	"xlb/dataplane/afxdp"
)

var epoch = time.Now()

// Now is the clock of the payload timestamps: ns on the monotonic clock
// since the process started (the sink reads the same clock).
func Now() int64 { return int64(time.Since(epoch)) }

// monoBase is CLOCK_MONOTONIC at epoch: Go's monotonic readings are that
// clock, so FromMono(t) = t - monoBase within the time of a vDSO call.
var monoBase = func() int64 {
	best, base := int64(1<<62), int64(0)
	for range 16 {
		a := Now()
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			return 0
		}
		b := Now()
		if b-a < best {
			best, base = b-a, ts.Nano()-(a+b)/2
		}
	}
	return base
}()

// FromMono converts a CLOCK_MONOTONIC time (a sink receive stamp) to Now's
// clock.
func FromMono(t int64) int64 { return t - monoBase }

// SocketOpts are the options of the generator's socket: 2048-byte chunks,
// no extra headroom, and twice as many chunks as the fill, rx and TX rings
// hold together, so that Alloc finds free chunks while the fill ring is
// stocked for receiving.
func SocketOpts() afxdp.Opts {
	o := afxdp.DefaultOpts()
	o.FrameSize = 2048
	o.Headroom = 0
	o.NumFrames = 8192
	o.FillRingSize = 2048
	o.RxRingSize = 2048
	o.TxRingSize = 1024
	o.CompletionRingSize = 2048
	o.ZeroCopy = afxdp.ZeroCopyAuto
	return o
}

// StallMin is the shortest gap in the spinning loop counted as a stall.
const StallMin = 20 * time.Microsecond

// Config is one generator run.
type Config struct {
	// Socket sends; Sink receives what comes back (nil: Socket, one
	// port for both).
	Socket  *afxdp.Socket
	Sink    *afxdp.Socket
	Frames  *Frames
	Counter *sink.Counter // receives what comes back
	Run     uint32        // run id written into every frame
	// Duration of sending; Rate in frames per second (0: as fast as the
	// socket takes them).
	Duration time.Duration
	Rate     float64
	// Drain is how long to go on receiving after sending stops, at most;
	// receiving ends sooner once nothing arrived for DrainIdle.
	Drain, DrainIdle time.Duration
	// CPU pins the generator's thread (-1: not pinned).
	CPU int
	// Batch is the most frames queued per Transmit (default 32, what the
	// kernel sends per wakeup in copy mode).
	Batch int
	// Spin, when sending at a Rate, polls the rx ring and the clock
	// between frames instead of sleeping in poll(2): frames leave when
	// they are due, one at a time, not in a burst after a late timer
	// wakeup (tens of µs on a virtual machine), and frames coming back
	// are seen at once, without a wakeup. It takes the generator's core
	// whole; only kernel threads of a higher class preempt it.
	Spin bool
	// Backlog, when sending at a Rate, is the most frames sent late in
	// one go after the loop was held up; what fell due beyond it is
	// skipped (Result.Skipped), so that a stall does not become a burst.
	// 0: no bound, every frame is sent.
	Backlog int
	// Coalesce, when sending at a Rate, sends what is due at most once
	// per Coalesce, together (at most Batch frames a call): trains at the
	// same mean rate, of rate x Coalesce frames, as a NIC's receive
	// interrupt coalescing of that window hands them to the middle hop,
	// and one send syscall per train. 0: each frame when it is due.
	Coalesce time.Duration
}

// Result is what one run did.
type Result struct {
	// Queued frames were put on the TX ring; Sent is what the kernel
	// completed (sent, or dropped by the device) before receiving ended.
	Queued, Sent uint64
	// SendTime is from the first to the last frame queued.
	SendTime time.Duration
	// ThreadCPU is the CPU time of the generator's thread.
	ThreadCPU time.Duration
	// Skipped counts frames a paced loop did not send: they fell due
	// while it was held up, beyond Backlog.
	Skipped uint64
	// Stamped counts the frames received with the sink's receive time
	// (the others are timed when the loop read them).
	Stamped uint64
	// Stalls counts, when spinning, the gaps between two turns of the
	// loop longer than StallMin (the thread was off its core, or the
	// machine's host took the core); StallTime is their sum and MaxGap
	// the longest gap. Frames that came back meanwhile are timestamped
	// late by up to that much.
	Stalls    int
	StallTime time.Duration
	MaxGap    time.Duration
	// Socket's counters over the run (kernel drops included), and the
	// Sink's (the same when there is no Sink of its own).
	Stats, SinkStats afxdp.Stats
}

// Run sends and receives on cfg.Socket from one OS thread until the
// duration and drain are over or ctx ends. The thread is pinned to cfg.CPU
// and ends with the run (it is never handed back to the scheduler pinned).
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Socket == nil || cfg.Frames == nil || cfg.Counter == nil {
		return Result{}, errors.New("gen: socket, frames and counter are required")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 32
	}
	if cfg.Drain <= 0 {
		cfg.Drain = 200 * time.Millisecond
	}
	if cfg.DrainIdle <= 0 {
		cfg.DrainIdle = 20 * time.Millisecond
	}
	type out struct {
		r   Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the pinned thread ends here
		// Short sleeps between paced sends end on time, not up to 50 µs
		// late (the default timer slack).
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)
		if cfg.CPU >= 0 {
			var set unix.CPUSet
			set.Set(cfg.CPU)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				done <- out{err: fmt.Errorf("gen: pinning to cpu %d: %w", cfg.CPU, err)}
				return
			}
		}
		r, err := loop(ctx, &cfg)
		done <- out{r, err}
	}()
	o := <-done
	return o.r, o.err
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func loop(ctx context.Context, cfg *Config) (Result, error) {
	s, fr, c := cfg.Socket, cfg.Frames, cfg.Counter
	rs := cfg.Sink
	if rs == nil {
		rs = s
	}
	batch := cfg.Batch
	rx := make([]unix.XDPDesc, 256)
	tx := make([]unix.XDPDesc, batch)
	addrs := make([]uint64, max(256, batch))
	fds := []unix.PollFd{{Fd: int32(rs.FD()), Events: unix.POLLIN}}
	before, err := s.Stats()
	if err != nil {
		return Result{}, err
	}
	sinkBefore, err := rs.Stats()
	if err != nil {
		return Result{}, err
	}
	cpu0 := threadCPU()
	var r Result
	flow := 0
	start := Now()
	end := start + int64(cfg.Duration)
	drainEnd := end + int64(cfg.Drain)
	lastRx := start
	lastTx := start
	nextTrain := start // paced with Coalesce: no frame before
	frameLen := uint32(fr.Len())
	prev := start
	for iter := 0; ; iter++ {
		if iter&1023 == 0 && ctx.Err() != nil {
			return r, ctx.Err()
		}
		now := Now()
		if gap := now - prev; cfg.Spin && cfg.Rate > 0 && gap > int64(StallMin) {
			r.Stalls++
			r.StallTime += time.Duration(gap)
			r.MaxGap = max(r.MaxGap, time.Duration(gap))
		}
		prev = now
		busy := false
		if n := rs.Receive(rx); n > 0 {
			t := Now()
			for i, d := range rx[:n] {
				at := t
				if buf, off := rs.Chunk(d.Addr); buf != nil {
					if ts, ok := sink.RxStamp(buf, off); ok {
						at = FromMono(ts)
						r.Stamped++
					}
				}
				c.Record(rs.Frame(d), at)
				addrs[i] = d.Addr
			}
			rs.Recycle(addrs[:n])
			lastRx, busy = t, true
		}
		r.Sent += uint64(s.Complete())
		if now < end {
			want := batch
			if cfg.Rate > 0 {
				due := int64(cfg.Rate*float64(now-start)/1e9) + 1 - int64(r.Queued+r.Skipped)
				if cfg.Backlog > 0 && due > int64(cfg.Backlog) {
					// Held up (the host took the core, a send call
					// waited, the sink's kernel thread ran): skip what
					// fell due meanwhile rather than send it in a burst
					// that the middle hop would then queue, or lose, as
					// if it had come so.
					r.Skipped += uint64(due - int64(cfg.Backlog))
					due = int64(cfg.Backlog)
				}
				if now < nextTrain {
					due = 0
				} else if due > 0 && due <= int64(batch) {
					nextTrain = now + int64(cfg.Coalesce)
				}
				want = int(min(int64(batch), max(due, 0)))
			}
			if want > 0 {
				k := s.Alloc(addrs[:want])
				ts := Now()
				for i, a := range addrs[:k] {
					buf, off := s.Chunk(a)
					fr.Write(buf[off:], flow, ts, cfg.Run)
					if flow++; flow == fr.n {
						flow = 0
					}
					tx[i] = unix.XDPDesc{Addr: a, Len: frameLen}
				}
				used := s.Transmit(tx[:k])
				if used < k {
					for i := used; i < k; i++ {
						addrs[i] = tx[i].Addr
					}
					s.Recycle(addrs[used:k])
				}
				if used > 0 {
					r.Queued += uint64(used)
					lastTx, busy = ts, true
				}
			}
		} else if now > drainEnd || (r.Sent >= r.Queued && now-lastRx > int64(cfg.DrainIdle) && now-end > int64(cfg.DrainIdle)) {
			break
		}
		if !busy {
			idleWait(s, fds, cfg, start, end, r.Queued)
		}
	}
	r.SendTime = time.Duration(lastTx - start)
	r.ThreadCPU = threadCPU() - cpu0
	after, err := s.Stats()
	if err != nil {
		return r, err
	}
	sinkAfter, err := rs.Stats()
	if err != nil {
		return r, err
	}
	r.Stats, r.SinkStats = diffStats(after, before), diffStats(sinkAfter, sinkBefore)
	return r, nil
}

func diffStats(a, b afxdp.Stats) afxdp.Stats {
	k, kb := a.Kernel, b.Kernel
	a.Kernel = afxdp.KernelStats{
		RxDropped: k.RxDropped - kb.RxDropped, RxInvalidDescs: k.RxInvalidDescs - kb.RxInvalidDescs,
		TxInvalidDescs: k.TxInvalidDescs - kb.TxInvalidDescs, RxRingFull: k.RxRingFull - kb.RxRingFull,
		FillRingEmpty: k.FillRingEmpty - kb.FillRingEmpty, TxRingEmpty: k.TxRingEmpty - kb.TxRingEmpty,
	}
	c, cb := a.Counters, b.Counters
	a.Counters = afxdp.Counters{
		RxFrames: c.RxFrames - cb.RxFrames, TxFrames: c.TxFrames - cb.TxFrames, Completed: c.Completed - cb.Completed,
		Recycled: c.Recycled - cb.Recycled, RxInvalid: c.RxInvalid - cb.RxInvalid, TxInvalid: c.TxInvalid - cb.TxInvalid,
		RecycleInvalid: c.RecycleInvalid - cb.RecycleInvalid, CompletionInvalid: c.CompletionInvalid - cb.CompletionInvalid,
		Kicks: c.Kicks - cb.Kicks, KickTransient: c.KickTransient - cb.KickTransient, KickErrors: c.KickErrors - cb.KickErrors,
		LastKickErrno: c.LastKickErrno, Polls: c.Polls - cb.Polls,
	}
	return a
}

// idleWait is the loop's idle path (nothing received, nothing to send now).
// The kernel thread that delivers our frames may share this core, so the
// generator sleeps rather than spins: in poll(2) on the socket until a
// frame arrives, or until the next frame is due when sending at a rate
// (at most 100 µs). At full speed it only yields. With Spin at a rate it
// returns at once: the loop polls.
func idleWait(s *afxdp.Socket, fds []unix.PollFd, cfg *Config, start, end int64, queued uint64) {
	if cfg.Spin && cfg.Rate > 0 {
		return
	}
	now := Now()
	if cfg.Rate <= 0 && now < end {
		_, _ = s.Poll(0)
		_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		return
	}
	wait := int64(100 * time.Microsecond)
	if now < end {
		due := start + int64(float64(queued)*1e9/cfg.Rate)
		wait = min(wait, due-now)
	}
	if wait <= 0 {
		return
	}
	fds[0].Revents = 0
	ts := unix.NsecToTimespec(wait)
	_, _ = unix.Ppoll(fds, &ts, nil)
}
