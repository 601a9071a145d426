package appliance

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/dataplane"
)

// TestTableFaulted_DropsKeptState: a contained fault in the table file is
// one error line naming the file, and the state kept beside the table is
// removed and never saved again (a restart must not take a table this
// process stopped writing to for the one it had).
func TestTableFaulted_DropsKeptState(t *testing.T) {
	dir := t.TempDir()
	old, _, err := conntrack.Open(filepath.Join(dir, tableFile), conntrack.MinCapacity, 0)
	if err != nil {
		t.Fatal(err)
	}
	nt, err := conntrack.New(conntrack.MinCapacity)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	k := &keeper{dir: dir, tableID: old.FileID(), log: zap.New(core)}
	st := controlplane.State{Format: controlplane.StateFormat, Gens: []uint32{0}}
	k.save(st)
	if _, err := k.load(); err != nil {
		t.Fatalf("the state before the fault: %v", err)
	}
	s := &stack{log: zap.New(core), keep: k}
	s.tableFaulted(dataplane.TableFault{Old: old, New: nt, Offset: 4096})

	errs := logs.FilterLevelExact(zap.ErrorLevel).All()
	if len(errs) != 1 || !strings.Contains(errs[0].Message, "conntrack table file changed under xlb") ||
		errs[0].ContextMap()["file"] != filepath.Join(dir, tableFile) {
		t.Fatalf("error lines %+v, want one naming the table file", errs)
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile)); !os.IsNotExist(err) {
		t.Fatalf("the kept state is still there after the fault: %v", err)
	}
	k.save(st)
	if _, err := os.Stat(filepath.Join(dir, stateFile)); !os.IsNotExist(err) {
		t.Fatalf("a save after the fault wrote the state again: %v", err)
	}
	// The teardown's last word is a failure, not "saved".
	if err := k.saved(); !errors.Is(err, errAbandoned) {
		t.Fatalf("saved after the fault: %v, want errAbandoned", err)
	}
	// No state_dir: nothing to drop, no panic.
	(&stack{log: zap.NewNop()}).tableFaulted(dataplane.TableFault{Old: old, New: nt})
}
