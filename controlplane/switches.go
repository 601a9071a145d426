package controlplane

// FailoverSwitches returns, per current service, how many times its eligible
// set switched to the failover side ([0]) and back to primary ([1]) since
// the service entered the configuration; the same switches that are logged.
func (c *ControlPlane) FailoverSwitches() map[string][2]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string][2]uint64, len(c.services))
	for name, st := range c.services {
		out[name] = st.switches
	}
	return out
}
