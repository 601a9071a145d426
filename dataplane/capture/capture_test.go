package capture_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/capture"
	"xlb/dataplane/craft"
)

const fixture = "../../testdata/config/two-services.toml"

// rig is the fixture's engine (web TCP 80, dns UDP 53 on 203.0.113.10)
// and a batch of frames: a SYN to web (forwarded), a UDP datagram to a
// port without a rule (dropped: no-rule), a frame to another address
// (passed), a datagram to dns (forwarded).
func rig(t *testing.T) (*cptest.Rig, [][]byte) {
	t.Helper()
	text, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	r := cptest.New(t, string(text))
	var frames [][]byte
	for _, p := range []craft.Packet{
		cptest.TCP("198.51.100.7", "203.0.113.10", 40000, 80, "S"),
		cptest.UDP("198.51.100.7", "203.0.113.10", 40001, 99),
		cptest.TCP("198.51.100.7", "192.0.2.1", 40002, 80, "S"),
		cptest.UDP("198.51.100.8", "203.0.113.10", 40003, 53),
	} {
		f, err := craft.Build(&p)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	return r, frames
}

// batch puts frames into engine frames with headroom, as a NIC would.
func batch(frames [][]byte) []dataplane.Frame {
	out := make([]dataplane.Frame, len(frames))
	for i, f := range frames {
		buf := make([]byte, dataplane.Headroom+len(f)+64)
		copy(buf[dataplane.Headroom:], f)
		out[i] = dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(f)}
	}
	return out
}

// decide runs one batch through ring and the engine as a worker does.
func decide(r *cptest.Rig, ring *capture.Ring, fs []dataplane.Frame, ns int64) {
	ring.Before(fs)
	r.D.Process(fs, r.Now)
	ring.After(fs, ns)
}

func resolver(r *cptest.Rig) func(dataplane.BackendRef) (capture.Named, bool) {
	return func(ref dataplane.BackendRef) (capture.Named, bool) {
		snap := r.M.Engine().Load()
		b := snap.Backend(ref)
		if b == nil {
			return capture.Named{}, false
		}
		return capture.Named{Service: snap.Service(b.Service).Name, Name: b.Name, IP: b.IP}, true
	}
}

// packet is one packet read back: interface, bytes, original length and
// comment (read by our own block walk: gopacket's reader skips comments).
type packet struct {
	iface   int
	data    []byte
	orig    int
	comment string
}

// readBack reads file with gopacket's pcapng reader, and the comments and
// interface statistics with a walk of the blocks.
func readBack(t *testing.T, file []byte) (pkts []packet, drops map[uint32]uint64) {
	t.Helper()
	rd, err := pcapgo.NewNgReader(bytes.NewReader(file), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatalf("gopacket: %v", err)
	}
	if rd.LinkType() != layers.LinkTypeEthernet {
		t.Errorf("link type %v", rd.LinkType())
	}
	for {
		data, ci, err := rd.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("gopacket: %v", err)
		}
		pkts = append(pkts, packet{iface: ci.InterfaceIndex, data: data, orig: ci.Length})
	}
	if n := rd.NInterfaces(); n != 2 {
		t.Errorf("%d interfaces, want rx and tx", n)
	}
	for i, want := range []string{"rx", "tx"} {
		if intf, err := rd.Interface(i); err != nil || intf.Name != want {
			t.Errorf("interface %d: %+v %v, want %s", i, intf, err, want)
		}
	}
	// Comments and statistics: EPB option 1, ISB option 5.
	drops = map[uint32]uint64{}
	le := binary.LittleEndian
	k := 0
	for off := 0; off+12 <= len(file); {
		typ, total := le.Uint32(file[off:]), int(le.Uint32(file[off+4:]))
		body := file[off+8 : off+total-4]
		var opts []byte
		switch typ {
		case 6:
			capLen := int(le.Uint32(body[12:]))
			opts = body[20+(capLen+3)&^3:]
		case 5:
			opts = body[12:]
		}
		for len(opts) >= 4 {
			code, n := le.Uint16(opts), int(le.Uint16(opts[2:]))
			if code == 0 {
				break
			}
			v := opts[4 : 4+n]
			switch {
			case typ == 6 && code == 1:
				pkts[k].comment = string(v)
			case typ == 5 && code == 5:
				drops[le.Uint32(body)] = le.Uint64(v)
			}
			opts = opts[4+(n+3)&^3:]
		}
		if typ == 6 {
			k++
		}
		off += total
	}
	if k != len(pkts) {
		t.Fatalf("%d packet blocks, gopacket read %d", k, len(pkts))
	}
	return pkts, drops
}

