//go:build linux

package worker

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// faultCapacity: 2048 buckets of 512 bytes, 1 MiB of buckets after the
// file's 2 MiB header span.
const faultCapacity = 16384

// fileEngine is testEngine over a table kept in a file of dir, with what
// OnTableFault is told recorded.
type fileEngine struct {
	eng  *dataplane.Engine
	ct   *conntrack.Table
	path string

	mu     sync.Mutex
	faults []dataplane.TableFault
}

func newFileEngine(t *testing.T) *fileEngine {
	t.Helper()
	cfg := testConfig(t)
	path := filepath.Join(t.TempDir(), "conntrack")
	ct, _, err := conntrack.Open(path, faultCapacity, NowMs())
	if err != nil {
		t.Fatal(err)
	}
	fe := &fileEngine{eng: dataplane.NewEngine(ct), ct: ct, path: path}
	fe.eng.OnTableFault(func(f dataplane.TableFault) {
		fe.mu.Lock()
		fe.faults = append(fe.faults, f)
		fe.mu.Unlock()
	})
	if _, err := controlplane.New(cfg, fe.eng, controlplane.Options{InitialHealthy: true, InitialWeight: 1000}, NowMs()); err != nil {
		t.Fatal(err)
	}
	return fe
}

func (fe *fileEngine) told() []dataplane.TableFault {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	return append([]dataplane.TableFault(nil), fe.faults...)
}

// truncate shrinks the table's file to size bytes.
func (fe *fileEngine) truncate(t *testing.T, size int64) {
	t.Helper()
	if err := os.Truncate(fe.path, size); err != nil {
		t.Fatal(err)
	}
}

// replaced checks that exactly one fault was told, which replaced the
// file table by an empty one of its capacity in anonymous memory, now the
// engine's.
func (fe *fileEngine) replaced(t *testing.T) *conntrack.Table {
	t.Helper()
	told := fe.told()
	if len(told) != 1 {
		t.Fatalf("OnTableFault told %d times (%+v), want once", len(told), told)
	}
	f := told[0]
	if f.Old != fe.ct || f.New == nil || f.Err != nil {
		t.Fatalf("fault told %+v, want the file table replaced by a new one", f)
	}
	if fe.eng.Conntrack() != f.New || f.New.Memory().File != "" || f.New.Capacity() != fe.ct.Capacity() {
		t.Fatalf("engine's table %p (file %q, capacity %d), want the new one %p in memory of capacity %d",
			fe.eng.Conntrack(), fe.eng.Conntrack().Memory().File, fe.eng.Conntrack().Capacity(), f.New, fe.ct.Capacity())
	}
	if fe.eng.ConntrackFaults() < 1 {
		t.Fatalf("ConntrackFaults() = %d, want at least 1", fe.eng.ConntrackFaults())
	}
	return f.New
}

// cand is a client's frame to the test VIP, its track key and the key's
// hint in a table.
type cand struct {
	frame []byte
	key   conntrack.Key
	h     conntrack.Hint
}

// clients calls more with UDP frames of client after client (up to
// 65536) to testConfig's VIP, with their track keys (from a decider of
// another engine with the same configuration: same service IDs, same
// keys) hashed for ct, until more returns false.
func clients(t *testing.T, ct *conntrack.Table, more func(c cand) bool) {
	t.Helper()
	keysOf := testEngine(t).NewDecider()
	for i := range 1 << 16 {
		f, err := craft.Build(&craft.Packet{
			Src: netip.AddrFrom4([4]byte{100, 64, byte(i >> 8), byte(i)}), Dst: testVIP,
			Proto: packet.ProtoUDP, SrcPort: 40000, DstPort: 53,
		})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, dataplane.Headroom+len(f)+64)
		copy(buf[dataplane.Headroom:], f)
		fr := dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(f)}
		d := keysOf.Decide(&fr, 0)
		if !d.Trackable {
			t.Fatal("the test's UDP frames are not tracked")
		}
		if !more(cand{frame: f, key: d.TrackKey, h: ct.Hint(&d.TrackKey)}) {
			return
		}
	}
}

