package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"xlb/internal/syncbuf"
)

// TestProgressSilentOffTerminal: on a buffer or a regular file (what a CI
// log is) the bar writes nothing at all.
func TestProgressSilentOffTerminal(t *testing.T) {
	var b bytes.Buffer
	p := NewProgress(&b, "run", 10)
	p.Add(5)
	time.Sleep(2 * redrawEvery)
	p.Add(5)
	p.Done()
	if b.Len() != 0 {
		t.Errorf("wrote %q to a buffer", b.String())
	}

	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p = NewProgress(f, "run", 10)
	if p.tty {
		t.Fatal("a regular file taken for a terminal")
	}
	p.Add(10)
	p.Done()
	if st, _ := f.Stat(); st.Size() != 0 {
		t.Errorf("wrote %d bytes to a file", st.Size())
	}

	var nilP *Progress
	nilP.Add(1) // a command may pass no bar
	nilP.Done()
}

// fakeClock advances by tick at each reading, so that a run's draws can be
// counted without sleeping.
type fakeClock struct {
	t    atomic.Int64
	tick time.Duration
}

func (c *fakeClock) now() time.Time {
	return time.Unix(0, c.t.Add(int64(c.tick)))
}

// TestProgressLine: percentage, bar and ETA from the rate so far; the
// final line has the time taken; an unknown total shows the count.
func TestProgressLine(t *testing.T) {
	clk := &fakeClock{}
	p := newProgress(nil, "core", 100, true, 60, clk.now)
	p.done.Store(25)
	clk.t.Add(int64(10*time.Second) - int64(clk.tick))
	got := p.line(false)
	// 60 columns: 59 drawn, of which the bar gets 59-4-17-3 = 35.
	want := "core [=======>" + strings.Repeat(" ", 27) + "]  25%  ETA 30s"
	if strings.TrimRight(got, " ") != want || len(got) != 59 {
		t.Errorf("line %q, want %q padded to 59", got, want)
	}
	p.done.Store(100)
	if got := strings.TrimRight(p.line(true), " "); got != "core ["+strings.Repeat("=", 35)+"] 100%  in 10s" {
		t.Errorf("final line %q", got)
	}
	p = newProgress(nil, "flows", 0, true, 40, clk.now)
	p.done.Store(1234)
	if got := strings.TrimRight(p.line(false), " "); got != "flows 1234  0s" {
		t.Errorf("unknown total: %q", got)
	}
	for d, want := range map[time.Duration]string{
		44 * time.Second: "44s", 185 * time.Second: "3m05s", 3720 * time.Second: "1h02m",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestProgressConcurrent: Adds from 8 goroutines all count, the redraws
// stay within 10 per (fake) second, and the final line says 100%.
func TestProgressConcurrent(t *testing.T) {
	clk := &fakeClock{tick: time.Millisecond}
	var out syncbuf.Buffer
	const workers, each = 8, 2000
	p := newProgress(&out, "load", workers*each, true, 80, clk.now)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				p.Add(1)
			}
		})
	}
	wg.Wait()
	p.Done()
	p.Done() // a second Done draws nothing more
	if got := p.done.Load(); got != workers*each {
		t.Errorf("counted %d, want %d", got, workers*each)
	}
	s := out.String()
	draws := strings.Count(s, "\r")
	elapsed := time.Duration(clk.t.Load())
	if limit := int(elapsed/redrawEvery) + 2; draws < 2 || draws > limit {
		t.Errorf("%d draws over %v, want 2..%d", draws, elapsed, limit)
	}
	lines := strings.Split(s, "\r")
	last := lines[len(lines)-1]
	if !strings.Contains(last, "100%") || !strings.HasSuffix(last, "\n") || strings.Count(s, "\n") != 1 {
		t.Errorf("final draw %q (of %d)", last, draws)
	}
}
