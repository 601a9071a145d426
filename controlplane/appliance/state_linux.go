package appliance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/dataplane"
	"xlb/dataplane/worker"
	"xlb/internal/safedir"
)

// The files of dataplane.state_dir: the conntrack table, mapped by every
// process in turn, and the control plane's state that gives its entries
// their meaning (controlplane.State, JSON, replaced by rename).
const (
	tableFile = "conntrack"
	stateFile = "controlplane.json"
	// stateEvery is how often health and weight changes are saved;
	// new refs are saved before they reach the data plane (OnRefs).
	stateEvery = time.Second
)

// keeper saves the control plane's state beside the table it goes with.
type keeper struct {
	dir     string
	lock    *stateLock // dir's, held while the table file is in use
	tableID uint64
	owner   int // the uid its files may belong to besides root
	log     *zap.Logger

	mu      sync.Mutex // one write at a time
	lastErr error      // the last save's (under mu)
	lastGen uint64     // the snapshot generation the ticker last saved (its own)
	dead    bool       // under mu: the table faulted, nothing is saved (abandon)
}

// stateOwner is the uid state_dir and its files must belong to (or
// root): the user xlb runs as (dataplane.user, else whoever started it).
func (s *stack) stateOwner() int {
	if id, err := RunAs(s.cfg); err == nil {
		return id.UID
	}
	return os.Geteuid() // an unknown user stops the start elsewhere
}

