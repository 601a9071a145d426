package admin

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTables writes a report as two tables, services then backends, for
// a person at a terminal (`xlb status`; scripts read /status's JSON).
func WriteTables(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "generation %d", r.Generation)
	if rl := r.Reloads; rl != nil {
		fmt.Fprintf(tw, ", reloads %d ok, %d failed", rl.Success, rl.Failure)
	}
	if l := r.LastReload; l != nil {
		outcome := "ok"
		if !l.OK {
			outcome = fmt.Sprintf("FAILED (%s)", plural(len(l.Errors), "error"))
		}
		fmt.Fprintf(tw, ", last reload %s at %s", outcome, l.At)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "SERVICE\tSIDE\tELIGIBLE\tWEIGHTS\tFINGERPRINT\tWHY")
	for _, s := range r.Services {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", s.Name, s.Side, len(s.Eligible), weightsText(&s), s.Fingerprint, s.Why)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "SERVICE\tBACKEND\tIP\tGROUP\tROLE\tHEALTH\tWEIGHT\tELIGIBLE\tSTATE\tPACKETS\tNEW CONNS")
	row := func(svc string, b *BackendReport) {
		role, health, eligible := "primary", "unhealthy", "no"
		if b.Failover {
			role = "failover"
		}
		if b.Healthy {
			health = "healthy"
		}
		if b.Eligible {
			eligible = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\n", svc, b.Name, b.IP, b.Group, role, health,
			b.Weight, eligible, backendState(b, r.NowMs), b.ForwardedPackets, b.NewConnections)
	}
	for i := range r.Services {
		for j := range r.Services[i].Backends {
			row(r.Services[i].Name, &r.Services[i].Backends[j])
		}
	}
	for i := range r.Orphans {
		row("-", &r.Orphans[i])
	}
	if b := r.BGP; b != nil {
		writeBGP(tw, b)
	}
	if f := r.FlowSync; f != nil {
		writeFlowSync(tw, f, time.Now())
	}
	return tw.Flush()
}