// TestRun_TableFileTruncated: the file of the engine's conntrack table
// truncated to nothing while a worker forwards (without containment, a
// SIGBUS that kills the process): the worker goes on, every frame is
// forwarded and counted once, the engine's table is replaced once by an
// empty one in memory that tracks the flows from then on, and Run
// returns nil when stopped.
func TestRun_TableFileTruncated(t *testing.T) {
	fe := newFileEngine(t)
	const before, after = 640, 640
	port := newFakePort(udpFrames(t, 37), DefaultBatch, before)
	w, err := New(fe.eng, port, newFakePoller(), Config{CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, w, 5*time.Second)
	decided := func() uint64 { return port.forwarded.Load() + port.passed.Load() + port.dropped.Load() }
	eventually(t, 10*time.Second, "the first frames decided", func() bool { return decided() == before })
	if fe.ct.Len() == 0 {
		t.Fatal("no entry in the file table before the truncation: the frames are not tracked")
	}
	fe.truncate(t, 0)
	port.left.Add(after)
	eventually(t, 10*time.Second, "the frames after the truncation decided", func() bool { return decided() == before+after })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if f, p, d := port.forwarded.Load(), port.passed.Load(), port.dropped.Load(); f != before+after {
		t.Errorf("forwarded %d, passed %d, dropped %d; want all %d forwarded", f, p, d, before+after)
	}
	if got := w.Stats().Forward.Load(); got != before+after {
		t.Errorf("engine stats: %d forwarded, want %d (each frame counted once)", got, before+after)
	}
	nt := fe.replaced(t)
	if nt.Len() != 37 {
		t.Errorf("new table holds %d entries, want the 37 flows tracked again", nt.Len())
	}
}

// TestContain_OnlyTableFaults: Contain takes nothing but a fault in the
// mapping of the table the decider used: a plain panic or error is
// refused (the worker panics again) and the table stays.
func TestContain_OnlyTableFaults(t *testing.T) {
	fe := newFileEngine(t)
	dc := fe.eng.NewDecider()
	frames := []dataplane.Frame{}
	dc.Process(frames, 0)
	for _, r := range []any{"a panic", errors.New("an error"), nil} {
		if dc.Contain(r, frames, dc.Decided(), 0) {
			t.Errorf("Contain(%v) = true", r)
		}
	}
	if fe.eng.Conntrack() != fe.ct || len(fe.told()) != 0 || fe.eng.ConntrackFaults() != 0 {
		t.Errorf("the table was replaced (%d told, %d faults)", len(fe.told()), fe.eng.ConntrackFaults())
	}
}

// TestRun_WaiterInFaultedTable: a worker waiting in the file table for a
// bucket lock that a writer left held (as one that faulted holding it
// does) is released when another worker's fault replaces the table: it
// panics out of the wait (conntrack.ErrAbandoned), decides its frame
// again on the new table and goes on, instead of spinning forever. Only
// the real fault is counted.
func TestRun_WaiterInFaultedTable(t *testing.T) {
	fe := newFileEngine(t)
	half := uintptr(fe.ct.Capacity()) * 64 / 2
	var waiter, faulter *cand
	clients(t, fe.ct, func(c cand) bool {
		first, second := c.h.Offsets()
		switch {
		case waiter == nil && first+512 <= half && second+512 <= half:
			waiter = &c
		case faulter == nil && first+512 > half:
			faulter = &c
		}
		return waiter == nil || faulter == nil
	})
	if waiter == nil || faulter == nil {
		t.Fatal("no clients fit the test's plan")
	}
	// A writer that died holding the waiter's first bucket, as a faulted
	// one does: the lock bit of the bucket's slot 0 header, set through
	// the file (the table is its shared mapping).
	first, _ := fe.ct.Hint(&waiter.key).Offsets()
	f, err := os.OpenFile(fe.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var hdr [8]byte
	if _, err := f.ReadAt(hdr[:], 2<<20+int64(first)); err != nil {
		t.Fatal(err)
	}
	hdr[0] |= 1
	if _, err := f.WriteAt(hdr[:], 2<<20+int64(first)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fe.truncate(t, 2<<20+int64(half))

	wp := newFakePort([][]byte{waiter.frame}, DefaultBatch, 1)
	ww, err := New(fe.eng, wp, newFakePoller(), Config{CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	stopW := start(t, ww, 5*time.Second)
	// The waiter spins in its lock (rounds stop while it is inside its
	// first batch); then the fault.
	eventually(t, 10*time.Second, "the waiter inside its batch", func() bool { return wp.left.Load() == 0 })
	fp := newFakePort([][]byte{faulter.frame}, DefaultBatch, 1)
	fw, err := New(fe.eng, fp, newFakePoller(), Config{CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	stopF := start(t, fw, 5*time.Second)
	eventually(t, time.Minute, "both frames decided", func() bool {
		return wp.forwarded.Load()+wp.dropped.Load()+wp.passed.Load() == 1 && fp.forwarded.Load()+fp.dropped.Load()+fp.passed.Load() == 1
	})
	if err := stopW(); err != nil {
		t.Fatalf("waiter's Run: %v", err)
	}
	if err := stopF(); err != nil {
		t.Fatalf("faulter's Run: %v", err)
	}
	if wp.forwarded.Load() != 1 || fp.forwarded.Load() != 1 || ww.Stats().Forward.Load() != 1 || fw.Stats().Forward.Load() != 1 {
		t.Errorf("forwarded: waiter %d (counted %d), faulter %d (counted %d); want 1 each",
			wp.forwarded.Load(), ww.Stats().Forward.Load(), fp.forwarded.Load(), fw.Stats().Forward.Load())
	}
	nt := fe.replaced(t)
	if n := fe.eng.ConntrackFaults(); n != 1 {
		t.Errorf("ConntrackFaults() = %d, want the one fault (a waiter is no fault)", n)
	}
	if !fe.ct.Abandoned() {
		t.Error("the replaced table is not abandoned")
	}
	if _, ok := nt.Lookup(&waiter.key, NowMs()); !ok {
		t.Error("the waiter's flow is not in the new table")
	}
}

// faultyPort hands out one frame whose buffer is a shared mapping of a
// file truncated to nothing: reading it faults outside any table.
type faultyPort struct {
	buf  []byte
	sent bool
}

func (p *faultyPort) Receive(frames []dataplane.Frame) int {
	if p.sent {
		return 0
	}
	p.sent = true
	frames[0] = dataplane.Frame{Buf: p.buf, Off: dataplane.Headroom, Len: 64}
	return 1
}

func (p *faultyPort) Complete([]dataplane.Frame) {}

// TestRun_OtherFaultStillCrashes: a fault inside a batch's decision but
// outside the table's mapping (here: the frame's own memory, a
// truncated file) is not contained: the process dies of it, as before.
// The worker runs in a child process (this test binary again).
func TestRun_OtherFaultStillCrashes(t *testing.T) {
	if os.Getenv("XLB_TEST_OTHER_FAULT") == "1" {
		f, err := os.Create(filepath.Join(os.Getenv("XLB_TEST_DIR"), "frames"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(1 << 16); err != nil {
			t.Fatal(err)
		}
		mem, err := unix.Mmap(int(f.Fd()), 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(0); err != nil {
			t.Fatal(err)
		}
		fe := newFileEngine(t)
		w, err := New(fe.eng, &faultyPort{buf: mem}, newFakePoller(), Config{CPU: -1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Were the fault taken for the table's, the frame's memory
		// comes back before the batch is decided again, and Run ends.
		fe.eng.OnTableFault(func(dataplane.TableFault) {
			_ = f.Truncate(1 << 16)
			cancel()
		})
		err = w.Run(ctx)
		fmt.Printf("Run returned %v\n", err)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRun_OtherFaultStillCrashes$", "-test.count=1")
	cmd.Env = append(os.Environ(), "XLB_TEST_OTHER_FAULT=1", "XLB_TEST_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "SIGBUS") {
		t.Fatalf("the child ended with %v, want it killed by the fault (SIGBUS); its output:\n%s", err, out)
	}
	if strings.Contains(string(out), "Run returned") {
		t.Fatalf("a fault outside the table was contained:\n%s", out)
	}
}
