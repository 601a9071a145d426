package controlplane

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	"xlb/config"
	"xlb/dataplane"
)

// StateFormat is the version of State's encoding; a state of another
// format is not restored.
const StateFormat = 1

// State is what a control plane hands to the next process on the same
// host, so that the conntrack entries it kept still mean the same
// backends: the service IDs (part of every tracking key), the slot and
// generation of every backend (what an entry records), and each backend's
// last health and weight, the view the data plane keeps until the new
// process's health checks have spoken.
type State struct {
	Format int `json:"format"`
	// Table is the conntrack table this state goes with (its FileID): a
	// state is restored with that table or not at all.
	Table       uint64          `json:"table"`
	NextService uint16          `json:"next_service"`
	Services    []ServiceID     `json:"services"`
	Gens        []uint32        `json:"generations"`
	Backends    []BackendRecord `json:"backends"`
}

// ServiceID is a service's tracking ID.
type ServiceID struct {
	Name string `json:"name"`
	ID   uint16 `json:"id"`
}

// BackendRecord is a current backend: its ref and its last known state.
type BackendRecord struct {
	Service     string     `json:"service"`
	IP          netip.Addr `json:"ip"`
	Slot        uint32     `json:"slot"`
	Gen         uint32     `json:"generation"`
	Healthy     bool       `json:"healthy"`
	Weight      uint32     `json:"weight"`
	WeightState uint8      `json:"weight_state"`
	Drained     bool       `json:"drained,omitempty"`
	DrainUntil  int64      `json:"drain_until_ms,omitempty"`
}

// A state file (state_dir/controlplane.json) is the state's JSON wrapped
// with its SHA-256: {"sha256":"<hex>","state":{...}}, the sum over the
// exact bytes of the "state" value. Any edit of those bytes, a slot
// swapped or a byte damaged, is refused as a state that does not add up
// is: the sum cannot keep out whoever may write the directory (safedir
// keeps them out), it tells what xlb wrote from what it did not.
type stateFile struct {
	SHA256 string          `json:"sha256"`
	State  json.RawMessage `json:"state"`
}

// ErrStateChecksum is what DecodeStateFile's refusal of a file whose sum
// does not match (or that has none) wraps.
var ErrStateChecksum = errors.New("control plane state checksum does not match")

// EncodeStateFile is st as a state file.
func EncodeStateFile(st State) ([]byte, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return json.Marshal(stateFile{SHA256: hex.EncodeToString(sum[:]), State: b})
}

// DecodeStateFile checks a state file's sum, then decodes and checks its
// state (ParseState).
func DecodeStateFile(b []byte) (*State, error) {
	var f stateFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	if f.SHA256 == "" || len(f.State) == 0 {
		return nil, fmt.Errorf("%w: no sha256 and state (a file of an older xlb, or not xlb's)", ErrStateChecksum)
	}
	want, err := hex.DecodeString(f.SHA256)
	sum := sha256.Sum256(f.State)
	if err != nil || !bytes.Equal(want, sum[:]) {
		return nil, fmt.Errorf("%w: the file says %.16s (first 16 digits), its state sums to %x (first 8 bytes)", ErrStateChecksum, f.SHA256, sum[:8])
	}
	return ParseState(f.State)
}

