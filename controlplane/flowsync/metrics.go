package flowsync

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Syncer's counters, read by its Collector.
type metrics struct {
	sentRing, sentRefresh        atomic.Uint64
	received                     atomic.Uint64
	stored, refreshed            atomic.Uint64
	refused                      [numReasons]atomic.Uint64
	unresolved                   atomic.Uint64
	datagramsSent, datagramsRecv atomic.Uint64
	bytesSent, bytesRecv         atomic.Uint64
	sendErrors                   atomic.Uint64
	passBehind                   atomic.Uint64
	passMs, periodMs             atomic.Int64
	pullsServed, pullRecords     atomic.Uint64
	pullRecordsIn                atomic.Uint64
	lag                          prometheus.Histogram
}

func (m *metrics) init() {
	m.lag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "xlb_flowsync_lag_seconds",
		Help:    "Receiver's wall clock minus the sender's, per datagram that authenticated (negative: 0).",
		Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
	})
}

var (
	descSent = prometheus.NewDesc("xlb_flowsync_records_sent_total",
		"Records sent (each to every peer: records, not copies), by source: ring (a flow became established or moved here) or refresh (the walk of live flows).",
		[]string{"source"}, nil)
	descReceived = prometheus.NewDesc("xlb_flowsync_records_received_total",
		"Records received in datagrams that authenticated.", nil, nil)
	descStored = prometheus.NewDesc("xlb_flowsync_records_stored_total",
		"Records stored where the table had no live entry for the flow (datagrams and pulls).", nil, nil)
	descRefreshed = prometheus.NewDesc("xlb_flowsync_records_refreshed_total",
		"Records that refreshed a live entry for the same backend.", nil, nil)
	descRefused = prometheus.NewDesc("xlb_flowsync_refused_total",
		"Refused, by reason: datagrams (and pull messages) for key, version, malformed, repeat, stale, peer; records for unknown_backend, conflict, expired, table_full.",
		[]string{"reason"}, nil)
	descUnresolved = prometheus.NewDesc("xlb_flowsync_records_unresolved_total",
		"Flows not sent: their backend is no longer in the snapshot.", nil, nil)
	descRingDrops = prometheus.NewDesc("xlb_flowsync_ring_drops_total",
		"Records the workers dropped on a full ring (the sync goroutine behind or over its rate bound).", nil, nil)
	descDatagrams = prometheus.NewDesc("xlb_flowsync_datagrams_total",
		"Datagrams sent (one per peer) and received (authenticated and accepted).", []string{"direction"}, nil)
	descBytes = prometheus.NewDesc("xlb_flowsync_bytes_total",
		"UDP payload bytes sent (all peers) and received (everything read).", []string{"direction"}, nil)
	descSendErrors = prometheus.NewDesc("xlb_flowsync_send_errors_total",
		"Datagrams the socket refused to send.", nil, nil)
	descPassBehind = prometheus.NewDesc("xlb_flowsync_refresh_passes_behind_total",
		"Refresh passes that took longer than their period (the rate bound left them too few records).", nil, nil)
	descPass = prometheus.NewDesc("xlb_flowsync_refresh_pass_seconds",
		"Duration of the last complete refresh pass.", nil, nil)
	descPeriod = prometheus.NewDesc("xlb_flowsync_refresh_period_seconds",
		"The refresh pass's period: a third of the shortest idle timeout, in [1 s, 60 s].", nil, nil)
	descPeersUp = prometheus.NewDesc("xlb_flowsync_peers_up",
		"Peers heard within the last 3 s.", nil, nil)
	descPeers = prometheus.NewDesc("xlb_flowsync_peers",
		"Peers configured.", nil, nil)
	descPullsServed = prometheus.NewDesc("xlb_flowsync_pulls_served_total",
		"Table pulls served to peers to the end.", nil, nil)
	descPullRecords = prometheus.NewDesc("xlb_flowsync_pull_records_total",
		"Records sent in table pulls served (out) and received in this instance's pulls (in).", []string{"direction"}, nil)
)

var allDescs = []*prometheus.Desc{descSent, descReceived, descStored, descRefreshed, descRefused, descUnresolved,
	descRingDrops, descDatagrams, descBytes, descSendErrors, descPassBehind, descPass, descPeriod, descPeersUp,
	descPeers, descPullsServed, descPullRecords}

// collector is the Syncer's prometheus.Collector.
type collector struct{ s *Syncer }

// Collector returns the Syncer's metrics (names prefixed xlb_flowsync_).
func (s *Syncer) Collector() prometheus.Collector { return collector{s} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
	c.s.m.lag.Describe(ch)
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	m := &s.m
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter(descSent, m.sentRing.Load(), "ring")
	counter(descSent, m.sentRefresh.Load(), "refresh")
	counter(descReceived, m.received.Load())
	counter(descStored, m.stored.Load())
	counter(descRefreshed, m.refreshed.Load())
	for r := reasonKey; r < numReasons; r++ {
		counter(descRefused, m.refused[r].Load(), r.String())
	}
	counter(descUnresolved, m.unresolved.Load())
	var drops uint64
	for _, rg := range s.eng.rings(nil) {
		drops += rg.Drops()
	}
	counter(descRingDrops, drops)
	counter(descDatagrams, m.datagramsSent.Load(), "sent")
	counter(descDatagrams, m.datagramsRecv.Load(), "received")
	counter(descBytes, m.bytesSent.Load(), "sent")
	counter(descBytes, m.bytesRecv.Load(), "received")
	counter(descSendErrors, m.sendErrors.Load())
	counter(descPassBehind, m.passBehind.Load())
	gauge(descPass, float64(m.passMs.Load())/1000)
	gauge(descPeriod, float64(m.periodMs.Load())/1000)
	st := s.state.Load()
	wall := s.wall()
	up := 0
	for _, p := range st.peers {
		if p.up(wall) {
			up++
		}
	}
	gauge(descPeersUp, float64(up))
	gauge(descPeers, float64(len(st.peers)))
	counter(descPullsServed, m.pullsServed.Load())
	counter(descPullRecords, m.pullRecords.Load(), "out")
	counter(descPullRecords, m.pullRecordsIn.Load(), "in")
	m.lag.Collect(ch)
}
