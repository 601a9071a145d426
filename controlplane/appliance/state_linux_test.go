package appliance

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"xlb/controlplane"
	"xlb/dataplane"
)

// TestKeeper_SaveLoad: the state saved for a table loads back for that
// table only; a missing, foreign or out-of-range state is an error (the caller then
// empties the table rather than resolve its refs wrongly).
func TestKeeper_SaveLoad(t *testing.T) {
	dir := t.TempDir()
	k := &keeper{dir: dir, tableID: 0xabc, log: zap.NewNop()}
	if _, err := k.load(); err == nil {
		t.Fatal("load without a state file succeeded")
	}
	st := controlplane.State{Format: controlplane.StateFormat, Gens: []uint32{0, 3},
		Backends: []controlplane.BackendRecord{{Service: "web", IP: netip.MustParseAddr("10.0.0.1"), Slot: 1, Gen: 3, Healthy: true, Weight: 7}}}
	k.save(st)
	got, err := k.load()
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if got.Table != 0xabc || len(got.Backends) != 1 || got.Backends[0] != st.Backends[0] {
		t.Fatalf("loaded %+v, want %+v for table abc", got, st)
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile+".new")); !os.IsNotExist(err) {
		t.Fatalf("temporary file left behind: %v", err)
	}
	other := &keeper{dir: dir, tableID: 0xdef, log: zap.NewNop()}
	if _, err := other.load(); err == nil {
		t.Fatal("the state of table abc loaded for table def")
	}
	if err := os.WriteFile(filepath.Join(dir, stateFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := k.load(); err == nil {
		t.Fatal("a truncated state loaded")
	}
	// A generation beyond what a ref carries is refused, not truncated.
	big := st
	big.Gens = []uint32{0, dataplane.MaxGeneration + 1}
	big.Backends = []controlplane.BackendRecord{st.Backends[0]}
	big.Backends[0].Gen = dataplane.MaxGeneration + 1
	k.save(big)
	if got, err := k.load(); err == nil {
		t.Fatalf("a state with generation %d loaded: %+v", dataplane.MaxGeneration+1, got)
	}
}
