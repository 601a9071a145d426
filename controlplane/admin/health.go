package admin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HealthMetrics records health-check probes: their latency and their count,
// by check and result. Observe is safe from any goroutine; the vectors
// are client_golang's, which cost one map lookup and atomic adds.
type HealthMetrics struct {
	duration *prometheus.HistogramVec
	total    *prometheus.CounterVec
}

// NewHealthMetrics returns empty health-check metrics.
func NewHealthMetrics() *HealthMetrics {
	labels := []string{"check", "result"}
	return &HealthMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "xlb_health_check_duration_seconds",
			Help: "Time a health-check probe took, until its verdict (timeouts included).",
			// Probes run on a LAN with timeouts of seconds.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, labels),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xlb_health_checks_total",
			Help: "Health-check probes, by check and result.",
		}, labels),
	}
}

// Observe records one probe of check that passed or failed after d.
func (h *HealthMetrics) Observe(check string, pass bool, d time.Duration) {
	result := "fail"
	if pass {
		result = "pass"
	}
	// WithLabelValues panics on a label that is not UTF-8; a check name
	// comes from the configuration, so use the error-returning form.
	if o, err := h.duration.GetMetricWithLabelValues(check, result); err == nil {
		o.Observe(d.Seconds())
	}
	if c, err := h.total.GetMetricWithLabelValues(check, result); err == nil {
		c.Inc()
	}
}

// Describe and Collect make HealthMetrics a prometheus.Collector.
func (h *HealthMetrics) Describe(ch chan<- *prometheus.Desc) {
	h.duration.Describe(ch)
	h.total.Describe(ch)
}

// Collect sends the recorded probes.
func (h *HealthMetrics) Collect(ch chan<- prometheus.Metric) {
	h.duration.Collect(ch)
	h.total.Collect(ch)
}
