package report

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Progress is a progress bar for a long run. It draws only on a terminal;
// on anything else (a pipe, a file, CI's log) it writes nothing, so that
// logs stay clean. Add may be called from many goroutines at once; a nil
// *Progress does nothing.
type Progress struct {
	w     io.Writer
	label string
	total int64
	tty   bool
	width int // columns of the terminal
	start time.Time
	now   func() time.Time

	done     atomic.Int64
	lastDraw atomic.Int64 // nanoseconds since start of the last draw
	finished atomic.Bool
	mu       sync.Mutex // one draw at a time
}

// redrawEvery throttles the bar: 10 redraws a second look smooth and cost
// nothing next to the work measured.
const redrawEvery = 100 * time.Millisecond

// NewProgress starts a bar for total steps of work, labelled label, on w.
// A total of 0 or less means unknown: the bar then shows the count only.
func NewProgress(w io.Writer, label string, total int) *Progress {
	f, ok := w.(*os.File)
	tty := ok && isTerminal(f)
	width := 80
	if tty {
		width = termWidth(f)
	}
	return newProgress(w, label, total, tty, width, time.Now)
}

func newProgress(w io.Writer, label string, total int, tty bool, width int, now func() time.Time) *Progress {
	p := &Progress{w: w, label: label, total: int64(total), tty: tty, width: width, now: now, start: now()}
	p.lastDraw.Store(-int64(redrawEvery))
	return p
}

// Add records n more steps done and redraws, at most 10 times a second.
func (p *Progress) Add(n int) {
	if p == nil {
		return
	}
	p.done.Add(int64(n))
	if !p.tty || p.finished.Load() {
		return
	}
	since := int64(p.now().Sub(p.start))
	last := p.lastDraw.Load()
	if since-last < int64(redrawEvery) || !p.lastDraw.CompareAndSwap(last, since) {
		return
	}
	if p.mu.TryLock() { // another goroutine drawing: skip, it is as fresh
		defer p.mu.Unlock()
		if !p.finished.Load() {
			fmt.Fprint(p.w, "\r"+p.line(false))
		}
	}
}

// Done draws the bar a last time, with the time taken, and ends its line.
// Calls after the first do nothing.
func (p *Progress) Done() {
	if p == nil || p.finished.Swap(true) || !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprint(p.w, "\r"+p.line(true)+"\n")
}

// line is the bar: label, bar, percentage, count, and ETA (or, when done,
// the time taken), fitted to the terminal's width.
func (p *Progress) line(final bool) string {
	done := p.done.Load()
	elapsed := p.now().Sub(p.start)
	var tail string
	switch {
	case final:
		tail = "in " + shortDuration(elapsed)
	case p.total > 0 && done > 0 && done < p.total:
		eta := time.Duration(float64(elapsed) * float64(p.total-done) / float64(done))
		tail = "ETA " + shortDuration(eta)
	case p.total > 0 && done > 0:
		tail = "ETA 0s"
	case p.total > 0:
		tail = "ETA ?"
	default:
		tail = shortDuration(elapsed)
	}
	if p.total <= 0 {
		return pad(fmt.Sprintf("%s %d  %s", p.label, done, tail), p.width-1)
	}
	frac := min(1, float64(done)/float64(p.total))
	if final {
		frac = 1
	}
	right := fmt.Sprintf(" %3.0f%%  %s", frac*100, tail)
	// The bar keeps its width while the ETA's text changes length.
	const rightW = len(" 100%  ETA 59m59s")
	barW := min(40, p.width-1-utf8.RuneCountInString(p.label)-rightW-3)
	if barW < 5 {
		return pad(p.label+right, p.width-1)
	}
	fill := int(frac * float64(barW))
	bar := strings.Repeat("=", fill) + strings.Repeat(" ", barW-fill)
	if fill < barW && fill > 0 {
		bar = bar[:fill-1] + ">" + bar[fill:]
	}
	return pad(p.label+" ["+bar+"]"+right, p.width-1)
}

// pad fills s with spaces to width w so that a shorter line overwrites a
// longer one fully; a longer s is cut.
func pad(s string, w int) string {
	r := []rune(s)
	if len(r) >= w {
		return string(r[:max(0, w)])
	}
	return s + strings.Repeat(" ", w-len(r))
}

// shortDuration is d rounded for a human: 45s, 3m05s, 1h02m.
func shortDuration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
}
