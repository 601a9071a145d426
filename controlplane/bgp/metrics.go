package bgp

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The speaker's metrics (doc.go lists them).
var (
	descSessionUp = prometheus.NewDesc("xlb_bgp_session_up",
		"1 while the BGP session with the neighbor is ESTABLISHED.", []string{"neighbor"}, nil)
	descSessionTransitions = prometheus.NewDesc("xlb_bgp_session_transitions_total",
		"Times the BGP session with the neighbor came up or went down.", []string{"neighbor"}, nil)
	descVIPAnnounced = prometheus.NewDesc("xlb_bgp_vip_announced",
		"1 while the VIP is announced over BGP.", []string{"vip"}, nil)
	descAnnouncements = prometheus.NewDesc("xlb_bgp_announcements_total",
		"VIP routes announced (graceful-shutdown re-announcements included).", nil, nil)
	descWithdrawals = prometheus.NewDesc("xlb_bgp_withdrawals_total",
		"VIP routes withdrawn.", nil, nil)
)

// Describe implements prometheus.Collector: a Speaker can be registered as
// it is.
func (s *Speaker) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessionUp, descSessionTransitions, descVIPAnnounced, descAnnouncements, descWithdrawals} {
		ch <- d
	}
}

// Collect implements prometheus.Collector, from the speaker's own state (no
// call into GoBGP).
func (s *Speaker) Collect(ch chan<- prometheus.Metric) {
	s.smu.Lock()
	for a, ss := range s.sessions {
		up := 0.0
		if ss.up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descSessionUp, prometheus.GaugeValue, up, a.String())
		ch <- prometheus.MustNewConstMetric(descSessionTransitions, prometheus.CounterValue, float64(ss.transitions), a.String())
	}
	for a, v := range s.vips {
		ann := 0.0
		if v.Announced {
			ann = 1
		}
		ch <- prometheus.MustNewConstMetric(descVIPAnnounced, prometheus.GaugeValue, ann, a.String())
	}
	s.smu.Unlock()
	ch <- prometheus.MustNewConstMetric(descAnnouncements, prometheus.CounterValue, float64(s.announcements.Load()))
	ch <- prometheus.MustNewConstMetric(descWithdrawals, prometheus.CounterValue, float64(s.withdrawals.Load()))
}