func run(t *testing.T, s *capture.Session) ([]byte, capture.Stats) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	if s.Count == 0 {
		cancel() // drain what is there, then end
	}
	defer cancel()
	st, err := s.Run(ctx, &out)
	if err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), st
}

// TestCapture_AsReceivedAndSent: every frame of the batch is in the file
// as received (interface rx) with its verdict, and the forwarded ones also
// as sent (interface tx: the rewritten frame, here L2_DSR's new MACs),
// with their backend named.
func TestCapture_AsReceivedAndSent(t *testing.T) {
	r, frames := rig(t)
	ring := capture.NewRing(0, 16, 0, 64, capture.Filter{})
	fs := batch(frames)
	decide(r, ring, fs, int64(5*time.Second))
	epoch := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	file, st := run(t, &capture.Session{Rings: []*capture.Ring{ring}, Resolve: resolver(r), Epoch: epoch})
	if st.Frames != 4 || st.Lost != 0 {
		t.Errorf("stats %+v, want 4 frames, none lost", st)
	}
	pkts, drops := readBack(t, file)
	if len(pkts) != 6 {
		t.Fatalf("%d packets, want 4 received + 2 sent", len(pkts))
	}
	var rx, tx []packet
	for _, p := range pkts {
		if p.iface == capture.IfaceRX {
			rx = append(rx, p)
		} else {
			tx = append(tx, p)
		}
	}
	wantVerdict := []string{"verdict=forward", "verdict=drop reason=no-rule", "verdict=pass", "verdict=forward"}
	for i, p := range rx {
		if !bytes.Equal(p.data, frames[i]) || p.orig != len(frames[i]) {
			t.Errorf("rx %d: not the frame as received", i)
		}
		if !strings.HasPrefix(p.comment, "queue=0 "+wantVerdict[i]) {
			t.Errorf("rx %d: comment %q, want %q", i, p.comment, wantVerdict[i])
		}
	}
	for j, i := range []int{0, 3} {
		if !bytes.Equal(tx[j].data, fs[i].Data()) {
			t.Errorf("tx %d: not the frame as sent", j)
		}
		if bytes.Equal(tx[j].data, frames[i]) {
			t.Errorf("tx %d: the frame as sent equals the one received; the rewrite is not captured", j)
		}
	}
	if !strings.Contains(tx[0].comment, "service=web backend=b") || !strings.Contains(tx[1].comment, "service=dns backend=10.0.4.1 ip=10.0.4.1") {
		t.Errorf("tx comments %q, %q: want the service and backend", tx[0].comment, tx[1].comment)
	}
	if d, ok := drops[capture.IfaceRX]; !ok || d != 0 {
		t.Errorf("rx interface statistics: drops %d (present %v), want 0", d, ok)
	}
}