// writeFlowSync is the peers tracked flows are shared with: when each was
// last heard, its lag and the records each way.
func writeFlowSync(tw io.Writer, f *FlowSyncReport, now time.Time) {
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "flow sync: listening on %s", f.Listen)
	if p := f.Pull; p != nil {
		switch {
		case !p.Done:
			fmt.Fprint(tw, ", pulling the table")
		case p.Error != "":
			fmt.Fprintf(tw, ", table not pulled (%s)", p.Error)
		default:
			fmt.Fprintf(tw, ", table pulled from %s: %d records, %d stored in %d ms", p.Peer, p.Records, p.Stored, p.TookMs)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "PEER\tSTATE\tLAST HEARD\tLAG\tRECORDS IN\tRECORDS OUT")
	for _, p := range f.Peers {
		state, heard, lag := "down", "never", "-"
		if p.Up {
			state = "up"
		}
		if p.LastHeardMs > 0 {
			heard = now.Sub(time.UnixMilli(p.LastHeardMs)).Truncate(time.Millisecond).String() + " ago"
			lag = strconv.FormatFloat(p.LagMs, 'f', 1, 64) + " ms"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", p.Address, state, heard, lag, p.RecordsIn, p.RecordsOut)
	}
}

// writeBGP is the fleet member's part: its sessions, and each VIP's route
// with why it is not announced.
func writeBGP(tw io.Writer, b *BGPReport) {
	fmt.Fprintln(tw)
	node := "announcing"
	switch {
	case b.ShuttingDown:
		node = "shutting down"
	case b.NodeDrained:
		node = "drained (xlb undrain --node announces again)"
	}
	fmt.Fprintf(tw, "bgp: AS %d, router id %s, node %s\n", b.ASN, b.RouterID, node)
	fmt.Fprintln(tw, "NEIGHBOR\tAS\tSTATE\tUPTIME\tPREFIXES SENT\tWHY")
	for _, n := range b.Neighbors {
		up := "-"
		if n.Up {
			up = n.Uptime.Truncate(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", n.Address, n.ASN, n.State, up, n.PrefixesSent, n.Reason)
	}
	fmt.Fprintln(tw, "VIP\tANNOUNCED\tNEXT HOP\tWHY")
	for _, v := range b.VIPs {
		ann, why := "no", v.Reason
		if v.Announced {
			ann = "yes"
			if v.GracefulShutdown {
				why = "graceful shutdown community (withdrawal follows)"
			}
		}
		nh := "-"
		if v.NextHop.IsValid() {
			nh = v.NextHop.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.VIP, ann, nh, why)
	}
}

// FleetDisagreement is a service whose instances do not agree: different
// fingerprints (eligible set or Maglev table), or missing on some.
type FleetDisagreement struct {
	Service string
	// Fingerprints by instance; "" where the instance lacks the service.
	Fingerprints map[string]string
}

// CompareFleet lists the services on which the instances' reports (by
// instance name, e.g. its admin address) disagree, sorted by name. Two
// instances that agree on every service pick the same backend for every
// new flow (S5).
func CompareFleet(reports map[string]*Report) []FleetDisagreement {
	fps := map[string]map[string]string{} // service -> instance -> fingerprint
	for inst, r := range reports {
		for _, s := range r.Services {
			if fps[s.Name] == nil {
				fps[s.Name] = map[string]string{}
			}
			fps[s.Name][inst] = s.Fingerprint
		}
	}
	var out []FleetDisagreement
	for _, svc := range slices.Sorted(maps.Keys(fps)) {
		by := fps[svc]
		agree := len(by) == len(reports)
		first := ""
		for _, fp := range by {
			if first == "" {
				first = fp
			}
			agree = agree && fp == first
		}
		if !agree {
			d := FleetDisagreement{Service: svc, Fingerprints: map[string]string{}}
			for inst := range reports {
				d.Fingerprints[inst] = by[inst]
			}
			out = append(out, d)
		}
	}
	return out
}

// WriteFleet prints each service's fingerprint per instance and names the
// services on which they disagree; it reports whether all agree.
func WriteFleet(w io.Writer, insts []string, reports map[string]*Report) (bool, error) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "SERVICE\t%s\tAGREE\n", strings.Join(insts, "\t"))
	bad := map[string]bool{}
	for _, d := range CompareFleet(reports) {
		bad[d.Service] = true
	}
	names := map[string]bool{}
	for _, r := range reports {
		for _, s := range r.Services {
			names[s.Name] = true
		}
	}
	for _, svc := range slices.Sorted(maps.Keys(names)) {
		cells := []string{svc}
		for _, inst := range insts {
			fp := "(missing)"
			for _, s := range reports[inst].Services {
				if s.Name == svc {
					fp = s.Fingerprint
				}
			}
			cells = append(cells, fp)
		}
		agree := "yes"
		if bad[svc] {
			agree = "NO"
		}
		fmt.Fprintln(tw, strings.Join(append(cells, agree), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return false, err
	}
	if len(bad) == 0 {
		_, err := fmt.Fprintf(w, "the %d instances agree on every service\n", len(insts))
		return true, err
	}
	_, err := fmt.Fprintf(w, "instances disagree on %s: they pick different backends for some new flows (different configurations or health views)\n",
		strings.Join(slices.Sorted(maps.Keys(bad)), ", "))
	return false, err
}

// weightsText says how a service weighs its backends: "-" (not weighted),
// "reported" (W1), or "equal" with the backends that caused the fallback
// (W1a).
func weightsText(s *ServiceReport) string {
	switch {
	case !s.Weighted:
		return "-"
	case len(s.WeightFallback) > 0:
		return "equal (" + strings.Join(s.WeightFallback, ", ") + ")"
	}
	return "reported"
}

// backendState is active, not-ready, draining (with the time left) or
// removed.
func backendState(b *BackendReport, now int64) string {
	switch {
	case b.Draining:
		return "draining " + strconv.FormatFloat(float64(max(b.DrainUntilMs-now, 0))/1000, 'f', 1, 64) + "s"
	case b.Removed:
		return "removed"
	case !b.Ready:
		return "not-ready"
	}
	return "active"
}

// plural is "1 error", "2 errors".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
