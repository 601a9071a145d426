package admin

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"xlb/dataplane"
)

// The exported metrics; METRICS.md documents each (keep the two in step: a
// test compares them).
var (
	queueLabels   = []string{"queue"}
	serviceLabels = []string{"service"}
	backendLabels = []string{"service", "backend", "ip"}

	descQueueRX = prometheus.NewDesc("xlb_queue_rx_packets_total",
		"Frames a worker of this rx queue decided: tx + pass + drops.", queueLabels, nil)
	descQueueTX = prometheus.NewDesc("xlb_queue_tx_packets_total",
		"Frames forwarded to a backend (rewritten and put on the TX ring).", queueLabels, nil)
	descQueuePass = prometheus.NewDesc("xlb_queue_pass_packets_total",
		"Frames that were not VIP traffic, left to the host kernel.", queueLabels, nil)
	descQueueDrops = prometheus.NewDesc("xlb_queue_drop_packets_total",
		"Frames dropped, by reason.", []string{"queue", "reason"}, nil)
	descQueueEvictions = prometheus.NewDesc("xlb_queue_conntrack_evictions_total",
		"Live tracking entries displaced by this queue's new flows because their bucket was full.", queueLabels, nil)
	descQueueNotRecorded = prometheus.NewDesc("xlb_queue_conntrack_not_recorded_total",
		"New flows this queue forwarded without a tracking entry because it was over its new-entry rate (conntrack_new_entry_rate).", queueLabels, nil)
	descQueueTooBigSent = prometheus.NewDesc("xlb_queue_icmp_too_big_sent_total",
		"Too-big drops answered with ICMP fragmentation needed / packet too big to the sender.", queueLabels, nil)

	descQUICRouted = prometheus.NewDesc("xlb_quic_cid_routed_total",
		"UDP packets of services with QUIC-LB sent to the backend whose server ID their connection ID carries.", queueLabels, nil)
	descQUICFallback = prometheus.NewDesc("xlb_quic_cid_fallback_total",
		"UDP packets of services with QUIC-LB that took the usual path (tracking, Maglev) instead, by reason.", []string{"queue", "reason"}, nil)

	descAFXDPDrops = prometheus.NewDesc("xlb_afxdp_drop_packets_total",
		"Frames lost on the queue's AF_XDP socket, by reason: the kernel's (rx_ring_full, rx_dropped, rx_invalid_descs, tx_invalid_descs) and ours (tx_ring_full).",
		[]string{"queue", "reason"}, nil)
	descAFXDPFillEmpty = prometheus.NewDesc("xlb_afxdp_fill_ring_empty_total",
		"Times the kernel found the queue's fill ring empty (no buffer for a received frame).", queueLabels, nil)
	descXDPFrames = prometheus.NewDesc("xlb_xdp_frames_total",
		"Frames the XDP program saw, by verdict.", []string{"verdict"}, nil)
	descXDPRetagged = prometheus.NewDesc("xlb_xdp_retagged_frames_total",
		"Frames whose VLAN tag the XDP program put back from the receive metadata.", nil, nil)

	descCTEntries = prometheus.NewDesc("xlb_conntrack_entries",
		"Entries stored in the tracking table (live, or expired and not yet reclaimed).", nil, nil)
	descCTCapacity = prometheus.NewDesc("xlb_conntrack_capacity",
		"Entries the tracking table can hold.", nil, nil)
	descCTInserts = prometheus.NewDesc("xlb_conntrack_inserts_total",
		"New keys stored in the tracking table.", nil, nil)
	descCTUpdates = prometheus.NewDesc("xlb_conntrack_updates_total",
		"Live tracking entries overwritten in place.", nil, nil)
	descCTEvictions = prometheus.NewDesc("xlb_conntrack_evictions_total",
		"Live tracking entries displaced because their bucket was full.", nil, nil)
	descCTEvicted = prometheus.NewDesc("xlb_conntrack_evicted_entries_total",
		"Live tracking entries displaced, by the state of the entry: half_open (on probation: only a SYN, or only a flow's first packet, seen) or established.", []string{"state"}, nil)
	descCTRefused = prometheus.NewDesc("xlb_conntrack_refused_total",
		"New tracking entries on probation not stored because both their buckets held only established entries (the flow was forwarded untracked).", nil, nil)
	descCTSpills = prometheus.NewDesc("xlb_conntrack_spills_total",
		"New keys stored in their second bucket because their first was full.", nil, nil)
	descCTMoves = prometheus.NewDesc("xlb_conntrack_moves_total",
		"Keys moved to their other bucket to make room for a new key instead of evicting a live entry.", nil, nil)
	descCTReclaimed = prometheus.NewDesc("xlb_conntrack_reclaimed_total",
		"Expired tracking entries whose slot was reused.", nil, nil)
	descCTDeletes = prometheus.NewDesc("xlb_conntrack_deletes_total",
		"Tracking entries removed.", nil, nil)
	descCTFaults = prometheus.NewDesc("xlb_conntrack_faults_total",
		"Memory faults contained in the mapping of the table kept in state_dir (its file truncated or changed under xlb); the first replaced it by an empty table in memory.", nil, nil)

	descGeneration = prometheus.NewDesc("xlb_snapshot_generation",
		"Generation of the published snapshot; it grows with every change of configuration, health, weight or drain.", nil, nil)

	descReloadOK = prometheus.NewDesc("xlb_reload_success_total",
		"Configuration reloads (SIGHUP) applied.", nil, nil)
	descReloadFail = prometheus.NewDesc("xlb_reload_failure_total",
		"Configuration reloads (SIGHUP) rejected: invalid file, or a change that needs a restart; the running configuration stayed.", nil, nil)

	descMTU = prometheus.NewDesc("xlb_interface_mtu_bytes",
		"The interface's MTU, as last seen.", nil, nil)
	descMaxMTU = prometheus.NewDesc("xlb_interface_max_mtu_bytes",
		"The largest MTU whose frames fit dataplane.frame_size; longer VIP frames are dropped by the kernel (rx_dropped).", nil, nil)
	descMTUTooLarge = prometheus.NewDesc("xlb_interface_mtu_too_large_total",
		"Changes of the interface that set its MTU above xlb_interface_max_mtu_bytes.", nil, nil)

	descSvcPackets = prometheus.NewDesc("xlb_service_forwarded_packets_total",
		"Frames forwarded to the service's backends.", serviceLabels, nil)
	descSvcBytes = prometheus.NewDesc("xlb_service_forwarded_bytes_total",
		"Bytes of the frames forwarded to the service's backends, as sent (encapsulation included).", serviceLabels, nil)
	descSvcNew = prometheus.NewDesc("xlb_service_new_connections_total",
		"Forwarded frames that created or replaced a tracking entry.", serviceLabels, nil)
	descSvcDrops = prometheus.NewDesc("xlb_service_drop_packets_total",
		"Frames for the service dropped, by reason.", []string{"service", "reason"}, nil)
	descSvcSide = prometheus.NewDesc("xlb_service_side",
		"Side of the eligible set: 0 primary, 1 failover.", serviceLabels, nil)
	descSvcEligible = prometheus.NewDesc("xlb_service_eligible_backends",
		"Backends in the eligible set.", serviceLabels, nil)
	descSvcSwitches = prometheus.NewDesc("xlb_service_failover_switches_total",
		"Switches of the eligible set to the failover side and back to primary.", []string{"service", "to"}, nil)
	descSvcBackends = prometheus.NewDesc("xlb_service_backends",
		"Current (not removed) backends of the service.", serviceLabels, nil)

	descBePackets = prometheus.NewDesc("xlb_backend_forwarded_packets_total",
		"Frames forwarded to the backend.", backendLabels, nil)
	descBeBytes = prometheus.NewDesc("xlb_backend_forwarded_bytes_total",
		"Bytes of the frames forwarded to the backend, as sent (encapsulation included).", backendLabels, nil)
	descBeNew = prometheus.NewDesc("xlb_backend_new_connections_total",
		"Forwarded frames to the backend that created or replaced a tracking entry.", backendLabels, nil)
	descBeHealthy = prometheus.NewDesc("xlb_backend_healthy",
		"1 when the backend passes its health check.", backendLabels, nil)
	descBeWeight = prometheus.NewDesc("xlb_backend_weight",
		"Weight the backend is selected with.", backendLabels, nil)
	descBeEligible = prometheus.NewDesc("xlb_backend_eligible",
		"1 when the backend is in its service's eligible set.", backendLabels, nil)
	descBeReady = prometheus.NewDesc("xlb_backend_ready",
		"1 when the backend's next-hop MAC is known; frames are never sent to a backend that is not ready.", backendLabels, nil)
	descBeRemoved = prometheus.NewDesc("xlb_backend_removed",
		"1 when the backend left the configuration or was drained by an operator; it is never selected again.", backendLabels, nil)
	descBeDraining = prometheus.NewDesc("xlb_backend_draining",
		"1 while a removed backend's existing flows still reach it.", backendLabels, nil)

	descSvcWeightFallback = prometheus.NewDesc("xlb_service_weight_fallback",
		"1 while a WEIGHTED_MAGLEV service uses equal weights because a backend reported a missing or invalid weight (W1a); xlb_backend_weight_state says which.", serviceLabels, nil)
	descBeWeightState = prometheus.NewDesc("xlb_backend_weight_state",
		"1 for what the backend's latest health-check reply said about its weight (state: VALID, MISSING_WEIGHT, INVALID_WEIGHT, UNAVAILABLE_WEIGHT), 0 for the other states; WEIGHTED_MAGLEV services only.",
		[]string{"service", "backend", "ip", "state"}, nil)

	allDescs = []*prometheus.Desc{
		descQueueRX, descQueueTX, descQueuePass, descQueueDrops, descQueueEvictions, descQueueNotRecorded, descQueueTooBigSent,
		descQUICRouted, descQUICFallback,
		descAFXDPDrops, descAFXDPFillEmpty, descXDPFrames, descXDPRetagged,
		descCTEntries, descCTCapacity, descCTInserts, descCTUpdates, descCTEvictions, descCTEvicted, descCTRefused, descCTSpills, descCTMoves, descCTReclaimed, descCTDeletes, descCTFaults,
		descGeneration, descReloadOK, descReloadFail,
		descSvcPackets, descSvcBytes, descSvcNew, descSvcDrops, descSvcSide, descSvcEligible, descSvcBackends, descSvcSwitches,
		descBePackets, descBeBytes, descBeNew, descBeHealthy, descBeWeight, descBeEligible, descBeReady,
		descBeRemoved, descBeDraining, descSvcWeightFallback, descBeWeightState,
		descMTU, descMaxMTU, descMTUTooLarge,
	}
)