// ownStateDir makes a state_dir xlb just created the run-as user's, so
// that it can save there once it has switched to that user; one that was
// there already must be that user's (a switch would leave its saves
// refused). Nothing to do without a switch.
func (s *stack) ownStateDir(dir string, created bool) error {
	id, err := RunAs(s.cfg)
	if err != nil || !id.Configured || id.UID == os.Geteuid() {
		return nil
	}
	if created {
		return os.Lchown(dir, id.UID, id.GID)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != id.UID {
		return errStateDir{fmt.Errorf("%s belongs to uid %d but xlb runs as %s (uid %d, dataplane.user) once started, and could not save there: chown it to that user", dir, st.Uid, id.Cfg, id.UID)}
	}
	return nil
}

// lockStateDir takes dir's lock for the user xlb runs as.
func (s *stack) lockStateDir(dir string) (*stateLock, error) {
	uid, gid := os.Geteuid(), os.Getegid()
	if id, err := RunAs(s.cfg); err == nil {
		uid, gid = id.UID, id.GID
	}
	return lockStateDir(dir, uid, gid)
}

// errStateDir is a state_dir refused as unsafe: xlb does not start.
type errStateDir struct{ err error }

func (e errStateDir) Error() string {
	return "refusing dataplane.state_dir: " + e.err.Error()
}

func (e errStateDir) Unwrap() error { return e.err }

// openTable returns the conntrack table: kept in state_dir when one is
// configured (with the state to restore when the previous process left a
// matching pair), else in anonymous memory. A state_dir others could
// write (safedir.Check) stops the start: root would otherwise trust files
// another user planted; so does one whose lock another process holds
// (errStateDirInUse). The lock taken is the keeper's. Nothing else here does: a directory or file that
// cannot be used is logged, and the table starts empty.
func (s *stack) openTable() (*conntrack.Table, *controlplane.State, *keeper, error) {
	d := &s.cfg.Dataplane
	if d.StateDir == "" {
		ct, err := conntrack.New(d.ConntrackCapacity)
		return ct, nil, nil, err
	}
	path := filepath.Join(d.StateDir, tableFile)
	var lock *stateLock // taken below; a fallback lets it go
	fallback := func(err error) (*conntrack.Table, *controlplane.State, *keeper, error) {
		lock.release()
		s.log.Warn("conntrack table not kept in state_dir: flows will not survive a restart", zap.String("path", path), zap.Error(err))
		ct, err := conntrack.New(d.ConntrackCapacity)
		return ct, nil, nil, err
	}
	// Made (0700) only under directories no one else could move.
	_, statErr := os.Lstat(d.StateDir)
	if err := safedir.MkdirAll(d.StateDir, s.stateOwner()); err != nil {
		if errors.Is(err, safedir.ErrUnsafe) {
			return nil, nil, nil, errStateDir{err}
		}
		return fallback(err)
	}
	if err := s.ownStateDir(d.StateDir, errors.Is(statErr, fs.ErrNotExist)); err != nil {
		var refused errStateDir
		if errors.As(err, &refused) {
			return nil, nil, nil, err
		}
		return fallback(err)
	}
	// Before the table file opens: another process may have it mapped.
	lock, err := s.lockStateDir(d.StateDir)
	if err != nil {
		if _, ok := errors.AsType[errStateDirInUse](err); ok {
			return nil, nil, nil, err
		}
		if errors.Is(err, safedir.ErrUnsafe) {
			return nil, nil, nil, errStateDir{err}
		}
		return fallback(err)
	}
	if mem, magic, err := safedir.MemoryFS(d.StateDir); err == nil && !mem {
		s.log.Warn("state_dir is not on a memory file system (tmpfs): every table write may reach the disk, and a reboot leaves a table that is refused",
			zap.String("dir", d.StateDir), zap.String("fs_magic", fmt.Sprintf("%#x", magic)))
	}
	ct, info, err := conntrack.Open(path, d.ConntrackCapacity, worker.NowMs())
	if err != nil {
		if info.Refused != nil {
			s.log.Warn("conntrack state file refused, moved aside", zap.String("path", path),
				zap.String("moved_to", info.RefusedAs), zap.NamedError("reason", info.Refused))
		}
		return fallback(err)
	}
	k := &keeper{dir: d.StateDir, lock: lock, tableID: ct.FileID(), owner: s.stateOwner(), log: s.log}
	if info.Refused != nil {
		s.log.Warn("conntrack state file refused, moved aside: starting with an empty table",
			zap.String("path", path), zap.String("moved_to", info.RefusedAs), zap.Error(info.Refused))
	}
	if !info.Kept && !info.Migrated {
		return ct, nil, k, nil
	}
	st, err := k.load()
	if err != nil {
		// Entries whose refs cannot be resolved as they were would send
		// flows to whichever backend now holds a slot: none are better.
		ct.Reset()
		s.log.Warn("conntrack table kept but not the control plane's state: starting with an empty table",
			zap.String("path", filepath.Join(d.StateDir, stateFile)), zap.Error(err))
		return ct, nil, k, nil
	}
	unknown := dropUnknown(ct, st, worker.NowMs())
	if info.Migrated {
		// The table keeps its ID across a migration: the state saved
		// beside it still names it, and its refs are the entries'.
		s.log.Info("conntrack table migrated from the previous process's layout or capacity", zap.String("path", path),
			zap.String("from_layout", fmt.Sprintf("%#x", info.FromLayout)), zap.Int("from_capacity", info.FromCapacity),
			zap.Int("capacity", ct.Capacity()), zap.Int("entries", info.Entries-unknown), zap.Int("entries_not_fitting", info.Dropped),
			zap.Int("torn_slots_skipped", info.Torn), zap.Int("entries_of_no_backend_dropped", unknown), zap.Int("backends", len(st.Backends)))
		return ct, st, k, nil
	}
	s.log.Info("conntrack table kept from the previous process", zap.String("path", path),
		zap.Int("entries", info.Entries-unknown), zap.Int("torn_slots_cleared", info.Torn),
		zap.Int("misplaced_slots_cleared", info.Misplaced), zap.Int("entries_of_no_backend_dropped", unknown),
		zap.Int("backends", len(st.Backends)))
	return ct, st, k, nil
}

// dropUnknown deletes the entries of ct that name a service or backend
// st does not have, and returns how many: no process wrote such an entry
// for this state (a backend the previous process removed and stopped
// draining is not in it either, and its entries resolve to nothing
// anyway). Damage the table's own checks miss ends here. Before any
// worker runs.
func dropUnknown(ct *conntrack.Table, st *controlplane.State, now int64) int {
	svcs := make(map[uint16]bool, len(st.Services))
	for _, sv := range st.Services {
		svcs[sv.ID] = true
	}
	refs := make(map[uint32]bool, len(st.Backends))
	for _, b := range st.Backends {
		refs[uint32(dataplane.MakeRef(b.Slot, b.Gen))] = true
	}
	n := 0
	ct.Range(now, func(k conntrack.Key, e conntrack.Entry) bool {
		if !svcs[k.Service] || !refs[e.Backend] {
			if ct.Delete(&k) {
				n++
			}
		}
		return true
	})
	return n
}

// load reads the state and checks that it goes with the table: a state
// file that is a link, not root's or the owner's, or others may write is
// refused (safedir.Open), as is one whose checksum does not match.
func (k *keeper) load() (*controlplane.State, error) {
	f, err := safedir.Open(filepath.Join(k.dir, stateFile), os.O_RDONLY, k.owner)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	st, err := controlplane.DecodeStateFile(b)
	if err != nil {
		return nil, err
	}
	if st.Table != k.tableID {
		return nil, fmt.Errorf("state of table %016x, the table is %016x", st.Table, k.tableID)
	}
	return st, nil
}

// save writes st for the table (safedir.WriteFile: a temporary file,
// synced, renamed over the last), so a reader (the next process) sees one
// or the other whole. A save that fails is logged as an error, and
// remembered for the last word at the teardown.
func (k *keeper) save(st controlplane.State) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		return
	}
	st.Table = k.tableID
	err := k.write(st)
	switch {
	case err != nil && (k.lastErr == nil || k.lastErr.Error() != err.Error()):
		// Once per failure, not once a second while the disk is full.
		k.log.Error("control plane state not saved: the next process may not keep the tracked flows",
			zap.String("path", filepath.Join(k.dir, stateFile)), zap.Error(err))
	case err == nil && k.lastErr != nil:
		k.log.Info("control plane state saved again", zap.String("path", filepath.Join(k.dir, stateFile)))
	}
	k.lastErr = err
}