// TestCapture_Filters: the VIP filter (in the worker), the verdict filter
// (in the worker) and the backend filter (in the reader).
func TestCapture_Filters(t *testing.T) {
	r, frames := rig(t)
	dnsBackend := netip.MustParseAddr("10.0.4.1")
	for _, tc := range []struct {
		name string
		f    capture.Filter
		want []string // rx comments' verdicts, in order
	}{
		{"vip", capture.Filter{VIP: netip.MustParseAddr("192.0.2.1")}, []string{"verdict=pass"}},
		{"drops", capture.Filter{Verdicts: 1 << dataplane.VerdictDrop}, []string{"verdict=drop reason=no-rule"}},
		{"backend", capture.Filter{Backend: dnsBackend}, []string{"verdict=forward service=dns"}},
		{"vip and forwards", capture.Filter{VIP: netip.MustParseAddr("203.0.113.10"), Verdicts: 1 << dataplane.VerdictForward},
			[]string{"verdict=forward service=web", "verdict=forward service=dns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ring := capture.NewRing(2, 16, 0, 64, tc.f)
			decide(r, ring, batch(frames), 1)
			file, _ := run(t, &capture.Session{Rings: []*capture.Ring{ring}, Filter: tc.f, Resolve: resolver(r)})
			pkts, _ := readBack(t, file)
			var got []string
			for _, p := range pkts {
				if p.iface == capture.IfaceRX {
					got = append(got, p.comment)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("captured %q, want %q", got, tc.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], "queue=2 "+tc.want[i]) {
					t.Errorf("frame %d: %q, want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestCapture_Bounded: a full ring drops copies and counts them (the file
// says so in its interface statistics); the worker is never held back.
// Count ends a session.
func TestCapture_Bounded(t *testing.T) {
	r, frames := rig(t)
	ring := capture.NewRing(0, 4, 128, 64, capture.Filter{})
	for range 3 {
		decide(r, ring, batch(frames), 1) // 12 frames into 4 slots
	}
	if ring.Lost() != 8 {
		t.Errorf("lost %d, want 8", ring.Lost())
	}
	file, st := run(t, &capture.Session{Rings: []*capture.Ring{ring}, Resolve: resolver(r), Snap: 128})
	pkts, drops := readBack(t, file)
	if st.Frames != 4 || st.Lost != 8 || drops[capture.IfaceRX] != 8 {
		t.Errorf("stats %+v, file drops %d: want 4 written, 8 lost", st, drops[capture.IfaceRX])
	}
	for _, p := range pkts {
		if len(p.data) > 128 {
			t.Errorf("a packet of %d bytes, snap length 128", len(p.data))
		}
	}
	// Slots free again once read: the next batch fits.
	decide(r, ring, batch(frames), 1)
	_, st = run(t, &capture.Session{Rings: []*capture.Ring{ring}, Count: 2})
	if st.Frames != 2 {
		t.Errorf("Count 2: wrote %d", st.Frames)
	}
}

// TestCapture_WorkerAllocatesNothing: Before and After copy into memory
// the ring owns.
func TestCapture_WorkerAllocatesNothing(t *testing.T) {
	r, frames := rig(t)
	ring := capture.NewRing(0, 8, 0, 64, capture.Filter{VIP: netip.MustParseAddr("203.0.113.10")})
	fs := batch(frames)
	if a := testing.AllocsPerRun(100, func() {
		ring.Before(fs)
		ring.After(fs, 1)
	}); a != 0 {
		t.Errorf("%v allocations per batch, want 0", a)
	}
	_ = r
}

// TestCapture_TcpdumpReads: tcpdump reads the file and sees the frames.
func TestCapture_TcpdumpReads(t *testing.T) {
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Skip("tcpdump is not installed (.ci/run installs it)")
	}
	r, frames := rig(t)
	ring := capture.NewRing(0, 16, 0, 64, capture.Filter{})
	decide(r, ring, batch(frames), 1)
	file, _ := run(t, &capture.Session{Rings: []*capture.Ring{ring}, Resolve: resolver(r), Epoch: time.Now()})
	path := filepath.Join(t.TempDir(), "c.pcapng")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tcpdump, "-nn", "-r", path).CombinedOutput()
	if err != nil {
		t.Fatalf("tcpdump -r: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"198.51.100.7.40000 > 203.0.113.10.80", "198.51.100.7.40001 > 203.0.113.10.99", "198.51.100.8.40003 > 203.0.113.10.53"} {
		if c := strings.Count(text, want); c == 0 {
			t.Errorf("tcpdump shows no %q:\n%s", want, text)
		}
	}
	if n := strings.Count(strings.TrimSpace(text), "\n") + 1; !strings.Contains(text, "reading from file") || n < 7 {
		t.Errorf("tcpdump read %d lines, want the 6 packets:\n%s", n, text)
	}
}

// TestCapture_CountIsFrames: Count counts frames, each once whether it is
// in the file once (dropped, passed) or twice (forwarded: as received and
// as sent), across rings; the session stops at Count without taking a
// frame more from a ring, and the next session starts with the frames it
// left.
func TestCapture_CountIsFrames(t *testing.T) {
	r, frames := rig(t) // forward, drop, pass, forward
	rings := []*capture.Ring{capture.NewRing(0, 16, 0, 64, capture.Filter{}), capture.NewRing(1, 16, 0, 64, capture.Filter{})}
	for _, ring := range rings {
		decide(r, ring, batch(frames), 1)
	}
	count := func(file []byte) (rx, tx int) {
		pkts, _ := readBack(t, file)
		for _, p := range pkts {
			if p.iface == capture.IfaceRX {
				rx++
			} else {
				tx++
			}
		}
		return rx, tx
	}
	// Ring 0's four frames (6 packets), then ring 1's forward and drop.
	file, st := run(t, &capture.Session{Rings: rings, Resolve: resolver(r), Count: 6})
	if rx, tx := count(file); st.Frames != 6 || st.Packets != 9 || rx != 6 || tx != 3 {
		t.Errorf("Count 6: stats %+v, %d packets as received and %d as sent; want 6 frames: 6 and 3, 9 packets", st, rx, tx)
	}
	// What is left: ring 1's pass and forward.
	file, st = run(t, &capture.Session{Rings: rings, Resolve: resolver(r)})
	if rx, tx := count(file); st.Frames != 2 || st.Packets != 3 || rx != 2 || tx != 1 {
		t.Errorf("the rest: stats %+v, %d as received and %d as sent; want 2 frames: 2 and 1, 3 packets", st, rx, tx)
	}
}
