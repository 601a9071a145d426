package controlplane

import (
	"go.uber.org/zap"

	"xlb/config"
	"xlb/dataplane"
	"xlb/quiclb"
)

// quicConfigs makes the data plane's QUIC-LB configurations of a service,
// by config rotation value. They are made once per Apply (an AES key
// schedule each), not per published snapshot.
func (c *ControlPlane) quicConfigs(s *config.Service) *[8]*quiclb.Config {
	if len(s.QUICLB) == 0 {
		return nil
	}
	var cfgs [8]*quiclb.Config
	for _, q := range s.QUICLB {
		qc, err := quiclb.New(q.Rotation, q.ServerIDLen, q.NonceLen, q.Key)
		if err != nil {
			// The configuration was checked; this is a bug, not a user error.
			c.log.Error("quic_lb configuration refused", zap.String("service", s.Name), zap.Error(err))
			continue
		}
		cfgs[q.Rotation] = qc
	}
	return &cfgs
}

// addQUICRoutes gives every service of s with QUIC-LB its routes by
// server ID: its backends, current ones and those removed but still
// draining (M5: their connections drain as tracked flows would). A
// current backend wins a server ID over a draining one that had it.
func (c *ControlPlane) addQUICRoutes(s *dataplane.Snapshot) {
	for slot, b := range c.slots {
		if b == nil || b.ep.ServerID == nil || int(s.Backends[slot].Service) >= len(s.Services) {
			continue
		}
		ds := s.Services[s.Backends[slot].Service]
		if ds == nil || ds.Name != b.service {
			continue
		}
		st := c.serviceNamed(b.service)
		if st == nil || st.quic == nil {
			continue
		}
		if ds.QUIC == nil {
			ds.QUIC = &dataplane.QUICRoutes{Configs: *st.quic, ByServerID: map[quiclb.ServerIDKey]dataplane.BackendRef{}}
		}
		k := quiclb.KeyOf(b.ep.ServerID)
		if had, ok := ds.QUIC.ByServerID[k]; ok && !s.Backend(had).Removed {
			continue
		}
		ds.QUIC.ByServerID[k] = b.ref
	}
	// A service whose backends have no server ID yet still has its
	// configurations, so that its IDs are counted as unknown rather than
	// passed by as a service without QUIC-LB.
	for _, ds := range s.Services {
		if ds == nil || ds.QUIC != nil {
			continue
		}
		if st := c.serviceNamed(ds.Name); st != nil && st.quic != nil {
			ds.QUIC = &dataplane.QUICRoutes{Configs: *st.quic}
		}
	}
}
