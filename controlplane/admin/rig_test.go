package admin_test

// Shared helpers: a real control plane and engine (cptest.Rig) behind the
// Sources interface, frames sent through real workers, and a server on a
// loopback port with its endpoints read over HTTP.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/admin"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
)

// VIP carries two rules: web (TCP 80, two primaries and a failover backend,
// 30 s of draining) and dns (UDP 53, one unnamed backend).
const vip = "203.0.113.10"

// rigToml is the fixture shared with cmd/xlb's tests.
var rigToml = func() string {
	b, err := os.ReadFile("../../testdata/config/two-services.toml")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// rigSources reads a cptest rig: its control plane, its conntrack table
// and the workers the test registered, on the rig's virtual clock.
type rigSources struct {
	rig     *cptest.Rig
	workers []admin.QueueStats
	runtime *admin.Runtime
	reloads *admin.ReloadReport
	health  *admin.HealthMetrics
	bgp     *admin.BGPReport // nil: no [bgp]
}

func (s *rigSources) Status() *admin.Report {
	return admin.Gather(admin.Inputs{Snapshot: s.rig.CP.Snapshot(), Workers: s.workers, Conntrack: s.rig.Conntrack(),
		Now: s.rig.Now, Switches: s.rig.CP.FailoverSwitches(), Reloads: s.reloads, Runtime: s.runtime, BGP: s.bgp})
}

// DrainNode marks the rig's node drained, as the appliance's announcer
// would; without a bgp report there is nothing to withdraw.
func (s *rigSources) DrainNode(drained bool) error {
	if s.bgp == nil {
		return errors.New("no [bgp] section")
	}
	s.bgp.NodeDrained = drained
	return nil
}

// Drain and Undrain act on the rig's control plane at its clock, as `xlb
// run` does on its own.
func (s *rigSources) Drain(name string) ([]string, error) {
	return opErr(s.rig.CP.Drain(name, s.rig.Now))
}
func (s *rigSources) Undrain(name string) ([]string, error) {
	return opErr(s.rig.CP.Undrain(name, s.rig.Now))
}

func opErr(hit []string, err error) ([]string, error) {
	if errors.Is(err, controlplane.ErrUnknownBackend) {
		return nil, fmt.Errorf("%w: %v", admin.ErrUnknownBackend, err)
	}
	return hit, err
}

// newRig starts the rig with its own worker on queue 0.
func newRig(t *testing.T) (*cptest.Rig, *rigSources) {
	t.Helper()
	r := cptest.New(t, rigToml)
	return r, &rigSources{rig: r, workers: []admin.QueueStats{{Queue: 0, Stats: r.D.Stats()}},
		runtime: &admin.Runtime{Interface: "xa0", XDPMode: "native", MTU: 1500, MaxMTU: 3566, MTUTooLarge: 1,
			Queues: []admin.QueueRuntime{{Queue: 0, BindMode: "copy", TxFull: 2,
				Kernel: &admin.KernelStats{RxRingFull: 7, RxDropped: 3, FillRingEmpty: 5, RxInvalidDescs: 0, TxInvalidDescs: 1}}},
			XDPProgram: &admin.XDPProgramStats{Redirected: 20, PassedNoSocket: 4, PassedNotVIP: 9, PassedNDP: 1, PassedShort: 2, PassedMalformedVIP: 6,
				PassedVLANOffload: 3, Retagged: 5}},
		reloads: &admin.ReloadReport{}, health: admin.NewHealthMetrics()}
}

// fakeSources is a fixed state (nil snapshot and table allowed) that
// cannot drain.
type fakeSources struct {
	snap    *dataplane.Snapshot
	workers []admin.QueueStats
	ct      *conntrack.Table
	runtime *admin.Runtime
}

func (s *fakeSources) Status() *admin.Report {
	return admin.Gather(admin.Inputs{Snapshot: s.snap, Workers: s.workers, Conntrack: s.ct, Runtime: s.runtime})
}
func (s *fakeSources) Drain(string) ([]string, error)   { return nil, errors.New("cannot drain") }
func (s *fakeSources) Undrain(string) ([]string, error) { return nil, errors.New("cannot drain") }
func (s *fakeSources) DrainNode(bool) error             { return errors.New("cannot drain") }

// frame builds p into a Frame with headroom.
func frame(t testing.TB, p craft.Packet) dataplane.Frame {
	t.Helper()
	b, err := craft.Build(&p)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, dataplane.Headroom+len(b)+dataplane.Headroom)
	copy(buf[dataplane.Headroom:], b)
	return dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(b)}
}

