package controlplane

import (
	"errors"
	"fmt"
	"net/netip"
)

// Report is a health checker's word on one backend of one service.
// Backends are addressed by service and address: an unnamed endpoint is
// named by its address, which several services may share, each probing it
// with its own check.
type Report struct {
	Service string
	IP      netip.Addr
	// HasHealth: Healthy is the backend's health, thresholds applied.
	HasHealth bool
	Healthy   bool
	// HasWeight: Weight and WeightState are its latest weight report (W1a).
	HasWeight   bool
	Weight      uint32
	WeightState WeightState
}

// ApplyReports applies a batch of reports and publishes one snapshot for
// all of them, and none when they change nothing: a checker may report
// every probe, and a round of health checks is at most one change for the
// data plane. A report that names no current backend is skipped; the
// error returned then joins one ErrUnknownBackend per such report, and the
// others are applied.
func (c *ControlPlane) ApplyReports(rs []Report, now int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	changed := false
	for _, r := range rs {
		b := c.backendOf(r.Service, r.IP)
		if b == nil {
			errs = append(errs, fmt.Errorf("%w: %s in backend_service %q", ErrUnknownBackend, r.IP, r.Service))
			continue
		}
		was := *b
		if r.HasHealth {
			b.healthy = r.Healthy
		}
		if r.HasWeight {
			b.setWeight(r.Weight, r.WeightState)
		}
		changed = changed || was.healthy != b.healthy || was.weight != b.weight || was.weightState != b.weightState
	}
	if changed {
		c.publish(now)
	}
	return errors.Join(errs...)
}

// backendOf finds the current backend of service at ip (an address is
// unique within a service); c.mu is held.
func (c *ControlPlane) backendOf(service string, ip netip.Addr) *backendState {
	slot, ok := c.bySvcIP[svcIP{service, ip}]
	if !ok {
		return nil
	}
	if b := c.slots[slot]; b != nil && !(b.removed && !b.drained) {
		return b
	}
	return nil
}

// setWeight records a weight report (W1a).
func (b *backendState) setWeight(weight uint32, state WeightState) {
	if state == WeightUnavailable && (b.weightState == WeightMissing || b.weightState == WeightInvalid) {
		// No reply is not a reply: the latest one, missing or invalid,
		// keeps the service on equal weights (W1a).
		return
	}
	b.weightState = state
	if state == WeightValid {
		b.weight = weight
	}
}
