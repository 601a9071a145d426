package dataplane_test

import (
	"sync"
	"testing"

	"xlb/dataplane"
)

// rec is a record told apart by its Now.
func rec(i int) *dataplane.SyncRecord {
	return &dataplane.SyncRecord{Backend: dataplane.BackendRef(i), Side: dataplane.Side(i & 1), Now: int64(i)}
}

// TestSyncRing_Size: a ring's size is rounded up to a power of two.
func TestSyncRing_Size(t *testing.T) {
	for _, tc := range []struct{ ask, want int }{{-1, 1}, {0, 1}, {1, 1}, {2, 2}, {5, 8}, {1000, 1024}, {4096, 4096}} {
		if got := dataplane.NewSyncRing(tc.ask).Len(); got != tc.want {
			t.Errorf("NewSyncRing(%d).Len() = %d, want %d", tc.ask, got, tc.want)
		}
	}
}

// TestSyncRing_PushPopOrder: records come out in the order they went in,
// whole, and an empty ring pops nothing.
func TestSyncRing_PushPopOrder(t *testing.T) {
	r := dataplane.NewSyncRing(8)
	dst := make([]dataplane.SyncRecord, 8)
	if n := r.Pop(dst); n != 0 {
		t.Fatalf("new ring popped %d", n)
	}
	for i := 1; i <= 5; i++ {
		if !r.Push(rec(i)) {
			t.Fatalf("push %d refused on a ring of 8", i)
		}
	}
	if n := r.Pop(dst[:2]); n != 2 || dst[0] != *rec(1) || dst[1] != *rec(2) {
		t.Fatalf("pop into 2: %d %+v", n, dst[:n])
	}
	n := r.Pop(dst)
	if n != 3 {
		t.Fatalf("popped %d, want the 3 left", n)
	}
	for i := range n {
		if dst[i] != *rec(i + 3) {
			t.Errorf("record %d: %+v, want %+v", i, dst[i], *rec(i + 3))
		}
	}
	if n := r.Pop(dst); n != 0 || r.Pushed() != 5 || r.Drops() != 0 {
		t.Fatalf("after draining: popped %d, pushed %d, drops %d; want 0, 5, 0", n, r.Pushed(), r.Drops())
	}
}

// TestSyncRing_WrapAround: pushes and pops of uneven sizes carry the
// indexes many times around a small ring, order kept across the end of
// its buffer.
func TestSyncRing_WrapAround(t *testing.T) {
	r := dataplane.NewSyncRing(4)
	dst := make([]dataplane.SyncRecord, 4)
	next, want := 0, 0
	for round := range 50 {
		for range 1 + round%4 {
			if !r.Push(rec(next)) {
				t.Fatalf("round %d: push %d refused", round, next)
			}
			next++
		}
		for want < next {
			n := r.Pop(dst[:1+round%3])
			if n == 0 {
				t.Fatalf("round %d: nothing popped, %d records in", round, next-want)
			}
			for i := range n {
				if dst[i].Now != int64(want) {
					t.Fatalf("round %d: popped %d, want %d", round, dst[i].Now, want)
				}
				want++
			}
		}
	}
	if r.Drops() != 0 {
		t.Fatalf("%d drops", r.Drops())
	}
}

// TestSyncRing_FullDrops: a full ring refuses a push and counts it; the
// records in it stay, and room made by a pop takes pushes again.
func TestSyncRing_FullDrops(t *testing.T) {
	r := dataplane.NewSyncRing(4)
	for i := range 6 {
		if ok := r.Push(rec(i)); ok != (i < 4) {
			t.Fatalf("push %d: %v, want %v", i, ok, i < 4)
		}
	}
	if r.Drops() != 2 || r.Pushed() != 4 {
		t.Fatalf("drops %d pushed %d, want 2 and 4", r.Drops(), r.Pushed())
	}
	dst := make([]dataplane.SyncRecord, 2)
	if n := r.Pop(dst); n != 2 || dst[0].Now != 0 || dst[1].Now != 1 {
		t.Fatalf("pop: %d %+v", n, dst[:n])
	}
	if !r.Push(rec(10)) || !r.Push(rec(11)) || r.Push(rec(12)) {
		t.Fatal("two pushes into the room of two, then a refusal: not so")
	}
	if r.Drops() != 3 {
		t.Fatalf("drops %d, want 3", r.Drops())
	}
	all := make([]dataplane.SyncRecord, 8)
	n := r.Pop(all)
	got := []int64{}
	for _, x := range all[:n] {
		got = append(got, x.Now)
	}
	if n != 4 || got[0] != 2 || got[1] != 3 || got[2] != 10 || got[3] != 11 {
		t.Fatalf("ring holds %v, want [2 3 10 11]", got)
	}
}

// TestSyncRing_Concurrent: one producer and one consumer at once (run
// under -race): every record pushed is popped once, whole and in order,
// and the pushes plus the drops are every record offered.
func TestSyncRing_Concurrent(t *testing.T) {
	const total = 200_000
	r := dataplane.NewSyncRing(64)
	var wg sync.WaitGroup
	wg.Add(1)
	pushed := 0
	go func() {
		defer wg.Done()
		for i := range total {
			if r.Push(rec(i)) {
				pushed++
			}
		}
	}()
	dst := make([]dataplane.SyncRecord, 16)
	got, last := 0, int64(-1)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; ; {
		n := r.Pop(dst)
		for _, x := range dst[:n] {
			if x.Now <= last || x != *rec(int(x.Now)) {
				t.Fatalf("popped %+v after %d", x, last)
			}
			last = x.Now
		}
		got += n
		if n == 0 && finished {
			break
		}
		select {
		case <-done:
			finished = true // one more pass drains what is left
		default:
		}
	}
	if got != pushed || uint64(pushed) != r.Pushed() || r.Pushed()+r.Drops() != total {
		t.Fatalf("popped %d, pushed %d (ring says %d), drops %d; want popped = pushed, pushed + drops = %d",
			got, pushed, r.Pushed(), r.Drops(), total)
	}
}
