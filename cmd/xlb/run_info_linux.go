package main

import (
	"fmt"
	"net/netip"

	"go.uber.org/zap"

	"xlb/config"
	"xlb/dataplane/afxdp"
	"xlb/dataplane/worker"
	"xlb/dataplane/xdpprog"
)

// runInfo is the "runtime" part of /status: the interface, the modes and,
// per queue, the socket's and the loop's counters, read at request time.
type runInfo struct {
	ifname   string
	ifindex  int
	mode     xdpprog.Mode
	zeroCopy config.ZeroCopy
	objs     *xdpprog.Objects
	sockets  []*afxdp.Socket
	rings    []*afxdp.Ring
	workers  []*worker.Worker
	health   func() []healthInfo
}

// queueInfo is one queue in /status.
type queueInfo struct {
	Queue    int    `json:"queue"`
	CPU      *int   `json:"cpu,omitempty"`
	BindMode string `json:"bind_mode"`
	// Loop: what the worker's loop did.
	Batches uint64 `json:"batches"`
	Frames  uint64 `json:"frames"`
	Spins   uint64 `json:"idle_spins"`
	Sleeps  uint64 `json:"idle_sleeps"`
	// Ring: frames the engine passed (AF_XDP cannot hand them to the
	// kernel: recycled), dropped, or forwarded into a full TX ring.
	Passed  uint64 `json:"ring_passed_recycled"`
	Dropped uint64 `json:"ring_dropped"`
	TxFull  uint64 `json:"tx_ring_full_drops"`
	Invalid uint64 `json:"ring_invalid"`
	// Socket: AF_XDP descriptors and wakeups.
	RxFrames   uint64 `json:"socket_rx_frames"`
	TxFrames   uint64 `json:"socket_tx_frames"`
	Completed  uint64 `json:"socket_tx_completed"`
	Recycled   uint64 `json:"socket_recycled"`
	BadDescs   uint64 `json:"socket_invalid_descs"`
	Kicks      uint64 `json:"socket_tx_kicks"`
	KickErrors uint64 `json:"socket_tx_kick_errors"`
	Polls      uint64 `json:"socket_polls"`
	// Kernel: XDP_STATISTICS.
	Kernel *kernelInfo `json:"kernel,omitempty"`
	Error  string      `json:"error,omitempty"`
}

type kernelInfo struct {
	RxDropped      uint64 `json:"rx_dropped"`
	RxRingFull     uint64 `json:"rx_ring_full"`
	FillRingEmpty  uint64 `json:"fill_ring_empty"`
	RxInvalidDescs uint64 `json:"rx_invalid_descs"`
	TxInvalidDescs uint64 `json:"tx_invalid_descs"`
	TxRingEmpty    uint64 `json:"tx_ring_empty"`
}

func (r *runInfo) get() map[string]any {
	qs := make([]queueInfo, len(r.sockets))
	for i, s := range r.sockets {
		lc, rc := r.workers[i].Counters(), r.rings[i].Counters()
		st, err := s.Stats()
		c := st.Counters
		qi := queueInfo{
			Queue: s.Queue(), BindMode: s.Mode().String(),
			Batches: lc.Batches, Frames: lc.Frames, Spins: lc.Spins, Sleeps: lc.Sleeps,
			Passed: rc.Passed, Dropped: rc.Dropped, TxFull: rc.TxFull, Invalid: rc.Invalid,
			RxFrames: c.RxFrames, TxFrames: c.TxFrames, Completed: c.Completed, Recycled: c.Recycled,
			BadDescs: c.RxInvalid + c.TxInvalid + c.RecycleInvalid + c.CompletionInvalid,
			Kicks:    c.Kicks, KickErrors: c.KickErrors, Polls: c.Polls,
		}
		if cpu := r.workers[i].CPU(); cpu >= 0 {
			qi.CPU = &cpu
		}
		if err != nil {
			qi.Error = err.Error()
		} else {
			k := st.Kernel
			qi.Kernel = &kernelInfo{RxDropped: k.RxDropped, RxRingFull: k.RxRingFull, FillRingEmpty: k.FillRingEmpty,
				RxInvalidDescs: k.RxInvalidDescs, TxInvalidDescs: k.TxInvalidDescs, TxRingEmpty: k.TxRingEmpty}
		}
		qs[i] = qi
	}
	m := map[string]any{
		"interface": r.ifname,
		"ifindex":   r.ifindex,
		"xdp_mode":  string(r.mode),
		"zero_copy": r.zeroCopy.String(),
		"queues":    qs,
	}
	if r.health != nil {
		m["health_checks"] = r.health()
	}
	if st, err := r.objs.Stats(); err == nil {
		m["xdp_program"] = map[string]uint64{
			"redirected": st.Redirected, "passed_no_socket": st.PassedNoSocket,
			"passed_not_vip": st.PassedNotVIP, "passed_ndp": st.PassedNDP, "passed_short": st.PassedShort,
		}
	} else {
		m["xdp_program_error"] = err.Error()
	}
	return m
}

// logSummary is the startup line: everything an operator checks first.
func logSummary(log *zap.Logger, cfg *config.Config, queues, cpus []int, mode xdpprog.Mode, sockets []*afxdp.Socket, vips []netip.Addr, admin string) {
	binds := make([]string, len(sockets))
	for i, s := range sockets {
		binds[i] = fmt.Sprintf("%d:%s", s.Queue(), s.Mode())
	}
	var pinned []string
	for i, c := range cpus {
		if c >= 0 {
			pinned = append(pinned, fmt.Sprintf("%d:cpu%d", queues[i], c))
		}
	}
	vipText := make([]string, len(vips))
	for i, v := range vips {
		vipText[i] = v.String()
	}
	svcs := make([]string, len(cfg.Services))
	for i, s := range cfg.Services {
		n := 0
		for _, g := range s.Groups {
			n += len(g.Endpoints)
		}
		svcs[i] = fmt.Sprintf("%s (%s, %d backends)", s.Name, s.ForwardingMethod, n)
	}
	log.Info("xlb running",
		zap.Ints("queues", queues),
		zap.Strings("pinned", pinned),
		zap.String("xdp_mode", string(mode)),
		zap.Strings("bind_modes", binds),
		zap.Strings("vips", vipText),
		zap.Strings("services", svcs),
		zap.String("config", cfg.Summary()),
		zap.String("admin", admin))
}
