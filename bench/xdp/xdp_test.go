package xdp

import (
	"encoding/json"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"xlb/bench/xdp/sink"
	"xlb/bench/xdp/topo"
	"xlb/config"
)

// testTopo is a topology description without namespaces (no root needed).
func testTopo(n int) *topo.Topo {
	t := &topo.Topo{Prefix: "lbx", GenNS: "lbx-gen", MidNS: "lbx-mid", GenDev: "lbxg", MidDev: "lbxm"}
	for i := range n {
		t.Backends = append(t.Backends, topo.Backend{Name: "b" + string(rune('1'+i)), IP: topo.BackendIP(i), MAC: topo.BackendMAC(i)})
	}
	return t
}

// TestXLBConfigValid: the configuration xlb runs with passes xlb's own
// validation, with the untracked and the tracked service on the VIP.
func TestXLBConfigValid(t *testing.T) {
	for _, cpu := range []int{-1, 1} {
		text := xlbConfig(testTopo(4), cpu)
		c, err := config.Parse("xlb.toml", []byte(text))
		if err != nil {
			t.Fatalf("cpu %d: %v\n%s", cpu, err, text)
		}
		if c.Dataplane.Interface != "lbxm" || len(c.Services) != 2 || len(c.Rules) != 2 {
			t.Fatalf("interface %q, %d services, %d rules", c.Dataplane.Interface, len(c.Services), len(c.Rules))
		}
		if want := map[bool][]int{true: {1}, false: nil}[cpu >= 0]; !reflect.DeepEqual(c.Dataplane.CPUs, want) {
			t.Errorf("cpus %v, want %v", c.Dataplane.CPUs, want)
		}
		for _, s := range c.Services {
			if n := len(s.Groups[0].Endpoints); n != 4 {
				t.Errorf("service %s: %d endpoints", s.Name, n)
			}
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{Quick: true}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.Duration != 400*time.Millisecond || !reflect.DeepEqual(c.Sizes, []int{64, 1500}) || len(c.Variants) != 5 ||
		c.Backends != 4 || c.Sources*c.Ports != 65536 || c.Prefix != "lbx" {
		t.Fatalf("defaults %+v", c)
	}
	for name, bad := range map[string]Config{
		"tiny frame":  {Sizes: []int{sink.MinFrame + 3}},
		"jumbo frame": {Sizes: []int{1519}},
		"forwarder":   {Variants: []string{"haproxy"}},
	} {
		if err := bad.defaults(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCPUReadings(t *testing.T) {
	a := readCPUTimes()
	if len(a.busy) == 0 || len(a.busy) != len(a.total) {
		t.Fatalf("/proc/stat: %d busy, %d total", len(a.busy), len(a.total))
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) {
	}
	b := readCPUTimes()
	for i, f := range busyFrac(a, b) {
		if f < 0 || f > 1 {
			t.Errorf("cpu %d busy %v", i, f)
		}
	}
	if d := processCPU(os.Getpid()); d < 50*time.Millisecond {
		t.Errorf("this process used %v, after spinning 50ms", d)
	}
	if d := pidCPU(os.Getpid()); d <= 0 {
		t.Errorf("main thread CPU %v", d)
	}
}

// synthetic cases: xlb at 2 Mpps per core, the reflector at 2, nftlb at
// 0.5, with latencies.
func synthetic() []Case {
	mk := func(v string, size int, load string, perCore float64, lat uint64) Case {
		c := Case{Variant: v, Size: size, Load: load, Sent: 1000, Forwarded: 990, Out: 990, OutPPS: 1e6, FwdPPS: 1e6,
			PPSPerCore: perCore, PerBackend: []uint64{495, 495}}
		for i := range 100 {
			c.latency.Add(lat + uint64(i)*100)
		}
		c.LatP50, c.LatP99 = float64(c.latency.Quantile(0.5))/1e3, float64(c.latency.Quantile(0.99))/1e3
		return c
	}
	var cs []Case
	for _, size := range []int{64, 1500} {
		cs = append(cs,
			mk("xlb", size, "full", 2e6, 5000), mk("xlb", size, "half", 1e6, 3000),
			mk("reflector", size, "full", 2e6, 4000), mk("reflector", size, "half", 1e6, 2000),
			mk("nftlb", size, "full", 0.5e6, 9000), mk("nftlb", size, "half", 0.2e6, 8000))
	}
	return cs
}

// TestReportFromCases: targets compare the right cases, the ratios table
// has a row per (size, xlb variant, baseline measured), charts have a line
// per forwarder, and the JSON encodes (no NaN).
func TestReportFromCases(t *testing.T) {
	b := &bench{cfg: Config{Quick: true}, genCPU: 0, midCPU: 1}
	if err := b.cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	b.note("nftlb: skipped for the test")
	r := b.report(synthetic())
	got := map[string]float64{}
	for _, tg := range r.Targets {
		got[tg.Name] = tg.Measured
		if math.IsNaN(tg.Measured) {
			t.Errorf("%s: NaN", tg.Name)
		}
	}
	checks := map[string]struct {
		v   float64
		met bool
	}{
		"xlb / (a) AF_XDP reflector, pps per busy core, 64 B": {1, true},
		"xlb / (c) nftables DNAT, pps per busy core, 64 B":    {4, true},
		"xlb latency p50 at half saturation, 64 B":            {8, true},
		"xlb latency p99 at half saturation, 1500 B":          {12.9, true},
	}
	for name, want := range checks {
		v, ok := got[name]
		if !ok || math.Abs(v-want.v) > 0.05*want.v {
			t.Errorf("target %q = %v (present %v), want about %v", name, v, ok, want.v)
		}
	}
	for _, tg := range r.Targets {
		if strings.HasPrefix(tg.Name, "xlb-ct") {
			t.Errorf("target %q without xlb-ct cases", tg.Name)
		}
	}
	var ratios *[][]string
	for i := range r.Tables {
		if strings.HasPrefix(r.Tables[i].Title, "xlb against") {
			ratios = &r.Tables[i].Rows
		}
	}
	if ratios == nil || len(*ratios) != 4 {
		t.Fatalf("ratio rows: %v", ratios)
	}
	if row := (*ratios)[1]; row[2] != "(c) nftlb" || row[4] != "4.00x" {
		t.Errorf("ratio row %v", row)
	}
	if len(r.Charts) != 2 || len(r.Charts[0].Series) != 3 || len(r.Charts[0].Series[0].Y) != 199 {
		t.Fatalf("charts %+v", r.Charts)
	}
	if y := r.Charts[0].Series[0].Y; y[0] > y[len(y)-1] {
		t.Error("CDF samples not sorted")
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "nftlb: skipped for the test") {
		t.Error("the run's own notes are missing")
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatalf("JSON: %v", err)
	}
}
