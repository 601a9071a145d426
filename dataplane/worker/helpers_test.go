package worker

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

var testVIP = netip.MustParseAddr("203.0.113.53")

// testConfig is testdata/dns.toml: a UDP service on testVIP with two
// backends, L2 DSR.
func testConfig(tb testing.TB) *config.Config {
	tb.Helper()
	return cptest.Config(tb, cptest.Testdata(tb, "dns.toml"))
}

// testEngine is an engine with testConfig's snapshot published.
func testEngine(tb testing.TB) *dataplane.Engine {
	tb.Helper()
	cfg := testConfig(tb)
	ct, err := conntrack.New(conntrack.MinCapacity)
	if err != nil {
		tb.Fatal(err)
	}
	eng := dataplane.NewEngine(ct)
	if _, err := controlplane.New(cfg, eng, controlplane.Options{InitialHealthy: true, InitialWeight: 1000}, NowMs()); err != nil {
		tb.Fatal(err)
	}
	return eng
}

// udpFrames are n UDP queries to the VIP from n clients.
func udpFrames(tb testing.TB, n int) [][]byte {
	tb.Helper()
	out := make([][]byte, n)
	for i := range out {
		f, err := craft.Build(&craft.Packet{
			Src: netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)}), Dst: testVIP,
			Proto: packet.ProtoUDP, SrcPort: uint16(40000 + i), DstPort: 53,
		})
		if err != nil {
			tb.Fatal(err)
		}
		out[i] = f
	}
	return out
}

// fakePort hands out frames from a MemFramePort while its budget lasts, then
// nothing, as a quiet queue does.
type fakePort struct {
	mem  *dataplane.MemFramePort
	left atomic.Int64 // frames still to deliver
	// completed counts frames by verdict (atomics: read by the test).
	forwarded, passed, dropped atomic.Uint64
}

func newFakePort(frames [][]byte, batch int, budget int64) *fakePort {
	fp := &fakePort{mem: dataplane.NewMemFramePort(frames, batch)}
	fp.left.Store(budget)
	return fp
}

func (fp *fakePort) Receive(frames []dataplane.Frame) int {
	left := fp.left.Load()
	if left <= 0 {
		return 0
	}
	n := fp.mem.Receive(frames[:min(int64(len(frames)), left)])
	fp.left.Add(-int64(n))
	return n
}

func (fp *fakePort) Complete(frames []dataplane.Frame) {
	for i := range frames {
		switch frames[i].Verdict {
		case dataplane.VerdictForward:
			fp.forwarded.Add(1)
		case dataplane.VerdictPass:
			fp.passed.Add(1)
		default:
			fp.dropped.Add(1)
		}
	}
}

// fakePoller records how it is called: timeouts, and the thread and CPU
// mask of the caller (Poll runs on the worker's thread).
type fakePoller struct {
	mu       sync.Mutex
	zero     int             // Poll(0) calls
	timeouts []time.Duration // Poll(d > 0) calls
	tids     map[int]bool
	cpus     map[int]bool // union of the callers' CPU masks
	err      error        // returned from every call when set
	// sleep: Poll(d > 0) sleeps d, as poll(2) does on a quiet socket.
	sleep bool
	// stuck, when set, makes Poll(d > 0) wait until it is closed instead:
	// a worker hung inside a round.
	stuck chan struct{}
}

func newFakePoller() *fakePoller {
	return &fakePoller{tids: map[int]bool{}, cpus: map[int]bool{}}
}

func (p *fakePoller) Poll(timeout time.Duration) (bool, error) {
	var set unix.CPUSet
	_ = unix.SchedGetaffinity(0, &set)
	tid := unix.Gettid()
	p.mu.Lock()
	p.tids[tid] = true
	for c := range 1024 {
		if set.IsSet(c) {
			p.cpus[c] = true
		}
	}
	if timeout == 0 {
		p.zero++
	} else {
		p.timeouts = append(p.timeouts, timeout)
	}
	err, sleep, stuck := p.err, p.sleep, p.stuck
	p.mu.Unlock()
	if timeout > 0 && stuck != nil {
		<-stuck
	}
	if timeout > 0 && sleep {
		time.Sleep(timeout)
	}
	return false, err
}

func (p *fakePoller) snapshot() (zero int, timeouts []time.Duration, tids, cpus map[int]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tids, cpus = map[int]bool{}, map[int]bool{}
	for k := range p.tids {
		tids[k] = true
	}
	for k := range p.cpus {
		cpus[k] = true
	}
	return p.zero, append([]time.Duration(nil), p.timeouts...), tids, cpus
}

// eventually polls cond every millisecond for up to d.
func eventually(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}
