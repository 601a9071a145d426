package appliance

import (
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"xlb/config"
	"xlb/controlplane"
	"xlb/controlplane/admin"
	"xlb/controlplane/cptest"
	"xlb/healthcheck"
)

// TestRunHealth_Targets: one probe per check and address, feeding every
// service that has that backend with that check; its check is the
// configured one; it is Weighted when one of those services uses weights.
func TestRunHealth_Targets(t *testing.T) {
	cfg := cptest.Config(t, cptest.Testdata(t, "health.toml"))
	targets, feeds := healthTargets(cfg)
	var keys []string
	for _, tg := range targets {
		keys = append(keys, tg.Key)
	}
	if want := []string{"hc/10.0.0.1", "hc/10.0.0.2", "tcp/10.0.0.1"}; !slices.Equal(keys, want) {
		t.Fatalf("targets %q, want %q", keys, want)
	}
	ip1 := netip.MustParseAddr("10.0.0.1")
	if f := feeds["hc/10.0.0.1"]; !slices.Equal(f, []healthFeed{{"web", ip1}, {"dns", ip1}}) {
		t.Errorf("hc/10.0.0.1 feeds %+v, want web and dns", f)
	}
	if f := feeds["tcp/10.0.0.1"]; !slices.Equal(f, []healthFeed{{"db", ip1}}) {
		t.Errorf("tcp/10.0.0.1 feeds %+v, want db", f)
	}
	ck := targets[0].Check
	if targets[0].Addr != ip1 || ck.Type != config.CheckHTTP || ck.Port != 8080 || ck.RequestPath != "/healthz" ||
		ck.CheckInterval != 2*time.Second || ck.Timeout != time.Second {
		t.Errorf("target %+v: not the configured check", targets[0])
	}
	// Weighted (its weight reports are logged) when any service it feeds
	// is WEIGHTED_MAGLEV: web is, dns and db are not.
	for i, want := range []bool{true, true, false} {
		if targets[i].Weighted != want {
			t.Errorf("%s: Weighted %v, want %v", targets[i].Key, targets[i].Weighted, want)
		}
	}
	// Every target is one the checker accepts.
	if err := healthcheck.New(nil, healthcheck.Options{}).Set(targets); err != nil {
		t.Fatal(err)
	}
}

// TestRunHealth_Reports: each result becomes a report for every backend
// its target feeds, with the weight state converted; a TCP result carries
// no weight; and the control plane applies them per service.
func TestRunHealth_Reports(t *testing.T) {
	cfg := cptest.Config(t, cptest.Testdata(t, "health.toml"))
	_, feeds := healthTargets(cfg)
	for _, tc := range []struct {
		in   healthcheck.WeightState
		want controlplane.WeightState
	}{
		{healthcheck.WeightValid, controlplane.WeightValid},
		{healthcheck.WeightMissing, controlplane.WeightMissing},
		{healthcheck.WeightInvalid, controlplane.WeightInvalid},
		{healthcheck.WeightUnavailable, controlplane.WeightUnavailable},
	} {
		rs := healthReports([]healthcheck.Result{{Key: "hc/10.0.0.1", Healthy: true, Weight: 4, WeightState: tc.in}}, feeds)
		if len(rs) != 2 || rs[0].Service != "web" || rs[1].Service != "dns" {
			t.Fatalf("%v: reports %+v, want web's and dns's", tc.in, rs)
		}
		for _, r := range rs {
			if !r.HasHealth || !r.Healthy || !r.HasWeight || r.Weight != 4 || r.WeightState != tc.want {
				t.Errorf("%v: report %+v, want healthy, weight 4 %v", tc.in, r, tc.want)
			}
		}
	}
	rs := healthReports([]healthcheck.Result{{Key: "tcp/10.0.0.1", Healthy: true, WeightState: healthcheck.WeightNone}}, feeds)
	if len(rs) != 1 || rs[0].Service != "db" || rs[0].HasWeight {
		t.Errorf("TCP result: %+v, want db's report without a weight", rs)
	}

	cp, err := controlplane.New(cfg, nil, controlplane.Options{InitialWeight: initialWeight}, 0)
	if err != nil {
		t.Fatal(err)
	}
	hm := admin.NewHealthMetrics()
	apply := healthApplier(cp, func() map[string][]healthFeed { return feeds }, func() int64 { return 1 }, hm, nil, zap.NewNop())
	apply([]healthcheck.Result{
		{Key: "hc/10.0.0.1", Healthy: true, Weight: 5, WeightState: healthcheck.WeightValid, Pass: true, Latency: time.Millisecond},
		{Key: "tcp/10.0.0.1", Healthy: false, Latency: time.Second},
	})
	// Every probe is recorded under its check's name and its own verdict.
	if got, want := probeCounts(t, hm), map[string]float64{"hc/pass": 1, "tcp/fail": 1}; !maps.Equal(got, want) {
		t.Errorf("probes recorded %v, want %v", got, want)
	}
	snap := cp.Snapshot()
	for _, svc := range snap.Services {
		for _, ref := range svc.Members {
			b := snap.Backend(ref)
			if b.IP != netip.MustParseAddr("10.0.0.1") {
				continue
			}
			if want := svc.Name != "db"; b.Healthy != want {
				t.Errorf("%s's 10.0.0.1: healthy %v, want %v", svc.Name, b.Healthy, want)
			}
		}
	}
}

