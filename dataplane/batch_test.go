package dataplane_test

import (
	"testing"

	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
)

// TestCT4_BatchDecidesInOrder: Process decides a batch in passes (front
// halves, bucket prefetch, then steps 1–2), so the rules must still see the
// frames in order: an ACK behind its flow's SYN in the same batch hits the
// entry that SYN created (CT1 then CT4), and a later SYN of the same flow
// overwrites it, as when the frames come one per batch.
func TestCT4_BatchDecidesInOrder(t *testing.T) {
	const flows = 40
	var frames [][]byte
	for i := range flows {
		p := cptest.TCP("198.51.100.7", "192.0.2.10", uint16(30000+i), 80, "S")
		syn, err := craft.Build(&p)
		if err != nil {
			t.Fatal(err)
		}
		p.Flags = "A"
		ack, err := craft.Build(&p)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, syn, ack)
	}
	text := cptest.Testdata(t, "batch.toml") // four backends on 192.0.2.10:80
	one := cptest.New(t, text)               // one frame per batch: the reference
	batched := cptest.New(t, text)

	port := dataplane.NewMemFramePort(frames, len(frames))
	batch := make([]dataplane.Frame, len(frames)) // 80 frames: more than one pass of 64
	dc := batched.D
	if n := dc.Poll(port, batch, 0); n != len(frames) {
		t.Fatalf("polled %d frames, want %d", n, len(frames))
	}
	for i, raw := range frames {
		ref := one.SendFrame(raw)
		got := batch[i]
		if got.Verdict != dataplane.VerdictForward || ref.Verdict != dataplane.VerdictForward {
			t.Fatalf("frame %d: batched %v, one by one %v", i, got.Verdict, ref.Verdict)
		}
		if got.Backend != ref.Backend.Ref {
			t.Errorf("frame %d: batched to %v, one by one to %v", i, got.Backend, ref.Backend.Ref)
		}
		if i%2 == 1 && ref.Track != dataplane.TrackHit {
			t.Errorf("frame %d (ACK): reference track %v, want hit", i, ref.Track)
		}
	}
	snap := batched.M.Engine().Load()
	sc := dc.Stats().Service(snap.Services[0].ID)
	if got := sc.NewConnections.Load(); got != flows {
		t.Errorf("batched: %d new connections, want %d (each ACK must hit its SYN's entry)", got, flows)
	}
	if got := batched.Conntrack().Len(); got != flows {
		t.Errorf("batched: %d entries, want %d", got, flows)
	}
}
