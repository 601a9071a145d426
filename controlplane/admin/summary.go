package admin

import (
	"fmt"
	"strings"
)

// Summary is a report in one line, what `xlb status` shows in its tables
// boiled down for a service manager's status line (systemd's STATUS=):
// the interface and XDP mode, services (how many on their failover side),
// backends healthy and draining, conntrack occupancy in whole percent,
// reloads and, with [bgp], sessions up and routes announced. It leaves
// packet counters out, so that it changes only when the state does.
func Summary(r *Report) string {
	var parts []string
	if rt := r.Runtime; rt != nil {
		parts = append(parts, fmt.Sprintf("%s %s XDP, %d queues", rt.Interface, rt.XDPMode, len(rt.Queues)))
	}
	failover, backends, healthy, draining := 0, 0, 0, 0
	for i := range r.Services {
		s := &r.Services[i]
		if s.Side == "failover" {
			failover++
		}
		for _, b := range s.Backends {
			if b.Removed {
				if b.Draining {
					draining++
				}
				continue
			}
			backends++
			if b.Healthy {
				healthy++
			}
		}
	}
	for _, b := range r.Orphans {
		if b.Draining {
			draining++
		}
	}
	svc := fmt.Sprintf("%d services", len(r.Services))
	if failover > 0 {
		svc += fmt.Sprintf(" (%d on failover)", failover)
	}
	parts = append(parts, svc, fmt.Sprintf("%d/%d backends healthy", healthy, backends))
	if draining > 0 {
		parts = append(parts, fmt.Sprintf("%d draining", draining))
	}
	if ct := r.Conntrack; ct != nil {
		parts = append(parts, fmt.Sprintf("conntrack %d%%", int(ct.Occupancy*100)))
	}
	if rl := r.Reloads; rl != nil && rl.Success+rl.Failure > 0 {
		s := fmt.Sprintf("reloads %d ok, %d failed", rl.Success, rl.Failure)
		if l := r.LastReload; l != nil && !l.OK {
			s += " (last FAILED)"
		}
		parts = append(parts, s)
	}
	if b := r.BGP; b != nil {
		up, announced := 0, 0
		for _, n := range b.Neighbors {
			if n.Up {
				up++
			}
		}
		for _, v := range b.VIPs {
			if v.Announced {
				announced++
			}
		}
		s := fmt.Sprintf("bgp %d/%d up, %d/%d VIPs announced", up, len(b.Neighbors), announced, len(b.VIPs))
		switch {
		case b.ShuttingDown:
			s += ", shutting down"
		case b.NodeDrained:
			s += ", node drained"
		}
		parts = append(parts, s)
	}
	if f := r.FlowSync; f != nil {
		up := 0
		for _, p := range f.Peers {
			if p.Up {
				up++
			}
		}
		s := fmt.Sprintf("flow sync %d/%d peers up", up, len(f.Peers))
		if f.Pull != nil && !f.Pull.Done {
			s += ", pulling the table"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
