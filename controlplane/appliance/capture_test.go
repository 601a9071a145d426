package appliance

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"

	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/admin"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/capture"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/dataplane/worker"
)

// idlePoller lets an idle worker sleep briefly, as poll(2) would.
type idlePoller struct{}

func (idlePoller) Poll(d time.Duration) (bool, error) {
	time.Sleep(min(d, time.Millisecond))
	return false, nil
}

// TestCapture_FromRunningWorkers: two running workers over in-memory
// ports; a capture of 20 frames to web's VIP comes back as pcapng with
// their backends named, a second capture meanwhile is refused, and a
// later one starts.
func TestCapture_FromRunningWorkers(t *testing.T) {
	cfg := cptest.Config(t, cptest.Testdata(t, "health.toml"))
	ct, err := conntrack.New(conntrack.MinCapacity)
	if err != nil {
		t.Fatal(err)
	}
	eng := dataplane.NewEngine(ct)
	if _, err := controlplane.New(cfg, eng, controlplane.Options{InitialHealthy: true, InitialWeight: 1000}, worker.NowMs()); err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	for i := range 16 {
		f, err := craft.Build(&craft.Packet{Src: netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)}),
			Dst: netip.MustParseAddr("192.0.2.1"), Proto: packet.ProtoTCP, SrcPort: 40000, DstPort: 80, Flags: "S"})
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	c := &capturer{engine: eng}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for q := range 2 {
		w, err := worker.New(eng, dataplane.NewMemFramePort(frames, 8), idlePoller{}, worker.Config{Queue: q, CPU: -1, Batch: 8})
		if err != nil {
			t.Fatal(err)
		}
		c.workers = append(c.workers, w)
		wg.Go(func() { _ = w.Run(ctx) })
	}

	var out bytes.Buffer
	st, err := c.run(context.Background(), admin.CaptureRequest{
		Filter: capture.Filter{VIP: netip.MustParseAddr("192.0.2.1"), Verdicts: 1 << dataplane.VerdictForward},
		Count:  20,
		Flush: func() {
			if _, err := c.run(context.Background(), admin.CaptureRequest{Count: 1}, io.Discard); !errors.Is(err, admin.ErrCaptureBusy) {
				t.Errorf("a second capture while one runs: %v, want admin.ErrCaptureBusy", err)
			}
		},
	}, &out)
	if err != nil || st.Frames != 20 {
		t.Fatalf("capture: %+v, %v; want 20 frames", st, err)
	}
	rd, err := pcapgo.NewNgReader(bytes.NewReader(out.Bytes()), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_, _, err := rd.ReadPacketData()
		if err != nil {
			break
		}
		n++
	}
	if n != 40 {
		t.Errorf("%d packets in the file, want 20 as received and 20 as sent", n)
	}
	if !bytes.Contains(out.Bytes(), []byte("verdict=forward service=web backend=")) {
		t.Error("no comment names web's backend")
	}
	// A later capture starts (the first released it).
	st, err = c.run(context.Background(), admin.CaptureRequest{Count: 1}, io.Discard)
	if err != nil || st.Frames != 1 {
		t.Errorf("a capture after the first: %+v, %v", st, err)
	}
}
