package admin

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
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
			outcome = fmt.Sprintf("FAILED (%d errors)", len(l.Errors))
		}
		fmt.Fprintf(tw, ", last reload %s at %s", outcome, l.At)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "SERVICE\tSIDE\tELIGIBLE\tWEIGHTS\tWHY")
	for _, s := range r.Services {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.Name, s.Side, len(s.Eligible), weightsText(&s), s.Why)
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
	return tw.Flush()
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
