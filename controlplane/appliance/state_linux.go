package appliance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/dataplane/worker"
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
	tableID uint64
	log     *zap.Logger

	mu      sync.Mutex // one write at a time
	lastGen uint64     // the snapshot generation the ticker last saved (its own)
	dead    bool       // under mu: the table faulted, nothing is saved (abandon)
}

// openTable returns the conntrack table: kept in state_dir when one is
// configured (with the state to restore when the previous process left a
// matching pair), else in anonymous memory. Nothing here stops a start: a
// file that cannot be used is logged, and the table starts empty.
func (s *stack) openTable() (*conntrack.Table, *controlplane.State, *keeper, error) {
	d := &s.cfg.Dataplane
	if d.StateDir == "" {
		ct, err := conntrack.New(d.ConntrackCapacity)
		return ct, nil, nil, err
	}
	path := filepath.Join(d.StateDir, tableFile)
	fallback := func(err error) (*conntrack.Table, *controlplane.State, *keeper, error) {
		s.log.Warn("conntrack table not kept in state_dir: flows will not survive a restart", zap.String("path", path), zap.Error(err))
		ct, err := conntrack.New(d.ConntrackCapacity)
		return ct, nil, nil, err
	}
	if err := os.MkdirAll(d.StateDir, 0o700); err != nil {
		return fallback(err)
	}
	ct, info, err := conntrack.Open(path, d.ConntrackCapacity, worker.NowMs())
	if err != nil {
		if info.Refused != nil {
			s.log.Warn("conntrack state file refused, moved aside", zap.String("path", path),
				zap.String("moved_to", info.RefusedAs), zap.NamedError("reason", info.Refused))
		}
		return fallback(err)
	}
	k := &keeper{dir: d.StateDir, tableID: ct.FileID(), log: s.log}
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
	if info.Migrated {
		// The table keeps its ID across a migration: the state saved
		// beside it still names it, and its refs are the entries'.
		s.log.Info("conntrack table migrated from the previous process's layout or capacity", zap.String("path", path),
			zap.String("from_layout", fmt.Sprintf("%#x", info.FromLayout)), zap.Int("from_capacity", info.FromCapacity),
			zap.Int("capacity", ct.Capacity()), zap.Int("entries", info.Entries), zap.Int("entries_not_fitting", info.Dropped),
			zap.Int("torn_slots_skipped", info.Torn), zap.Int("backends", len(st.Backends)))
		return ct, st, k, nil
	}
	s.log.Info("conntrack table kept from the previous process", zap.String("path", path),
		zap.Int("entries", info.Entries), zap.Int("torn_slots_cleared", info.Torn), zap.Int("backends", len(st.Backends)))
	return ct, st, k, nil
}

// load reads the state and checks that it goes with the table.
func (k *keeper) load() (*controlplane.State, error) {
	b, err := os.ReadFile(filepath.Join(k.dir, stateFile))
	if err != nil {
		return nil, err
	}
	st, err := controlplane.ParseState(b)
	if err != nil {
		return nil, err
	}
	if st.Table != k.tableID {
		return nil, fmt.Errorf("state of table %016x, the table is %016x", st.Table, k.tableID)
	}
	return st, nil
}

// save writes st for the table: to a temporary file, then renamed over
// the last, so a reader (the next process) sees one or the other whole.
func (k *keeper) save(st controlplane.State) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		return
	}
	st.Table = k.tableID
	if err := k.write(st); err != nil {
		k.log.Warn("saving the control plane's state", zap.Error(err))
	}
}

func (k *keeper) write(st controlplane.State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	path := filepath.Join(k.dir, stateFile)
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
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
			if gen := cp.Snapshot().Gen; gen != k.lastGen {
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
		s.log.Info("control plane state saved", zap.String("dir", k.dir))
	})
}
