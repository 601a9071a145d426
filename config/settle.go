package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// Settle is how LoadSettled waits for a file that is being written.
// The zero value reads up to DefaultSettleReads times,
// DefaultSettlePause apart, with os.Stat, os.ReadFile and time.Sleep.
type Settle struct {
	Reads int           // at most; 0: DefaultSettleReads
	Pause time.Duration // between two reads; 0: DefaultSettlePause
	// Stat, Read and Sleep stand in for os.Stat, os.ReadFile and
	// time.Sleep (nil: those), for tests.
	Stat  func(path string) (fs.FileInfo, error)
	Read  func(path string) ([]byte, error)
	Sleep func(time.Duration)
}

// A file that changes between the stat before it is read and the stat
// after is read again, DefaultSettlePause later, up to DefaultSettleReads
// times in all (about half a second).
const (
	DefaultSettleReads = 5
	DefaultSettlePause = 100 * time.Millisecond
)

// ErrUnsettled marks a file that kept changing while LoadSettled read it:
// still being written.
var ErrUnsettled = errors.New("the file kept changing while it was read (still being written?)")

// LoadSettled is Load for a file that another process may be writing (a
// reload reads the running file when told to): it stats the file, reads
// it and stats it again, and parses what it read only if the size and
// modification time did not change meanwhile; otherwise it reads again
// after a pause, a bounded number of times, then gives up with
// ErrUnsettled, advising to write the file elsewhere and rename it into
// place (which replaces it in one step).
func LoadSettled(path string, s Settle) (*Config, error) {
	if s.Reads <= 0 {
		s.Reads = DefaultSettleReads
	}
	if s.Pause <= 0 {
		s.Pause = DefaultSettlePause
	}
	if s.Stat == nil {
		s.Stat = os.Stat
	}
	if s.Read == nil {
		s.Read = os.ReadFile
	}
	if s.Sleep == nil {
		s.Sleep = time.Sleep
	}
	for i := 0; ; i++ {
		before, err := s.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		data, err := s.Read(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		after, err := s.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if before.Size() == after.Size() && before.ModTime().Equal(after.ModTime()) {
			return Parse(path, data)
		}
		if i+1 >= s.Reads {
			return nil, fmt.Errorf("config: %s: %w: %d reads %v apart saw its size or modification time change; "+
				"write the new file elsewhere on the same file system and rename it into place (mv), which replaces it in one step",
				path, ErrUnsettled, s.Reads, s.Pause)
		}
		s.Sleep(s.Pause)
	}
}
