//go:build linux

package conntrack

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// smaps returns the fields (in bytes, "kB" lines only) of the mapping of
// /proc/self/smaps that starts at addr.
func smaps(t *testing.T, addr uintptr) map[string]int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	var fields map[string]int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		name, rest, _ := strings.Cut(line, " ")
		if lo, _, ok := strings.Cut(name, "-"); ok && !strings.HasSuffix(name, ":") {
			if fields != nil {
				break // the next mapping
			}
			if start, err := strconv.ParseUint(lo, 16, 64); err == nil && uintptr(start) == addr {
				fields = map[string]int{}
			}
			continue
		}
		if fields == nil {
			continue
		}
		if v, ok := strings.CutSuffix(strings.TrimSpace(rest), " kB"); ok {
			n, _ := strconv.Atoi(v)
			fields[strings.TrimSuffix(name, ":")] = n << 10
		}
	}
	if fields == nil {
		t.Fatalf("no mapping at %#x in /proc/self/smaps", addr)
	}
	return fields
}

// TestNew_PopulatedLockedHuge: a large table is its own mapping, resident
// in full from New on (Rss == size: no worker takes a first-touch fault),
// backed by huge pages where THP is not "never" (AnonHugePages), and, after
// Lock, locked in full (Locked == size) where RLIMIT_MEMLOCK allows it.
func TestNew_PopulatedLockedHuge(t *testing.T) {
	tb := mustNew(t, 1<<18) // 16 MiB
	defer tb.unmap()
	m := tb.Memory()
	size := len(tb.buckets) * int(unsafe.Sizeof(bucket{}))
	if !m.Mapped || m.Bytes != size || m.Populate == "" {
		t.Fatalf("Memory() = %+v, want a populated mapping of %d bytes", m, size)
	}
	t.Logf("%d MiB populated by %s in %v", size>>20, m.Populate, m.PopulateTime)
	addr := uintptr(unsafe.Pointer(&tb.buckets[0]))
	s := smaps(t, addr)
	if s["Size"] != size || s["Rss"] != size {
		t.Errorf("smaps: Size %d, Rss %d; want both %d (populated)", s["Size"], s["Rss"], size)
	}

	thp, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	switch {
	case strings.Contains(string(thp), "[never]") || len(thp) == 0:
		t.Logf("huge pages not checked: transparent_hugepage/enabled is %q", strings.TrimSpace(string(thp)))
	case !m.HugeAdvice:
		t.Errorf("madvise(MADV_HUGEPAGE) refused with THP %q", strings.TrimSpace(string(thp)))
	case s["AnonHugePages"] == 0:
		t.Errorf("smaps: AnonHugePages 0 with THP %q: the table is on 4 KiB pages", strings.TrimSpace(string(thp)))
	default:
		t.Logf("AnonHugePages %d MiB of %d", s["AnonHugePages"]>>20, size>>20)
	}

	if err := tb.Lock(); err != nil {
		var lim unix.Rlimit
		_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim)
		if os.Geteuid() != 0 && lim.Max < uint64(size) {
			t.Skipf("Locked not checked: RLIMIT_MEMLOCK hard limit %d bytes cannot be raised to %d: %v", lim.Max, size, err)
		}
		t.Fatalf("Lock: %v", err)
	}
	if !tb.Memory().Locked {
		t.Error("Memory().Locked false after Lock")
	}
	if s := smaps(t, addr); s["Locked"] != size || s["Rss"] != size {
		t.Errorf("smaps after Lock: Locked %d, Rss %d; want both %d", s["Locked"], s["Rss"], size)
	}
}

// TestNew_SmallTablePopulated: a table on the Go heap is touched too.
func TestNew_SmallTablePopulated(t *testing.T) {
	tb := mustNew(t, MinCapacity)
	if m := tb.Memory(); m.Mapped || m.Populate != "touch" || m.Bytes != MinCapacity*64 {
		t.Errorf("Memory() = %+v, want a touched heap table of %d bytes", m, MinCapacity*64)
	}
	if err := tb.Lock(); err != nil {
		t.Errorf("Lock of a heap table: %v, want nil (nothing locked)", err)
	}
}

// BenchmarkNew is the start-up cost of a table: mapping, huge-page advice
// and populating (ms per New), at 1M, 4M and 16M entries (64 MiB, 256 MiB,
// 1 GiB). `go test -run '^$' -bench New -benchtime 3x ./conntrack/`.
func BenchmarkNew(b *testing.B) {
	for _, n := range []int{1 << 20, 1 << 22, 1 << 24} {
		b.Run(fmt.Sprintf("%dM", n>>20), func(b *testing.B) {
			var pop, huge float64
			for b.Loop() {
				tb, err := New(n)
				if err != nil {
					b.Fatal(err)
				}
				m := tb.Memory()
				pop += float64(m.PopulateTime.Microseconds()) / 1e3
				if m.HugeAdvice {
					huge = 1
				}
				tb.unmap()
			}
			b.ReportMetric(pop/float64(b.N), "populate-ms/op")
			b.ReportMetric(huge, "huge-advice")
		})
	}
}
