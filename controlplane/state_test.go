package controlplane_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
)

// restartRun records flows on one control plane, flips weights so that
// some of them sit on a backend Maglev no longer picks, then starts a
// second control plane on the same table (a restart) with a configuration
// that lists another service first and a new backend first (so fresh
// allocation would give other IDs and slots), restored from the first's
// state or not, and returns how many flows the second sends elsewhere and
// how many sat off Maglev's choice.
func restartRun(t *testing.T, restore bool) (broken, offMaglev int) {
	t.Helper()
	web := svc{weighted: true, groups: []group{{name: "g", backends: []string{"b1", "b2", "b3", "b4"}}}}
	api := svc{name: "api", vip: "203.0.113.20", groups: []group{{name: "g", backends: []string{"n1", "n2"}}}}
	ct, err := conntrack.New(65536)
	if err != nil {
		t.Fatal(err)
	}
	eng := dataplane.NewEngine(ct)
	var saved controlplane.State
	cp1, err := controlplane.New(cptest.Config(t, configText(t, web, api)), eng, controlplane.Options{
		InitialHealthy: true, InitialWeight: 1000, OnRefs: func(s controlplane.State) { saved = s },
	}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(saved.Backends) != 6 || len(saved.Services) != 2 {
		t.Fatalf("OnRefs before the first snapshot: %+v, want 6 backends of 2 services", saved)
	}
	r1 := &cptest.Rig{TB: t, CP: cp1, D: eng.NewDecider(), Now: 1000}
	const flows = 200
	on := make([]string, flows)
	for i := range flows {
		res := r1.Send(cptest.TCP(fmt.Sprintf("198.51.100.%d", i+1), vip, 40000, 80, "S"))
		on[i] = res.BackendName()
	}
	// b1 and b2 get weight 0: Maglev never picks them again.
	for _, b := range []string{"b1", "b2"} {
		r1.Weight(b, 0)
	}
	for _, b := range []string{"b3", "b4"} {
		r1.Weight(b, 1000)
	}
	for i := range flows {
		if on[i] == "b1" || on[i] == "b2" {
			offMaglev++
		}
	}
	state := cp1.State()
	text, err := json.Marshal(state)
	if err != nil {
		t.Fatal(err)
	}

	// The restart: a new engine and control plane on the same table.
	web.groups[0].backends = []string{"b5", "b4", "b3", "b2", "b1"}
	eng2 := dataplane.NewEngine(ct)
	opts := controlplane.Options{InitialHealthy: false, InitialWeight: 1}
	if restore {
		st, err := controlplane.ParseState(text)
		if err != nil {
			t.Fatalf("ParseState: %v", err)
		}
		opts.Restore = st
	}
	cp2, err := controlplane.New(cptest.Config(t, configText(t, svc{name: "new", vip: "203.0.113.30",
		groups: []group{{name: "g", backends: []string{"p1"}}}}, api, web)), eng2, opts, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if restore && cp2.Restored() != 6 {
		t.Fatalf("Restored() = %d, want 6", cp2.Restored())
	}
	r2 := &cptest.Rig{TB: t, CP: cp2, D: eng2.NewDecider(), Now: 2000}
	for i := range flows {
		res := r2.Send(cptest.TCP(fmt.Sprintf("198.51.100.%d", i+1), vip, 40000, 80, "A"))
		if res.BackendName() != on[i] || res.Track != dataplane.TrackHit {
			broken++
		}
	}
	if restore {
		// The restored health and weight view holds until health checks
		// report: b1 is still healthy, weight 0.
		for _, b := range cp2.Snapshot().Backends {
			if b != nil && b.Name == "b1" && (!b.Healthy || b.ReportedWeight != 0) {
				t.Fatalf("b1 after restore: healthy %v weight %d, want true 0", b.Healthy, b.ReportedWeight)
			}
		}
	}
	return broken, offMaglev
}

// TestRestore_FlowsKeepTheirBackends: a control plane restored from its
// predecessor's state keeps every tracked flow on its backend, those off
// Maglev's choice too, though the new configuration lists services and
// backends in another order; without the state, flows break (the check
// can fail).
func TestRestore_FlowsKeepTheirBackends(t *testing.T) {
	broken, off := restartRun(t, true)
	if off == 0 {
		t.Fatal("no flow sat off Maglev's choice: the test proves nothing")
	}
	if broken != 0 {
		t.Fatalf("%d of 200 flows moved after a restored restart (%d off Maglev's choice), want 0", broken, off)
	}
	if broken, _ := restartRun(t, false); broken == 0 {
		t.Fatal("no flow moved after a restart without state: the restored case proves nothing")
	}
}

// TestRestore_NewBackendGetsNewRef: a backend gone from the configuration
// leaves its slot to a new one under a new generation, so the old entries
// resolve to nothing instead of to the newcomer.
func TestRestore_NewBackendGetsNewRef(t *testing.T) {
	one := svc{groups: []group{{name: "g", backends: []string{"b1", "b2"}}}}
	cp1, err := controlplane.New(cptest.Config(t, configText(t, one)), nil, controlplane.Options{InitialHealthy: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	st := cp1.State()
	old := map[string]uint32{}
	for _, b := range st.Backends {
		old[b.IP.String()] = uint32(dataplane.MakeRef(b.Slot, b.Gen))
	}
	one.groups[0].backends = []string{"b2", "b3"}
	cp2, err := controlplane.New(cptest.Config(t, configText(t, one)), nil, controlplane.Options{Restore: &st}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range cp2.Snapshot().Backends {
		if b == nil {
			continue
		}
		switch b.Name {
		case "b2":
			if uint32(b.Ref) != old["10.0.1.2"] {
				t.Fatalf("b2 ref %#x, want its old %#x", b.Ref, old["10.0.1.2"])
			}
		case "b3":
			for ip, ref := range old {
				if uint32(b.Ref) == ref {
					t.Fatalf("b3 took %s's ref %#x", ip, ref)
				}
			}
		}
	}
}

// TestParseState_Refuses: a state of another format or with refs that do
// not add up is refused with an error, never restored.
func TestParseState_Refuses(t *testing.T) {
	cases := map[string]string{
		"json":       `{"format":1,`,
		"format":     `{"format":2}`,
		"generation": `{"format":1,"generations":[3],"backends":[{"service":"web","ip":"10.0.1.1","slot":0,"generation":2}]}`,
		"slot":       `{"format":1,"generations":[0],"backends":[{"service":"web","ip":"10.0.1.1","slot":1,"generation":0}]}`,
		"same slot":  `{"format":1,"generations":[0],"backends":[{"service":"web","ip":"10.0.1.1","slot":0,"generation":0},{"service":"web","ip":"10.0.1.2","slot":0,"generation":0}]}`,
		"same name":  `{"format":1,"generations":[0,0],"backends":[{"service":"web","ip":"10.0.1.1","slot":0,"generation":0},{"service":"web","ip":"10.0.1.1","slot":1,"generation":0}]}`,
		"same id":    `{"format":1,"services":[{"name":"a","id":1},{"name":"b","id":1}]}`,
		// Beyond what a ref carries: MakeRef would truncate it.
		"generation too big":      fmt.Sprintf(`{"format":1,"generations":[%d],"backends":[{"service":"web","ip":"10.0.1.1","slot":0,"generation":%[1]d}]}`, dataplane.MaxGeneration+1),
		"free generation too big": fmt.Sprintf(`{"format":1,"generations":[0,%d],"backends":[{"service":"web","ip":"10.0.1.1","slot":0,"generation":0}]}`, uint32(1)<<31),
		"too many slots":          `{"format":1,"generations":[` + strings.Repeat("0,", dataplane.MaxBackendSlots) + `0]}`,
		// Beyond the fields' types: refused by the decoder, never wrapped.
		"service id":   `{"format":1,"services":[{"name":"a","id":65536}]}`,
		"next service": `{"format":1,"next_service":65536}`,
		"slot too big": `{"format":1,"generations":[0],"backends":[{"service":"web","ip":"10.0.1.1","slot":4294967296,"generation":0}]}`,
		"negative gen": `{"format":1,"generations":[-1]}`,
		"weight state": `{"format":1,"generations":[0],"backends":[{"service":"web","ip":"10.0.1.1","slot":0,"generation":0,"weight_state":4}]}`,
	}
	for name, text := range cases {
		if _, err := controlplane.ParseState([]byte(text)); err == nil {
			t.Errorf("%s: ParseState(%s) accepted", name, strings.TrimSpace(text))
		}
	}
	if _, err := controlplane.ParseState([]byte(`{"format":1,"generations":[0],"backends":[{"service":"web","ip":"10.0.1.1","slot":0,"generation":0}]}`)); err != nil {
		t.Errorf("a consistent state refused: %v", err)
	}
	// The bounds themselves are in range.
	top := fmt.Sprintf(`{"format":1,"next_service":65535,"services":[{"name":"web","id":65535}],"generations":[`+strings.Repeat("0,", dataplane.MaxBackendSlots-1)+`%d],"backends":[{"service":"web","ip":"10.0.1.1","slot":%d,"generation":%[1]d,"weight_state":3}]}`,
		dataplane.MaxGeneration, dataplane.MaxBackendSlots-1)
	st, err := controlplane.ParseState([]byte(top))
	if err != nil {
		t.Fatalf("a state at every bound refused: %v", err)
	}
	if b := st.Backends[0]; b.Gen != dataplane.MaxGeneration || b.Slot != dataplane.MaxBackendSlots-1 {
		t.Errorf("a state at every bound read as slot %d generation %d", b.Slot, b.Gen)
	}
}

// TestRestore_OperatorDrainKept: a backend an operator drained stays
// drained, with its deadline, in the next process.
func TestRestore_OperatorDrainKept(t *testing.T) {
	one := svc{drainingSec: 60, groups: []group{{name: "g", backends: []string{"b1", "b2"}}}}
	cfg := cptest.Config(t, configText(t, one))
	cp1, err := controlplane.New(cfg, nil, controlplane.Options{InitialHealthy: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp1.Drain("b1", 1000); err != nil {
		t.Fatal(err)
	}
	st := cp1.State()
	cp2, err := controlplane.New(cfg, nil, controlplane.Options{Restore: &st}, 5000)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range cp2.Snapshot().Backends {
		if b != nil && b.Name == "b1" && (!b.Removed || b.DrainUntil != 61000) {
			t.Fatalf("b1 after restore: removed %v, drain until %d; want drained until 61000", b.Removed, b.DrainUntil)
		}
	}
	if _, err := cp2.Undrain("b1", 6000); err != nil {
		t.Fatalf("undrain of a restored drain: %v", err)
	}
}

// TestOnRefs_BeforeTheSnapshot: a reload that adds a backend hands the
// state with its ref to OnRefs before the snapshot that carries it is
// published; a health change alone does not call it.
func TestOnRefs_BeforeTheSnapshot(t *testing.T) {
	one := svc{groups: []group{{name: "g", backends: []string{"b1"}}}}
	eng := dataplane.NewEngine(nil)
	var calls int
	var seen controlplane.State
	var published uint64
	cp, err := controlplane.New(cptest.Config(t, configText(t, one)), eng, controlplane.Options{InitialHealthy: true,
		OnRefs: func(s controlplane.State) {
			calls++
			seen = s
			if snap := eng.Load(); snap != nil {
				published = snap.Gen
			}
		}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.SetHealth("b1", false, 1); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("OnRefs called %d times after New and a health change, want 1", calls)
	}
	before := cp.Snapshot().Gen
	one.groups[0].backends = []string{"b1", "b2"}
	if _, err := cp.Apply(cptest.Config(t, configText(t, one)), 2); err != nil {
		t.Fatal(err)
	}
	if calls != 2 || published != before {
		t.Fatalf("after a reload: %d calls, published generation %d when called; want 2 calls, while %d was the last published", calls, published, before)
	}
	var b2 *dataplane.Backend
	for _, b := range cp.Snapshot().Backends {
		if b != nil && b.Name == "b2" {
			b2 = b
		}
	}
	found := false
	for _, r := range seen.Backends {
		found = found || (r.IP == b2.IP && dataplane.MakeRef(r.Slot, r.Gen) == b2.Ref)
	}
	if !found {
		t.Fatalf("state handed to OnRefs %+v lacks b2's ref %#x", seen.Backends, b2.Ref)
	}
}

// TestStateFile_Checksum: a state file decodes back to the state it was
// encoded from; the same file with two backends' slots swapped (valid
// JSON, a state ParseState accepts), with one byte of the state changed,
// with a damaged sum, or a bare state without a sum (an older xlb's file)
// is refused with ErrStateChecksum.
func TestStateFile_Checksum(t *testing.T) {
	st := controlplane.State{Format: controlplane.StateFormat, Table: 0xabc, Gens: []uint32{0, 0},
		Backends: []controlplane.BackendRecord{
			{Service: "web", IP: netip.MustParseAddr("10.0.1.1"), Slot: 0, Healthy: true, Weight: 1},
			{Service: "web", IP: netip.MustParseAddr("10.0.1.2"), Slot: 1, Healthy: true, Weight: 1},
		}}
	b, err := controlplane.EncodeStateFile(st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := controlplane.DecodeStateFile(b)
	if err != nil {
		t.Fatalf("DecodeStateFile of its own encoding: %v", err)
	}
	if got.Table != st.Table || len(got.Backends) != 2 || got.Backends[0] != st.Backends[0] || got.Backends[1] != st.Backends[1] {
		t.Fatalf("decoded %+v, want %+v", got, st)
	}
	text := string(b)
	swapped := strings.NewReplacer(`"slot":0`, `"slot":1`, `"slot":1`, `"slot":0`).Replace(text)
	if swapped == text {
		t.Fatal("no slots to swap in " + text)
	}
	var inner struct{ State json.RawMessage }
	if err := json.Unmarshal([]byte(swapped), &inner); err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.ParseState(inner.State); err != nil {
		t.Fatalf("the swapped state is not one ParseState accepts, so the test proves nothing: %v", err)
	}
	bare, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"slots swapped":  swapped,
		"weight changed": strings.Replace(text, `"weight":1`, `"weight":2`, 1),
		"sum damaged":    strings.Replace(text, `"sha256":"`, `"sha256":"0`, 1),
		"no sum":         string(bare),
	}
	for name, c := range cases {
		if c == text {
			t.Fatalf("%s: the file is unchanged", name)
		}
		if _, err := controlplane.DecodeStateFile([]byte(c)); !errors.Is(err, controlplane.ErrStateChecksum) {
			t.Errorf("%s: DecodeStateFile: %v, want ErrStateChecksum", name, err)
		}
	}
}
