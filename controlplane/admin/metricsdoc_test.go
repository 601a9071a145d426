package admin_test

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane/admin"
	"xlb/controlplane/bgp"
	"xlb/controlplane/cptest"
	"xlb/controlplane/flowsync"
	"xlb/dataplane"
)

// TestMetricsDocumented: every xlb_ family a full scrape exports is a row
// of METRICS.md with its type and labels, and every row is exported.
func TestMetricsDocumented(t *testing.T) {
	text, err := os.ReadFile("METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ typ, labels string }
	doc := map[string]row{}
	for line := range strings.Lines(string(text)) {
		if !strings.HasPrefix(line, "| `xlb_") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) != 6 {
			t.Fatalf("METRICS.md row with %d cells, want 4: %s", len(cells)-2, line)
		}
		name := strings.Trim(cells[1], " `")
		labels := strings.Fields(strings.NewReplacer("`", "", ",", " ").Replace(cells[3]))
		slices.Sort(labels)
		doc[name] = row{strings.TrimSpace(cells[2]), strings.Join(labels, ",")}
	}

	r, src := newRig(t)
	traffic(t, r, src)
	src.health.Observe("http", true, time.Millisecond) // histograms export from the first probe
	_, fams := scrape(t, startServer(t, src))
	// The weight-state families exist only for WEIGHTED_MAGLEV services.
	wr := cptest.New(t, cptest.Testdata(t, "weighted.toml"))
	_, wfams := scrape(t, startServer(t, &rigSources{rig: wr}))
	for _, name := range []string{"xlb_service_weight_fallback", "xlb_backend_weight_state"} {
		if f, ok := wfams[name]; ok {
			fams[name] = f
		}
	}
	// The BGP families come from a fleet member's speaker: one with a
	// neighbor (never reached: a port nobody listens on) and one VIP.
	for name, f := range bgpFamilies(t, src) {
		fams[name] = f
	}
	// The flow-sync families come from [flow_sync]'s syncer.
	for name, f := range flowSyncFamilies(t, src) {
		fams[name] = f
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "xlb_") {
			continue
		}
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		got := row{strings.ToLower(f.GetType().String()), strings.Join(labels, ",")}
		if d, ok := doc[name]; !ok {
			t.Errorf("%s is not documented in METRICS.md", name)
		} else if d != got {
			t.Errorf("%s: METRICS.md says %+v, exported %+v", name, d, got)
		}
	}
	for name := range doc {
		if _, ok := fams[name]; !ok {
			t.Errorf("METRICS.md documents %s, which is not exported", name)
		}
	}
}

// flowSyncFamilies scrapes a listener that also exports a flow-sync
// syncer's metrics, as xlb run does with [flow_sync].
func flowSyncFamilies(t *testing.T, src *rigSources) map[string]*dto.MetricFamily {
	t.Helper()
	ct, err := conntrack.New(conntrack.MinCapacity)
	if err != nil {
		t.Fatal(err)
	}
	eng := dataplane.NewEngine(ct)
	eng.EnableFlowSync(64)
	eng.NewDecider()
	c := &config.FlowSync{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Peers: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")},
		Keys: [][32]byte{{1}}, MaxRecordsPerSec: 1000, PullTimeout: time.Second}
	fs, err := flowsync.New(flowsync.Options{Config: c, Engine: eng, Now: func() int64 { return 1 }, Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fs.Close)
	return scrapeWith(t, src, fs.Collector())
}

// bgpFamilies scrapes a listener that also exports a started speaker's
// metrics, as xlb run does with [bgp].
func bgpFamilies(t *testing.T, src *rigSources) map[string]*dto.MetricFamily {
	t.Helper()
	sp, err := bgp.New(bgp.Config{ASN: 65010, RouterID: netip.MustParseAddr("10.0.0.5")}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Stop)
	nb := bgp.Neighbor{Address: netip.MustParseAddr("127.0.0.1"), ASN: 65000, Port: 1}
	if err := sp.SetNeighbors([]bgp.Neighbor{nb}); err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("10.99.0.10")
	if err := sp.SetVIPs(map[netip.Addr]bgp.VIP{vip: {Announce: true, NextHop: netip.MustParseAddr("10.0.0.5")}}); err != nil {
		t.Fatal(err)
	}
	return scrapeWith(t, src, sp)
}

// scrapeWith scrapes a listener that exports extra collectors beside src.
func scrapeWith(t *testing.T, src *rigSources, extra ...prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	s, err := admin.New(admin.Options{Listen: "127.0.0.1:0"}, src, zap.NewNop(), extra...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	_, fams := scrape(t, "http://"+s.Addr().String())
	return fams
}
