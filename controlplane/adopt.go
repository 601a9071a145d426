package controlplane

import (
	"net/netip"
	"time"

	"xlb/config"
	"xlb/dataplane"
)

// DrainingBackend is a backend another instance of the fleet drains
// (removed by a reload there, M5) while its flows go on: what a table
// pull carries so that a joining instance, whose configuration no longer
// has it, can keep forwarding those flows.
type DrainingBackend struct {
	Service, Name string
	IP            netip.Addr
	Group         string
	Failover      bool
	// DrainLeft is how long its drain still runs at the peer.
	DrainLeft time.Duration
}

// AdoptDraining takes over, as draining, the backends a peer drains that
// this control plane does not have, so that the flows the peer hands over
// resolve (and are forwarded) here until the drain ends, as if a reload
// of this instance had removed them: removed (never selected), draining
// until now + DrainLeft, reaped like any removed backend; a reload that
// configures one again revives it. An entry of a service the running
// configuration lacks, or for a backend this instance has (current or
// draining), is skipped. An adopted backend is taken as healthy: the peer
// was still sending its flows there. It publishes once, when any was
// added, and returns how many were.
func (c *ControlPlane) AdoptDraining(bs []DrainingBackend, now int64) (added int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range bs {
		st := c.services[d.Service]
		if st == nil || !d.IP.IsValid() || d.DrainLeft <= 0 {
			continue
		}
		ip := d.IP.Unmap()
		key := svcIP{d.Service, ip}
		if _, ok := c.bySvcIP[key]; ok {
			continue
		}
		if len(c.free) == 0 && len(c.slots) >= dataplane.MaxBackendSlots {
			break
		}
		name := d.Name
		if name == "" {
			name = ip.String()
		}
		slot := c.allocSlot()
		c.slots[slot] = &backendState{
			ref:        dataplane.MakeRef(slot, c.gens[slot]),
			service:    d.Service,
			fleetID:    dataplane.FleetID(d.Service, ip),
			ep:         config.Endpoint{Name: name, IP: ip},
			method:     st.cfg.ForwardingMethod,
			group:      d.Group,
			failover:   d.Failover,
			healthy:    true,
			weight:     c.opts.InitialWeight,
			removed:    true,
			drainUntil: now + d.DrainLeft.Milliseconds(),
		}
		c.bySvcIP[key] = slot
		added++
	}
	if added > 0 {
		c.refsDirty = true
		c.publish(now)
	}
	return added
}