// ParseState decodes a state and checks what restoring it relies on.
func ParseState(b []byte) (*State, error) {
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	if s.Format != StateFormat {
		return nil, fmt.Errorf("state format %d, this binary's is %d", s.Format, StateFormat)
	}
	if n := len(s.Gens); n > dataplane.MaxBackendSlots {
		return nil, fmt.Errorf("%d slots: more than a ref can name (%d)", n, dataplane.MaxBackendSlots)
	}
	// A generation a ref cannot carry would be truncated by MakeRef, and
	// the backend would take over the entries of an older one.
	for slot, g := range s.Gens {
		if g > dataplane.MaxGeneration {
			return nil, fmt.Errorf("slot %d: generation %d, more than a ref can carry (%d)", slot, g, dataplane.MaxGeneration)
		}
	}
	slots, names := map[uint32]bool{}, map[svcIP]bool{}
	for _, b := range s.Backends {
		if int(b.Slot) >= len(s.Gens) || s.Gens[b.Slot] != b.Gen || !b.IP.IsValid() || b.WeightState >= uint8(len(weightStateNames)) {
			return nil, fmt.Errorf("backend %s of %q: slot %d generation %d inconsistent", b.IP, b.Service, b.Slot, b.Gen)
		}
		key := svcIP{b.Service, b.IP}
		if slots[b.Slot] || names[key] {
			return nil, fmt.Errorf("backend %s of %q (slot %d) listed twice", b.IP, b.Service, b.Slot)
		}
		slots[b.Slot], names[key] = true, true
	}
	ids := map[uint16]bool{}
	for _, sv := range s.Services {
		if ids[sv.ID] {
			return nil, fmt.Errorf("service ID %d listed twice", sv.ID)
		}
		ids[sv.ID] = true
	}
	return &s, nil
}

// State returns the control plane's state (Table unset).
func (c *ControlPlane) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state()
}

// WithState calls fn with the state under the control plane's lock, so
// that what fn saves is never older than what OnRefs saved before it.
func (c *ControlPlane) WithState(fn func(State)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn(c.state())
}

func (c *ControlPlane) state() State {
	s := State{Format: StateFormat, NextService: c.nextSvc, Gens: append([]uint32(nil), c.gens...)}
	for _, name := range c.order {
		s.Services = append(s.Services, ServiceID{Name: name, ID: c.services[name].id})
	}
	for slot, b := range c.slots {
		if b == nil || (b.removed && !b.drained) {
			continue
		}
		s.Backends = append(s.Backends, BackendRecord{
			Service: b.service, IP: b.ep.IP, Slot: uint32(slot), Gen: c.gens[slot],
			Healthy: b.healthy, Weight: b.weight, WeightState: uint8(b.weightState),
			Drained: b.drained, DrainUntil: b.drainUntil,
		})
	}
	return s
}

// restore takes over r's service IDs and backend refs for what cfg still
// configures, before the first Apply: the slots of backends not restored
// are free (their next owner gets a new generation, so entries naming the
// old one resolve to nothing, as after a drain), and the IDs of services
// gone are free. Restored backends keep their last health and weight
// until health checks report.
func (c *ControlPlane) restore(cfg *config.Config, r *State) {
	want := map[svcIP]bool{}
	for _, s := range cfg.Services {
		for _, g := range s.Groups {
			for _, ep := range g.Endpoints {
				want[svcIP{s.Name, ep.IP}] = true
			}
		}
	}
	configured := map[string]bool{}
	for _, s := range cfg.Services {
		configured[s.Name] = true
	}
	for _, sv := range r.Services {
		if _, used := c.ids[sv.ID]; used || !configured[sv.Name] || c.services[sv.Name] != nil {
			continue
		}
		c.services[sv.Name] = &serviceState{id: sv.ID}
		c.ids[sv.ID] = struct{}{}
	}
	c.nextSvc = r.NextService
	c.gens = append([]uint32(nil), r.Gens...)
	c.slots = make([]*backendState, len(c.gens))
	for _, b := range r.Backends {
		key := svcIP{b.Service, b.IP}
		if !want[key] || c.slots[b.Slot] != nil {
			continue
		}
		c.slots[b.Slot] = &backendState{
			ref:         dataplane.MakeRef(b.Slot, b.Gen),
			service:     b.Service,
			healthy:     b.Healthy,
			weight:      b.Weight,
			weightState: WeightState(b.WeightState),
			removed:     b.Drained,
			drained:     b.Drained,
			drainUntil:  b.DrainUntil,
		}
		c.bySvcIP[key] = b.Slot
		c.restored++
	}
	for slot, b := range c.slots {
		if b == nil {
			c.free = append(c.free, uint32(slot))
		}
	}
}

// Restored returns how many backends New took over from Options.Restore.
func (c *ControlPlane) Restored() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restored
}
