package worker

import (
	"bytes"
	"context"
	"testing"
	"time"

	"xlb/conntrack"
	"xlb/dataplane"
	"xlb/dataplane/capture"
)

// nopPoller is a Poller that does nothing (no recording, no allocation).
type nopPoller struct{}

func (nopPoller) Poll(time.Duration) (bool, error) { return false, nil }

// TestRound_ZeroAllocs: a round allocates nothing, with a full batch
// forwarded, with an empty port spinning, and asleep.
func TestRound_ZeroAllocs(t *testing.T) {
	eng := testEngine(t)
	busy := dataplane.NewMemFramePort(udpFrames(t, 64), DefaultBatch)
	quiet := dataplane.NewMemFramePort(nil, DefaultBatch)
	for _, tc := range []struct {
		name string
		port *dataplane.MemFramePort
		spin time.Duration
		want func(c Counters) bool
	}{
		{"full batch", busy, DefaultSpin, func(c Counters) bool { return c.Frames > 0 && c.Spins == 0 && c.Sleeps == 0 }},
		{"spinning", quiet, time.Hour, func(c Counters) bool { return c.Spins > 0 && c.Sleeps == 0 && c.Frames == 0 }},
		{"asleep", quiet, time.Nanosecond, func(c Counters) bool { return c.Sleeps > 0 && c.Frames == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := New(eng, tc.port, nopPoller{}, Config{CPU: -1, Spin: tc.spin})
			if err != nil {
				t.Fatal(err)
			}
			var rerr error
			allocs := testing.AllocsPerRun(1000, func() {
				if err := w.round(); err != nil {
					rerr = err
				}
			})
			if rerr != nil {
				t.Fatal(rerr)
			}
			if !tc.want(w.Counters()) {
				t.Fatalf("rounds did not take the %s path: %+v", tc.name, w.Counters())
			}
			if allocs != 0 {
				t.Errorf("%v allocations per round, want 0", allocs)
			}
		})
	}
	if busy.Forwarded == 0 || busy.Dropped+busy.Passed != 0 {
		t.Errorf("busy port: %d forwarded, %d passed, %d dropped; want all forwarded", busy.Forwarded, busy.Passed, busy.Dropped)
	}
}

// BenchmarkRound is one round of 64 forwarded UDP frames through a
// MemFramePort: the loop's own cost on top of the engine.
func BenchmarkRound(b *testing.B) {
	eng := testEngine(b)
	port := dataplane.NewMemFramePort(udpFrames(b, 64), DefaultBatch)
	w, err := New(eng, port, nopPoller{}, Config{CPU: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := w.round(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(port.Received), "ns/frame")
}

// TestRound_CaptureCopies: with a capture ring set, a round copies its
// frames into it (as received and as sent) and still allocates nothing;
// unset, the ring sees no more frames.
func TestRound_CaptureCopies(t *testing.T) {
	eng := testEngine(t)
	frames := udpFrames(t, 8)
	port := dataplane.NewMemFramePort(frames, 8)
	w, err := New(eng, port, nopPoller{}, Config{CPU: -1, Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	ring := capture.NewRing(w.Queue(), 64, 0, w.Batch(), capture.Filter{})
	w.SetCapture(ring)
	if a := testing.AllocsPerRun(4, func() { _ = w.round() }); a != 0 {
		t.Errorf("%v allocations per capturing round, want 0", a)
	}
	w.SetCapture(nil)
	for range 3 {
		_ = w.round()
	}
	var out bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, err := (&capture.Session{Rings: []*capture.Ring{ring}, Epoch: Epoch()}).Run(ctx, &out)
	if err != nil {
		t.Fatal(err)
	}
	// AllocsPerRun runs the function once more than asked to warm up.
	if st.Frames != 5*8 || st.Lost != 0 {
		t.Errorf("captured %d frames (%d lost), want the 40 of 5 capturing rounds", st.Frames, st.Lost)
	}
	if port.Forwarded != 8*8 {
		t.Errorf("forwarded %d, want all 64", port.Forwarded)
	}
	// Each forwarded frame twice: as received and as sent.
	if c := bytes.Count(out.Bytes(), []byte("verdict=forward")); c != 2*5*8 {
		t.Errorf("%d packet comments say forward, want 80", c)
	}
}

// TestRound_TimestampsOnNowMs: the entries a round records carry NowMs's
// clock, the control plane's (drain deadlines, a table kept across a
// restart), not the process-relative one the loop measures spins with.
func TestRound_TimestampsOnNowMs(t *testing.T) {
	eng := testEngine(t)
	w, err := New(eng, dataplane.NewMemFramePort(udpFrames(t, 8), 8), nopPoller{}, Config{CPU: -1, Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	before := NowMs()
	if err := w.round(); err != nil {
		t.Fatal(err)
	}
	after := NowMs()
	n := 0
	eng.Conntrack().Range(after, func(_ conntrack.Key, e conntrack.Entry) bool {
		n++
		if e.LastUse < before || e.LastUse > after {
			t.Errorf("entry last used at %d ms, want within NowMs %d..%d", e.LastUse, before, after)
		}
		return true
	})
	if n == 0 {
		t.Fatal("the round recorded no entry")
	}
}
