package config

import (
	"fmt"
	"net/netip"
)

// ValidateForRun checks what only `xlb run` needs on top of Parse:
// dataplane.interface. It returns Errors like Parse does.
func (c *Config) ValidateForRun() error {
	if c.Dataplane.Interface == "" {
		return Errors{{File: c.Path, Field: "dataplane.interface", Msg: "required by xlb run"}}
	}
	return nil
}

// Summary describes the configuration in one line, e.g.
// "3 rules on 2 VIPs, 2 services, 7 backends (5 primary, 2 failover), 1 health check",
// followed by ", BGP AS 65010 with 2 neighbors" when the file has [bgp]
// and ", flow sync with 2 peers" when it has [flow_sync].
func (c *Config) Summary() string {
	vips := map[netip.Addr]bool{}
	for _, r := range c.Rules {
		vips[r.VIP] = true
	}
	var primary, failover int
	for _, s := range c.Services {
		for _, g := range s.Groups {
			if g.Failover {
				failover += len(g.Endpoints)
			} else {
				primary += len(g.Endpoints)
			}
		}
	}
	s := fmt.Sprintf("%s on %s, %s, %s (%d primary, %d failover), %s",
		count(len(c.Rules), "rule"), count(len(vips), "VIP"), count(len(c.Services), "service"),
		count(primary+failover, "backend"), primary, failover, count(len(c.HealthChecks), "health check"))
	if c.BGP != nil {
		s += fmt.Sprintf(", BGP AS %d with %s", c.BGP.ASN, count(len(c.BGP.Neighbors), "neighbor"))
	}
	if c.FlowSync != nil {
		s += ", flow sync with " + count(len(c.FlowSync.Peers), "peer")
	}
	return s
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
