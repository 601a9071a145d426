package appliance

import (
	"fmt"

	"go.uber.org/zap"

	"xlb/config"
	"xlb/controlplane/admin"
	"xlb/dataplane/afxdp"
	"xlb/dataplane/worker"
)

// workerBatch is how many frames a worker takes from its frame port per round.
const workerBatch = worker.DefaultBatch

// queue is one rx queue the appliance serves: the CPU its worker is pinned
// to, its AF_XDP socket, the frame port the engine sees on it, and the worker.
type queue struct {
	num    int
	cpu    int // -1: not pinned
	socket *afxdp.Socket
	port   *afxdp.FramePort
	worker *worker.Worker
}

// openQueues opens one AF_XDP socket per queue, with its frame port, and
// registers each in the program's XSKMAP. Every socket opened is closed by
// the teardown, a failed start's too.
func (s *stack) openQueues() error {
	d := &s.cfg.Dataplane
	opts := afxdp.DefaultOpts()
	opts.FrameSize = uint32(d.FrameSize)
	rs := uint32(d.RingSize)
	opts.FillRingSize, opts.CompletionRingSize, opts.RxRingSize, opts.TxRingSize = rs, rs, rs, rs
	// Enough chunks for a full fill ring and a full TX ring at once.
	opts.NumFrames = 2 * rs
	opts.ZeroCopy = zeroCopy(d.ZeroCopy)
	s.undo = append(s.undo, func() {
		for _, q := range s.queues {
			if q.socket == nil {
				continue
			}
			if err := q.socket.Close(); err != nil {
				s.log.Error("closing AF_XDP socket", zap.Int("queue", q.num), zap.Error(err))
			}
		}
	})
	for _, q := range s.queues {
		sock, err := afxdp.New(s.link.Attrs().Index, q.num, opts)
		if err != nil {
			return privErr(fmt.Sprintf("AF_XDP socket on queue %d", q.num), err)
		}
		q.socket = sock
		if q.port, err = afxdp.NewFramePort(sock, workerBatch); err != nil {
			return fmt.Errorf("queue %d: %w", q.num, err)
		}
		if err := s.objs.RegisterSocket(q.num, sock.FD()); err != nil {
			return privErr(fmt.Sprintf("registering queue %d's socket", q.num), err)
		}
		s.log.Info("AF_XDP socket bound", zap.Int("queue", q.num), zap.Stringer("bind_mode", sock.Mode()),
			zap.Stringer("zero_copy", d.ZeroCopy))
	}
	return nil
}

// status reports the queue's socket, frame port and loop counters, read now.
func (q *queue) status() admin.QueueRuntime {
	lc, rc := q.worker.Counters(), q.port.Counters()
	st, err := q.socket.Stats()
	c := st.Counters
	qr := admin.QueueRuntime{
		Queue: q.socket.Queue(), BindMode: q.socket.Mode().String(),
		Batches: lc.Batches, Frames: lc.Frames, Spins: lc.Spins, Sleeps: lc.Sleeps,
		Passed: rc.Passed, Dropped: rc.Dropped, TxFull: rc.TxFull, Invalid: rc.Invalid,
		RxFrames: c.RxFrames, TxFrames: c.TxFrames, Completed: c.Completed, Recycled: c.Recycled,
		BadDescs: c.RxInvalid + c.TxInvalid + c.RecycleInvalid + c.CompletionInvalid,
		Kicks:    c.Kicks, KickErrors: c.KickErrors, Polls: c.Polls,
	}
	if cpu := q.worker.CPU(); cpu >= 0 {
		qr.CPU = &cpu
	}
	if err != nil {
		qr.Error = err.Error()
	} else {
		k := st.Kernel
		qr.Kernel = &admin.KernelStats{RxDropped: k.RxDropped, RxRingFull: k.RxRingFull, FillRingEmpty: k.FillRingEmpty,
			RxInvalidDescs: k.RxInvalidDescs, TxInvalidDescs: k.TxInvalidDescs, TxRingEmpty: k.TxRingEmpty}
	}
	return qr
}

// runtime is the "runtime" part of Status: the interface, the modes, each
// queue, the program's counters and the health-check targets.
func (s *stack) runtime() *admin.Runtime {
	rt := &admin.Runtime{
		Interface: s.cfg.Dataplane.Interface, Ifindex: s.link.Attrs().Index,
		XDPMode: string(s.mode), ZeroCopy: s.cfg.Dataplane.ZeroCopy.String(),
		Queues:       make([]admin.QueueRuntime, len(s.queues)),
		HealthChecks: healthStatus(s.hc.Status(), *s.feeds.Load()),
		MTU:          int(s.mtu.mtu.Load()), MaxMTU: s.mtu.limit, MTUTooLarge: s.mtu.tooLarge.Load(),
	}
	for i, q := range s.queues {
		rt.Queues[i] = q.status()
	}
	if st, err := s.objs.Stats(); err == nil {
		rt.XDPProgram = &admin.XDPProgramStats{Redirected: st.Redirected, PassedNoSocket: st.PassedNoSocket,
			PassedNotVIP: st.PassedNotVIP, PassedNDP: st.PassedNDP, PassedShort: st.PassedShort,
			PassedMalformedVIP: st.PassedMalformedVIP, PassedVLANOffload: st.PassedVLANOffload, Retagged: st.Retagged}
	} else {
		rt.XDPProgramError = err.Error()
	}
	return rt
}

// logSummary is the startup line: everything an operator checks first.
func (s *stack) logSummary() {
	var queues []int
	var binds, pinned []string
	for _, q := range s.queues {
		queues = append(queues, q.num)
		binds = append(binds, fmt.Sprintf("%d:%s", q.num, q.socket.Mode()))
		if q.cpu >= 0 {
			pinned = append(pinned, fmt.Sprintf("%d:cpu%d", q.num, q.cpu))
		}
	}
	vips := make([]string, len(s.vips))
	for i, v := range s.vips {
		vips[i] = v.String()
	}
	svcs := make([]string, len(s.cfg.Services))
	for i, svc := range s.cfg.Services {
		n := 0
		for _, g := range svc.Groups {
			n += len(g.Endpoints)
		}
		svcs[i] = fmt.Sprintf("%s (%s, %d backends)", svc.Name, svc.ForwardingMethod, n)
	}
	s.log.Info("xlb running",
		zap.Ints("queues", queues),
		zap.Strings("pinned", pinned),
		zap.String("xdp_mode", string(s.mode)),
		zap.Strings("bind_modes", binds),
		zap.Strings("vips", vips),
		zap.Strings("services", svcs),
		zap.String("config", s.cfg.Summary()),
		zap.String("admin", s.admin.Addr().String()))
}

func zeroCopy(z config.ZeroCopy) afxdp.ZeroCopy {
	switch z {
	case config.ZeroCopyOn:
		return afxdp.ZeroCopyOn
	case config.ZeroCopyOff:
		return afxdp.ZeroCopyOff
	}
	return afxdp.ZeroCopyAuto
}
