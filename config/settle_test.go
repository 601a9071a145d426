package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeInfo is a stat result of a given size and modification time.
type fakeInfo struct {
	size  int64
	mtime time.Time
}

func (f fakeInfo) Name() string       { return "xlb.toml" }
func (f fakeInfo) Size() int64        { return f.size }
func (f fakeInfo) Mode() fs.FileMode  { return 0o644 }
func (f fakeInfo) ModTime() time.Time { return f.mtime }
func (f fakeInfo) IsDir() bool        { return false }
func (f fakeInfo) Sys() any           { return nil }

// settleRig is a file on disk whose stats come from stats, one per call
// (the last one repeated), with the sleeps recorded instead of slept.
type settleRig struct {
	path   string
	stats  []fakeInfo
	calls  int
	sleeps []time.Duration
}

func newSettleRig(t *testing.T, stats ...fakeInfo) *settleRig {
	t.Helper()
	r := &settleRig{path: filepath.Join(t.TempDir(), "xlb.toml"), stats: stats}
	if err := os.WriteFile(r.path, []byte(valid), 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *settleRig) settle() Settle {
	return Settle{
		Stat: func(string) (fs.FileInfo, error) {
			i := min(r.calls, len(r.stats)-1)
			r.calls++
			return r.stats[i], nil
		},
		Sleep: func(d time.Duration) { r.sleeps = append(r.sleeps, d) },
	}
}

// TestLoadSettled_Settles: a file whose size, then modification time,
// change between the stats around a read is read again after a pause,
// and loads once two stats agree.
func TestLoadSettled_Settles(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	r := newSettleRig(t,
		fakeInfo{100, t0}, fakeInfo{200, t0}, // grew while read
		fakeInfo{200, t0}, fakeInfo{200, t0.Add(time.Millisecond)}, // written again
		fakeInfo{300, t0.Add(2 * time.Millisecond)}) // settled: every later stat agrees
	cfg, err := LoadSettled(r.path, r.settle())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Path != r.path || len(cfg.Rules) != 1 {
		t.Errorf("loaded %q with %d rules, want the file's one rule", cfg.Path, len(cfg.Rules))
	}
	if r.calls != 6 || len(r.sleeps) != 2 || r.sleeps[0] != DefaultSettlePause {
		t.Errorf("%d stats, sleeps %v; want 6 stats (3 reads) and 2 pauses of %v", r.calls, r.sleeps, DefaultSettlePause)
	}
}

// TestLoadSettled_GivesUp: a file that changes at every read is read the
// bounded number of times, then refused with ErrUnsettled and the advice
// to write it elsewhere and rename it into place; a stable one loads at
// the first read, with no pause.
func TestLoadSettled_GivesUp(t *testing.T) {
	var stats []fakeInfo
	for i := range 20 {
		stats = append(stats, fakeInfo{int64(100 + i), time.Unix(1700000000, int64(i))})
	}
	r := newSettleRig(t, stats...)
	s := r.settle()
	s.Reads, s.Pause = 3, 7*time.Millisecond
	_, err := LoadSettled(r.path, s)
	if !errors.Is(err, ErrUnsettled) {
		t.Fatalf("err %v, want ErrUnsettled", err)
	}
	for _, want := range []string{r.path, "elsewhere", "rename it into place", "3 reads 7ms apart"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if r.calls != 6 || len(r.sleeps) != 2 {
		t.Errorf("%d stats, %d pauses; want 3 reads (6 stats) and 2 pauses", r.calls, len(r.sleeps))
	}

	stable := newSettleRig(t, fakeInfo{10, time.Unix(1700000000, 0)})
	if _, err := LoadSettled(stable.path, stable.settle()); err != nil || stable.calls != 2 || len(stable.sleeps) != 0 {
		t.Errorf("stable file: %v, %d stats, %d pauses; want loaded after 2 stats, no pause", err, stable.calls, len(stable.sleeps))
	}
	// The real stat, read and sleep: a file nobody writes loads.
	if _, err := LoadSettled(stable.path, Settle{}); err != nil {
		t.Errorf("real stat: %v", err)
	}
	if _, err := LoadSettled(filepath.Join(t.TempDir(), "none.toml"), Settle{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want not exist", err)
	}
}