// Collector exports a source's status as Prometheus metrics, read when
// scraped.
type Collector struct {
	src Source
}

// NewCollector returns a collector of src.
func NewCollector(src Source) *Collector { return &Collector{src: src} }

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect reads the source's status once and sends every metric.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	r := c.src.Status()
	send := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels []string) {
		m, err := prometheus.NewConstMetric(d, t, v, labels...)
		if err != nil {
			// A label value that is not UTF-8: the handler logs it and
			// serves the other metrics (no panic on what a config holds).
			m = prometheus.NewInvalidMetric(d, err)
		}
		ch <- m
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		send(d, prometheus.CounterValue, float64(v), labels)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		send(d, prometheus.GaugeValue, v, labels)
	}
	// Every reason is exported, zeros too, so a series exists before its
	// first drop and rate() sees that first drop.
	drops := func(d *prometheus.Desc, ds *Drops, label string) {
		for _, reason := range reasons() {
			counter(d, ds[reason], label, reason.String())
		}
	}

	for i := range r.Queues {
		q := &r.Queues[i]
		l := strconv.Itoa(q.Queue)
		counter(descQueueRX, q.RX, l)
		counter(descQueueTX, q.TX, l)
		counter(descQueuePass, q.Pass, l)
		counter(descQueueEvictions, q.Evictions, l)
		counter(descQueueNotRecorded, q.NotRecorded, l)
		counter(descQueueTooBigSent, q.TooBigSent, l)
		drops(descQueueDrops, &q.Drops, l)
		counter(descQUICRouted, q.QUIC.Routed(), l)
		for _, o := range cidFallbacks() {
			counter(descQUICFallback, q.QUIC[o], l, o.String())
		}
	}
	if rt := r.Runtime; rt != nil {
		for i := range rt.Queues {
			q := &rt.Queues[i]
			l := strconv.Itoa(q.Queue)
			counter(descAFXDPDrops, q.TxFull, l, "tx_ring_full")
			// Without the kernel's counters (unreadable) their series
			// are left out rather than exported as zeros.
			if k := q.Kernel; k != nil {
				counter(descAFXDPDrops, k.RxRingFull, l, "rx_ring_full")
				counter(descAFXDPDrops, k.RxDropped, l, "rx_dropped")
				counter(descAFXDPDrops, k.RxInvalidDescs, l, "rx_invalid_descs")
				counter(descAFXDPDrops, k.TxInvalidDescs, l, "tx_invalid_descs")
				counter(descAFXDPFillEmpty, k.FillRingEmpty, l)
			}
		}
		if rt.MaxMTU > 0 {
			gauge(descMTU, float64(rt.MTU))
			gauge(descMaxMTU, float64(rt.MaxMTU))
			counter(descMTUTooLarge, rt.MTUTooLarge)
		}
		if x := rt.XDPProgram; x != nil {
			counter(descXDPFrames, x.Redirected, "redirected")
			counter(descXDPFrames, x.PassedNoSocket, "passed_no_socket")
			counter(descXDPFrames, x.PassedNotVIP, "passed_not_vip")
			counter(descXDPFrames, x.PassedNDP, "passed_ndp")
			counter(descXDPFrames, x.PassedShort, "passed_short")
			counter(descXDPFrames, x.PassedMalformedVIP, "passed_malformed_vip")
			counter(descXDPFrames, x.PassedVLANOffload, "passed_vlan_offload")
			counter(descXDPRetagged, x.Retagged)
		}
	}
	if ct := r.Conntrack; ct != nil {
		gauge(descCTEntries, float64(ct.Entries))
		gauge(descCTCapacity, float64(ct.Capacity))
		counter(descCTInserts, ct.Inserts)
		counter(descCTUpdates, ct.Updates)
		counter(descCTEvictions, ct.Evictions)
		counter(descCTEvicted, ct.EvictionsHalfOpen, "half_open")
		counter(descCTEvicted, ct.Evictions-ct.EvictionsHalfOpen, "established")
		counter(descCTRefused, ct.Refused)
		counter(descCTSpills, ct.Spills)
		counter(descCTMoves, ct.Moves)
		counter(descCTReclaimed, ct.Reclaimed)
		counter(descCTDeletes, ct.Deletes)
		counter(descCTFaults, ct.Faults)
	}
	gauge(descGeneration, float64(r.Generation))
	if rl := r.Reloads; rl != nil {
		counter(descReloadOK, rl.Success)
		counter(descReloadFail, rl.Failure)
	}

	// A label set must appear once per metric or the whole scrape fails;
	// two backends could only share one (service, name, ip) across a
	// service removal and re-creation, so the first one wins.
	seen := map[[3]string]bool{}
	backend := func(service string, b *BackendReport) {
		key := [3]string{service, b.Name, b.IP}
		if seen[key] {
			return
		}
		seen[key] = true
		l := key[:]
		counter(descBePackets, b.ForwardedPackets, l...)
		counter(descBeBytes, b.ForwardedBytes, l...)
		counter(descBeNew, b.NewConnections, l...)
		gauge(descBeHealthy, b01(b.Healthy), l...)
		gauge(descBeWeight, float64(b.Weight), l...)
		gauge(descBeEligible, b01(b.Eligible), l...)
		gauge(descBeReady, b01(b.Ready), l...)
		gauge(descBeRemoved, b01(b.Removed), l...)
		gauge(descBeDraining, b01(b.Draining), l...)
		if b.WeightState != "" {
			for _, st := range weightStates {
				gauge(descBeWeightState, b01(b.WeightState == st), append(l, st)...)
			}
		}
	}
	for i := range r.Services {
		s := &r.Services[i]
		counter(descSvcSwitches, s.FailoverSwitches[0], s.Name, "failover")
		counter(descSvcSwitches, s.FailoverSwitches[1], s.Name, "primary")
		counter(descSvcPackets, s.ForwardedPackets, s.Name)
		counter(descSvcBytes, s.ForwardedBytes, s.Name)
		counter(descSvcNew, s.NewConnections, s.Name)
		drops(descSvcDrops, &s.Drops, s.Name)
		gauge(descSvcSide, b01(s.Side == dataplane.SideFailover.String()), s.Name)
		gauge(descSvcEligible, float64(len(s.Eligible)), s.Name)
		if s.Weighted {
			gauge(descSvcWeightFallback, b01(len(s.WeightFallback) > 0), s.Name)
		}
		current := 0
		for j := range s.Backends {
			if !s.Backends[j].Removed {
				current++
			}
			backend(s.Name, &s.Backends[j])
		}
		gauge(descSvcBackends, float64(current), s.Name)
	}
	for i := range r.Orphans {
		backend("", &r.Orphans[i])
	}
}

// weightStates are the values of xlb_backend_weight_state's state label.
var weightStates = [...]string{"VALID", "MISSING_WEIGHT", "INVALID_WEIGHT", "UNAVAILABLE_WEIGHT"}

func b01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
