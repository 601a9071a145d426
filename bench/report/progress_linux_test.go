package report

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestProgressTerminal: on a real terminal (a pseudo-terminal the test
// opens) the bar is drawn and ends at 100% with a newline.
func TestProgressTerminal(t *testing.T) {
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here (/dev/ptmx: %v)", err)
	}
	defer ptm.Close()
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pts.Close()

	p := NewProgress(pts, "maglev", 4)
	if !p.tty {
		t.Fatal("a pseudo-terminal not taken for a terminal")
	}
	p.Add(2)
	p.Add(2)
	p.Done()

	var got []byte
	buf := make([]byte, 4096)
	_ = ptm.SetReadDeadline(time.Now().Add(5 * time.Second))
	for !strings.Contains(string(got), "\n") {
		k, err := ptm.Read(buf)
		if err != nil {
			t.Fatalf("read %q: %v", got, err)
		}
		got = append(got, buf[:k]...)
	}
	s := string(got)
	if !strings.HasPrefix(s, "\rmaglev [") || !strings.Contains(s, "100%") {
		t.Errorf("terminal got %q", s)
	}
}