func (k *keeper) write(st controlplane.State) error {
	b, err := controlplane.EncodeStateFile(st)
	if err != nil {
		return err
	}
	return safedir.WriteFile(k.dir, stateFile, b)
}

// errAbandoned is saved's answer once the table faulted: nothing is
// kept for the next process.
var errAbandoned = errors.New("the table file was changed under xlb: its state was removed, not saved")

// saved reports the last save's error (nil: it was written).
func (k *keeper) saved() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		return errAbandoned
	}
	return k.lastErr
}

// run saves health and weight changes every stateEvery until ctx ends,
// then once more.
func (k *keeper) run(ctx context.Context, cp *controlplane.ControlPlane) {
	t := time.NewTicker(stateEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			cp.WithState(k.save)
			return
		case <-t.C:
			// Under the control plane's lock: a state read before a
			// reload's OnRefs must not be written after it.
			// A save that failed is tried again at every tick.
			if gen := cp.Snapshot().Gen; gen != k.lastGen || k.saved() != nil {
				k.lastGen = gen
				cp.WithState(k.save)
			}
		}
	}
}

// start runs k for cp until the teardown; nil k does nothing.
func (k *keeper) start(s *stack) {
	if k == nil {
		return
	}
	ctx, stop := context.WithCancel(s.life)
	var wg sync.WaitGroup
	wg.Go(func() { k.run(ctx, s.cp) })
	s.undo = append(s.undo, func() {
		stop()
		wg.Wait()
		k.lastWord(s.log)
	})
}

// lastWord says whether the teardown's save reached the directory: the
// next process keeps the tracked flows only then.
func (k *keeper) lastWord(log *zap.Logger) {
	if err := k.saved(); err != nil {
		log.Error("control plane state not saved at the end: the next process will start with an empty table",
			zap.String("dir", k.dir), zap.Error(err))
		return
	}
	log.Info("control plane state saved", zap.String("dir", k.dir))
}
