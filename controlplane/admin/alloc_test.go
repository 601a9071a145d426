package admin_test

import (
	"testing"

	"xlb/controlplane/cptest"
	"xlb/dataplane"
)

// TestProcessDoesNotAllocateWithCollector: with the collector registered
// and scraped (so any lazy state it could leave on the workers exists),
// Decider.Process still allocates nothing per batch. The collector only
// reads the workers' atomics; this guards against it ever doing more.
func TestProcessDoesNotAllocateWithCollector(t *testing.T) {
	r, src := newRig(t)
	batch := []dataplane.Frame{
		frame(t, cptest.TCP("100.64.0.1", vip, 40000, 80, "S")),
		frame(t, cptest.TCP("100.64.0.1", vip, 40000, 80, "A")),
		frame(t, cptest.UDP("100.64.0.2", vip, 5353, 53)),
		frame(t, cptest.TCP("100.64.0.1", vip, 40000, 81, "S")),
		frame(t, cptest.TCP("100.64.0.1", "198.51.100.1", 40000, 80, "S")),
	}
	orig := make([]dataplane.Frame, len(batch))
	copy(orig, batch)
	r.D.Process(batch, r.Now)
	base := startServer(t, src)
	got, _ := scrape(t, base)
	expect(t, got, map[string]float64{`xlb_queue_rx_packets_total{queue="0"}`: 5})

	allocs := testing.AllocsPerRun(100, func() {
		copy(batch, orig) // the rewrite is in place; lengths and offsets do not change for L2_DSR
		r.D.Process(batch, r.Now)
	})
	if allocs != 0 {
		t.Errorf("Process allocated %v times per batch with the collector registered", allocs)
	}
	got, _ = scrape(t, base)
	expect(t, got, map[string]float64{`xlb_queue_rx_packets_total{queue="0"}`: 5 + 101*5})
}
