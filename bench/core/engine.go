package core

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"xlb/bench/flows"
	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/sim"
	"xlb/dataplane"
)

// benchTOML is the configuration the engine runs: for each family a TCP
// service on port 80 (tracked, 5-tuple, idle timeout an hour so that the
// prefilled flows outlive the run) and a UDP service on port 53 (session
// affinity NONE: UDP is then not tracked, T1), all L2_DSR (the rewrite is
// two MAC addresses in place). The VIPs and ports are
// flows.DefaultTargets'.
var benchTOML = func() string {
	var b strings.Builder
	b.WriteString("[[health_check]]\nname = \"hc\"\ntype = \"TCP\"\nport = 80\n")
	for _, s := range []struct {
		name, proto, vip, port, prefix string
		backends                       int
		tracked                        bool
	}{
		{"web4", "TCP", "203.0.113.10", "80", "10.10.0.", 8, true},
		{"dns4", "UDP", "203.0.113.10", "53", "10.10.1.", 4, false},
		{"web6", "TCP", "2001:db8:f::10", "80", "2001:db8:10::", 8, true},
		{"dns6", "UDP", "2001:db8:f::10", "53", "2001:db8:11::", 4, false},
	} {
		fmt.Fprintf(&b, "\n[[backend_service]]\nname = %q\nprotocol = %q\nhealth_checks = [\"hc\"]\n", s.name, s.proto)
		if s.tracked {
			b.WriteString("  [backend_service.connection_tracking_policy]\n  idle_timeout_sec = 3600\n")
		}
		fmt.Fprintf(&b, "  [[backend_service.backend]]\n  group = %q\n  endpoints = [\n", s.name)
		for i := 1; i <= s.backends; i++ {
			fmt.Fprintf(&b, "    { name = \"%s-%d\", ip = \"%s%d\" },\n", s.name, i, s.prefix, i)
		}
		b.WriteString("  ]\n")
		fmt.Fprintf(&b, "\n[[forwarding_rule]]\nname = %q\nip_address = %q\nip_protocol = %q\nports = [%q]\nbackend_service = %q\n",
			s.name, s.vip, s.proto, s.port, s.name)
	}
	return b.String()
}()

// epoch starts the engine clock (ms), read once per batch as a production
// worker does. It starts at 1 s so that no entry is ever "used at 0".
var epoch = time.Now()

func clock() int64 { return 1000 + time.Since(epoch).Milliseconds() }

// bed is an engine with its control plane and a table of live flows.
type bed struct {
	eng      *dataplane.Engine
	cp       *controlplane.ControlPlane
	live     int
	capacity int
}

// newBed builds the real control plane over a fresh engine whose conntrack
// holds capacity entries, backends healthy at full weight (as `xlb sim`).
func newBed(capacity int) (*bed, error) {
	cfg, err := config.Parse("lbbench-core.toml", []byte(benchTOML))
	if err != nil {
		return nil, err
	}
	ct, err := conntrack.New(capacity)
	if err != nil {
		return nil, err
	}
	eng := dataplane.NewEngine(ct)
	cp, err := controlplane.New(cfg, eng, controlplane.Options{
		Local:          sim.SimLocal(),
		InitialHealthy: true,
		InitialWeight:  1000,
	}, clock())
	if err != nil {
		return nil, err
	}
	return &bed{eng: eng, cp: cp, capacity: ct.Capacity()}, nil
}

// Prefill is how a table of live flows was built.
type Prefill struct {
	Flows     int     `json:"live_flows"`
	Capacity  int     `json:"capacity"`
	Seconds   float64 `json:"seconds"`
	Workers   int     `json:"workers"`
	Entries   int     `json:"entries"`   // table entries afterwards
	Evictions uint64  `json:"evictions"` // live entries displaced by over-full buckets (X3)
}

// prefill opens live flows 0..n-1 with one SYN each through the engine,
// workers in parallel, and fails unless every SYN was forwarded.
func (b *bed) prefill(n, workers int) (Prefill, error) {
	start := time.Now()
	workers = max(1, min(workers, n/batch))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = b.open(w*n/workers, (w+1)*n/workers)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return Prefill{}, err
		}
	}
	b.live = n
	st := b.eng.Conntrack().Stats()
	return Prefill{Flows: n, Capacity: b.capacity, Seconds: time.Since(start).Seconds(), Workers: workers,
		Entries: b.eng.Conntrack().Len(), Evictions: st.Evictions}, nil
}

// open sends the SYNs of live flows [lo, hi) through a decider of its own.
func (b *bed) open(lo, hi int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dc := b.eng.NewDecider()
	t := &flows.DefaultTargets
	size := 0 // headers only: the payload does not matter to a SYN's decision
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, dataplane.Headroom+128+dataplane.Headroom)
	}
	frames := make([]dataplane.Frame, batch)
	for start := lo; start < hi; start += batch {
		n := min(batch, hi-start)
		for j := range n {
			f := flows.Live(start + j)
			f.Kind = flows.SYN
			fr := t.Put(bufs[j][dataplane.Headroom:], f, size)
			frames[j] = dataplane.Frame{Buf: bufs[j], Off: dataplane.Headroom, Len: len(fr)}
		}
		dc.Process(frames[:n], clock())
		for j := range n {
			if frames[j].Verdict != dataplane.VerdictForward {
				return fmt.Errorf("SYN of live flow %d: %v %v", start+j, frames[j].Verdict, frames[j].Reason)
			}
		}
	}
	return nil
}

// newConnections sums a decider's new connections over every service.
func newConnections(dc *dataplane.Decider, snap *dataplane.Snapshot) uint64 {
	var n uint64
	for _, s := range snap.Services {
		if s == nil {
			continue
		}
		if c := dc.Stats().Service(s.ID); c != nil {
			n += c.NewConnections.Load()
		}
	}
	return n
}