// sent is what the test expects the counters to say, tallied from the
// verdicts the engine gave.
type sent struct {
	forward, pass int
	drops         map[string]int
	backend       map[string]int // forwarded frames by backend name
	bytes         map[string]int // forwarded bytes by backend name
}

// process sends packets through w as one batch (as an AF_XDP worker does)
// and tallies the verdicts into tally.
func process(t *testing.T, r *cptest.Rig, w *dataplane.Decider, tally *sent, ps ...craft.Packet) {
	t.Helper()
	fs := make([]dataplane.Frame, len(ps))
	for i, p := range ps {
		fs[i] = frame(t, p)
	}
	w.Process(fs, r.Now)
	snap := r.CP.Snapshot()
	if tally.drops == nil {
		tally.drops, tally.backend, tally.bytes = map[string]int{}, map[string]int{}, map[string]int{}
	}
	for _, f := range fs {
		switch f.Verdict {
		case dataplane.VerdictPass:
			tally.pass++
		case dataplane.VerdictDrop:
			tally.drops[f.Reason.String()]++
		case dataplane.VerdictForward:
			tally.forward++
			b := snap.Backend(f.Backend)
			if b == nil {
				t.Fatalf("forwarded to unknown backend ref %d", f.Backend)
			}
			n := b.Name
			if n == "" {
				n = b.IP.String()
			}
			tally.backend[n]++
			tally.bytes[n] += f.Len
		}
	}
}

// startServer starts a server on a loopback port and returns its base URL.
func startServer(t *testing.T, src admin.Source) string {
	t.Helper()
	base, _ := startServers(t, src)
	return base
}

// startServers starts a server on a loopback port and a socket in a
// temporary directory, and returns the TCP base URL and the socket path.
func startServers(t *testing.T, src admin.Source) (base, sock string) {
	t.Helper()
	return startServersLog(t, src, zap.NewNop())
}

// startServersLog is startServers logging to log.
func startServersLog(t *testing.T, src admin.Source, log *zap.Logger) (base, sock string) {
	t.Helper()
	var extra []prometheus.Collector
	if rs, ok := src.(*rigSources); ok && rs.health != nil {
		extra = append(extra, rs.health)
	}
	sock = filepath.Join(t.TempDir(), "admin.sock")
	s, err := admin.New(admin.Options{Listen: "127.0.0.1:0", Socket: sock}, src, log, extra...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return "http://" + s.Addr().String(), sock
}

// sockClient is an HTTP client of the socket at sock.
func sockClient(sock string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
}

// doSock sends method path through the socket and returns the status and
// body.
func doSock(t *testing.T, sock, method, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://xlb"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := sockClient(sock).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// get fetches url and fails the test unless the status is want.
func get(t *testing.T, url string, want int) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d %s, want %d", url, resp.StatusCode, body, want)
	}
	return body
}

// scrape reads /metrics in the text format into samples keyed
// `name{label="value",...}` (labels sorted), and the families.
func scrape(t *testing.T, base string) (map[string]float64, map[string]*dto.MetricFamily) {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(get(t, base+"/metrics", 200))))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	samples := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var v float64
			switch {
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Untyped != nil:
				v = m.Untyped.GetValue()
			default:
				continue // summaries and histograms of the Go collector
			}
			samples[key(name, m.GetLabel())] = v
		}
	}
	return samples, fams
}

func key(name string, labels []*dto.LabelPair) string {
	ls := make([]string, 0, len(labels))
	for _, l := range labels {
		ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	slices.Sort(ls)
	return name + "{" + strings.Join(ls, ",") + "}"
}

// status fetches /status into a Report and into a generic map (to check
// the JSON field names themselves).
func status(t *testing.T, base string) (*admin.Report, map[string]any) {
	t.Helper()
	body := get(t, base+"/status", 200)
	if bytes.Contains(body, []byte(`\u003e`)) || bytes.Contains(body, []byte(`\u003c`)) || bytes.Contains(body, []byte(`\u0026`)) {
		t.Errorf("/status escapes < > & for HTML:\n%s", body)
	}
	var r admin.Report
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("/status: %v\n%s", err, body)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	return &r, m
}