// probeCounts reads hm's xlb_health_checks_total as "check/result" -> count.
func probeCounts(t *testing.T, hm *admin.HealthMetrics) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	hm.Collect(ch)
	close(ch)
	out := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		if pb.Counter == nil {
			continue // the histogram's series
		}
		l := map[string]string{}
		for _, lp := range pb.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		out[l["check"]+"/"+l["result"]] = pb.Counter.GetValue()
	}
	return out
}

// TestRunHealth_FirstRound: HealthChecked's channel closes once every
// target has a result applied, whatever the verdicts and however the
// results are batched, and not before; with no target it is closed from
// the start. Results for targets it never had (a reload's) change nothing.
func TestRunHealth_FirstRound(t *testing.T) {
	cfg := cptest.Config(t, cptest.Testdata(t, "health.toml"))
	targets, feeds := healthTargets(cfg)
	cp, err := controlplane.New(cfg, nil, controlplane.Options{InitialWeight: initialWeight}, 0)
	if err != nil {
		t.Fatal(err)
	}
	round := newFirstRound(targets)
	apply := healthApplier(cp, func() map[string][]healthFeed { return feeds }, func() int64 { return 1 }, nil, round, zap.NewNop())
	closed := func() bool {
		select {
		case <-round.done:
			return true
		default:
			return false
		}
	}
	apply([]healthcheck.Result{{Key: "hc/10.0.0.1", Healthy: true}, {Key: "hc/10.0.0.9"}})
	apply([]healthcheck.Result{{Key: "hc/10.0.0.1", Healthy: false}})
	if closed() {
		t.Fatal("closed with hc/10.0.0.2 and tcp/10.0.0.1 still unprobed")
	}
	apply([]healthcheck.Result{{Key: "hc/10.0.0.2"}, {Key: "tcp/10.0.0.1"}})
	if !closed() {
		t.Fatal("still open after every target reported")
	}
	apply([]healthcheck.Result{{Key: "tcp/10.0.0.1", Healthy: true}}) // no second close
	if empty := newFirstRound(nil); !func() bool { _, open := <-empty.done; return !open }() {
		t.Error("no targets: not closed")
	}
	a := &Appliance{}
	if a.HealthChecked() != nil {
		t.Error("HealthChecked before Run is not nil")
	}
	a.checked.Store(round)
	if a.HealthChecked() != round.done {
		t.Error("HealthChecked is not the round's channel")
	}
}
