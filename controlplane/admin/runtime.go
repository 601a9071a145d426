package admin

// Runtime is the "runtime" part of /status: what the running appliance
// has on its interface (XDP and bind modes, per-queue socket and ring
// counters), its XDP program's counters and its health-check targets.
type Runtime struct {
	Interface string         `json:"interface"`
	Ifindex   int            `json:"ifindex"`
	XDPMode   string         `json:"xdp_mode"`
	ZeroCopy  string         `json:"zero_copy"`
	Queues    []QueueRuntime `json:"queues"`
	// MTU is the interface's, as last seen; MaxMTU the largest whose
	// frames fit dataplane.frame_size (longer ones are lost as
	// rx_dropped); MTUTooLarge counts the changes that set the MTU above it.
	MTU         int    `json:"mtu"`
	MaxMTU      int    `json:"max_mtu"`
	MTUTooLarge uint64 `json:"mtu_too_large_changes"`
	// HealthChecks are the targets probed, one per check and address.
	HealthChecks []HealthCheckStatus `json:"health_checks"`
	// XDPProgram, or XDPProgramError when its counters could not be read.
	XDPProgram      *XDPProgramStats `json:"xdp_program,omitempty"`
	XDPProgramError string           `json:"xdp_program_error,omitempty"`
}

// QueueRuntime is one queue's AF_XDP socket, ring and worker loop.
type QueueRuntime struct {
	Queue int `json:"queue"`
	// CPU the worker is pinned to (absent: not pinned).
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
	// Kernel: XDP_STATISTICS, or Error when they could not be read.
	Kernel *KernelStats `json:"kernel,omitempty"`
	Error  string       `json:"error,omitempty"`
}

// KernelStats are the kernel's counters of one AF_XDP socket.
type KernelStats struct {
	RxDropped      uint64 `json:"rx_dropped"`
	RxRingFull     uint64 `json:"rx_ring_full"`
	FillRingEmpty  uint64 `json:"fill_ring_empty"`
	RxInvalidDescs uint64 `json:"rx_invalid_descs"`
	TxInvalidDescs uint64 `json:"tx_invalid_descs"`
	TxRingEmpty    uint64 `json:"tx_ring_empty"`
}

// XDPProgramStats are the XDP program's verdict counters.
type XDPProgramStats struct {
	Redirected     uint64 `json:"redirected"`
	PassedNoSocket uint64 `json:"passed_no_socket"`
	PassedNotVIP   uint64 `json:"passed_not_vip"`
	PassedNDP      uint64 `json:"passed_ndp"`
	PassedShort    uint64 `json:"passed_short"`
	// PassedMalformedVIP: VIP frames with a bad header, passed to the
	// kernel, which drops them.
	PassedMalformedVIP uint64 `json:"passed_malformed_vip"`
	// PassedVLANOffload: frames whose VLAN tag the receive metadata held
	// and could not be put back, passed to the kernel.
	PassedVLANOffload uint64 `json:"passed_vlan_offload"`
	// Retagged: frames whose VLAN tag the program put back from the
	// receive metadata (also counted under their verdict).
	Retagged uint64 `json:"retagged"`
}

// HealthCheckStatus is one health-check target: a check probing one
// address for the services listed.
type HealthCheckStatus struct {
	Target   string   `json:"target"`
	Check    string   `json:"check"`
	Type     string   `json:"type"`
	Address  string   `json:"address"`
	Services []string `json:"services"`
	Healthy  bool     `json:"healthy"`
	Probes   uint64   `json:"probes"`
	// The latest probe (absent before the first).
	Pass        *bool    `json:"last_pass,omitempty"`
	Reason      string   `json:"last_reason,omitempty"`
	Weight      *uint32  `json:"last_weight,omitempty"`
	WeightState string   `json:"last_weight_state,omitempty"`
	LatencyMs   *float64 `json:"last_latency_ms,omitempty"`
	At          string   `json:"last_at,omitempty"`
}
