package appliance

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"xlb/dataplane"
)

// tableFaulted is told by the engine when a worker met a fault in the
// mapping of the table kept in state_dir (its file truncated or changed
// under this process) and replaced it by an empty table in memory. The
// flows it tracked are lost; so is any meaning of the file for the next
// process: the state kept beside it is dropped (abandon), so that a
// restart never takes a table this process stopped writing to.
func (s *stack) tableFaulted(f dataplane.TableFault) {
	file := f.Old.Memory().File
	if f.Err != nil {
		// The worker panics again: the process ends, as without
		// containment.
		s.log.Error("conntrack table file faulted and no table in memory could replace it", zap.String("file", file), zap.Error(f.Err))
		return
	}
	s.log.Error("conntrack table file changed under xlb (truncated?): its flows are lost, tracking goes on in an empty table in memory, and the state kept in state_dir is dropped",
		zap.String("file", file), zap.Uint64("fault_offset", uint64(f.Offset)), zap.Int("entries", f.New.Capacity()),
		zap.Int("mib", f.New.Memory().Bytes>>20), zap.Bool("locked", f.New.Memory().Locked))
	if f.LockErr != nil {
		s.log.Warn("conntrack table not locked in memory: it may be swapped out", zap.Error(f.LockErr))
	}
	s.keep.abandon()
}

// abandon stops k for good: nothing more is saved, and the state already
// saved is removed, so that the next process starts with an empty table
// whatever the table file then holds. nil k does nothing.
func (k *keeper) abandon() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dead = true
	path := filepath.Join(k.dir, stateFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		k.log.Error("removing the control plane's state of a faulted table: the next start may take stale flows", zap.String("path", path), zap.Error(err))
	}
}
