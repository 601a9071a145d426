//go:build linux && !xlb_ct_layout_alt

// The plan of this test (which keys share which bucket, eight to fill
// one) is the standard layout's: 512-byte buckets of eight slots. The
// test-only layout's four-slot buckets would need another plan; the fault
// containment it proves does not depend on the layout, and the rest of
// the package's fault tests run in both.

package worker

import (
	"testing"
	"time"

	"xlb/conntrack"
)

// TestRun_TableFaultMidBatch: a fault met after some frames of a batch
// were decided, rewritten and counted (the file truncated to half its
// buckets; one frame's key must go to its second bucket, past the end,
// because its first is full). The frames before it keep their decision,
// made on the old table (their entries are there, not in the new one);
// it and those after it are decided once on the new table: each frame
// counted once, none lost.
func TestRun_TableFaultMidBatch(t *testing.T) {
	fe := newFileEngine(t)
	half := uintptr(fe.ct.Capacity()) * 64 / 2 // bytes of buckets kept
	const bucket = 512
	inFirstHalf := func(off uintptr) bool { return off+bucket <= half }

	var all []cand
	var x *cand
	byFirst := map[uintptr][]cand{}
	clients(t, fe.ct, func(c cand) bool {
		first, second := c.h.Offsets()
		if inFirstHalf(first) && !inFirstHalf(second) && len(byFirst[first]) >= 8 {
			x = &c
			return false
		}
		byFirst[first] = append(byFirst[first], c)
		all = append(all, c)
		return true
	})
	if x == nil {
		t.Fatalf("no client fits the test's plan among %d", len(all))
	}
	xFirst, _ := x.h.Offsets()
	// a before x, b after it: keys whose buckets both stay in the file
	// and are not x's, which the fillers make full.
	var a, b []cand
	for _, c := range all {
		first, second := c.h.Offsets()
		if !inFirstHalf(first) || !inFirstHalf(second) || first == xFirst || second == xFirst {
			continue
		}
		if len(a) < 5 {
			a = append(a, c)
		} else if len(b) < 5 {
			b = append(b, c)
		}
	}
	if len(a) < 5 || len(b) < 5 {
		t.Fatalf("%d and %d clients before and after x, want 5 each", len(a), len(b))
	}
	// Fill x's first bucket (eight other keys whose first bucket it is,
	// each in a free slot: no home of it spills), so that x's insert
	// must look at its second bucket.
	for _, f := range byFirst[xFirst][:8] {
		if r := fe.ct.Upsert(&f.key, conntrack.Value{Backend: 1, IdleSec: 60}, NowMs()); r != conntrack.Inserted {
			t.Fatalf("filling x's bucket: %v", r)
		}
	}
	var frames [][]byte
	for _, c := range a {
		frames = append(frames, c.frame)
	}
	frames = append(frames, x.frame)
	for _, c := range b {
		frames = append(frames, c.frame)
	}
	fe.truncate(t, 2<<20+int64(half)) // the buckets start 2 MiB in

	port := newFakePort(frames, DefaultBatch, int64(len(frames)))
	w, err := New(fe.eng, port, newFakePoller(), Config{CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, w, 5*time.Second)
	n := uint64(len(frames))
	eventually(t, 10*time.Second, "the batch decided", func() bool {
		return port.forwarded.Load()+port.passed.Load()+port.dropped.Load() == n
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if w.Counters().Batches != 1 {
		t.Fatalf("%d batches, want the one", w.Counters().Batches)
	}
	if got, fwd := w.Stats().Forward.Load(), port.forwarded.Load(); got != n || fwd != n {
		t.Errorf("engine counted %d forwarded, port got %d; want each of the %d frames once", got, fwd, n)
	}
	nt := fe.replaced(t)
	now := NowMs()
	for i, c := range a {
		var inOld bool
		if err := conntrack.Guard(fe.ct, func() { _, inOld = fe.ct.Lookup(&c.key, now) }); err != nil {
			t.Fatalf("frame %d's first half bucket faulted: %v", i, err)
		}
		if _, inNew := nt.Lookup(&c.key, now); !inOld || inNew {
			t.Errorf("frame %d, before the fault: in the old table %v, in the new %v; want decided once, on the old", i, inOld, inNew)
		}
	}
	for i, c := range append([]cand{*x}, b...) {
		if _, ok := nt.Lookup(&c.key, now); !ok {
			t.Errorf("frame %d from the fault on: not in the new table", len(a)+i)
		}
	}
}
