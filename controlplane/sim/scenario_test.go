package sim_test

// The scenario format of docs/sim-format.md is an external interface:
// these tests pin its parsing rules and the required output fields.

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"xlb/controlplane/cptest"
	"xlb/controlplane/sim"
)

const (
	synLine  = `{"t": 1.0, "packet": {"id": "p1", "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 40000, "dport": 80, "flags": "S"}}`
	healthOK = `{"t": 0.5, "health": {"backend": "b1", "healthy": true}}`
)

func TestScenarioParseErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string // the error must be about its last line
		msg  string
	}{
		{"unknown event kind", `{"t": 1.0, "restart": {"backend": "b1"}}`, `unknown field "restart"`},
		{"unknown field in an event", `{"t": 1.0, "health": {"backend": "b1", "healthy": false, "grace": 3}}`, `unknown field "grace"`},
		{"unknown field in a weight event", `{"t": 1.0, "weight": {"backend": "b1", "weight": 3, "state": "MISSING"}}`, `unknown field "state"`},
		{"unknown field in a packet", `{"t": 1.0, "packet": {"src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "ttl": 3}}`, `unknown field "ttl"`},
		{"unknown field in a quoted packet", `{"t": 1.0, "packet": {"src": "192.0.2.1", "dst": "203.0.113.10", "proto": "icmp", "inner": {"src": "203.0.113.10", "dst": "198.51.100.7", "proto": "tcp", "sport": 80, "dport": 4000, "tos": 1}}}`, `unknown field "tos"`},
		{"missing t", `{"health": {"backend": "b1", "healthy": true}}`, `missing field "t"`},
		{"negative t", `{"t": -1, "health": {"backend": "b1", "healthy": true}}`, "non-negative"},
		{"decreasing t", healthOK + "\n" + `{"t": 0.25, "health": {"backend": "b1", "healthy": true}}`, "before the previous event"},
		{"weight above 1000", `{"t": 1.0, "weight": {"backend": "b1", "weight": 1001}}`, "1001 is outside 0..1000"},
		{"negative weight", `{"t": 1.0, "weight": {"backend": "b1", "weight": -1}}`, "-1 is outside 0..1000"},
		{"fractional weight", `{"t": 1.0, "weight": {"backend": "b1", "weight": 2.5}}`, "weight"},
		{"weight without a backend", `{"t": 1.0, "weight": {"weight": 5}}`, `needs "backend" and "weight"`},
		{"two kinds on one line", `{"t": 1.0, "health": {"backend": "b1", "healthy": true}, "weight": {"backend": "b1", "weight": 5}}`, "exactly one"},
		{"no kind", `{"t": 1.0}`, "exactly one"},
		{"two values on one line", healthOK + " " + healthOK, "more than one JSON value"},
		{"not JSON", `t=1 health b1`, "invalid character"},
		{"bad proto", `{"t": 1.0, "packet": {"src": "198.51.100.7", "dst": "203.0.113.10", "proto": "sctp"}}`, `proto "sctp"`},
		{"bad flags", `{"t": 1.0, "packet": {"src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "flags": "SX"}}`, `flags "SX"`},
		{"bad frag", `{"t": 1.0, "packet": {"src": "198.51.100.7", "dst": "203.0.113.10", "proto": "udp", "frag": "second"}}`, `frag "second"`},
		{"port out of range", `{"t": 1.0, "packet": {"src": "198.51.100.7", "dst": "203.0.113.10", "proto": "udp", "sport": 70000}}`, "sport 70000"},
		{"mixed families", `{"t": 1.0, "packet": {"src": "2001:db8::7", "dst": "203.0.113.10", "proto": "udp"}}`, "different families"},
		{"quic_dcid on tcp", `{"t": 1.0, "packet": {"src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 1, "dport": 443, "quic_dcid": "0102"}}`, "needs proto udp"},
		{"quic_dcid not hex", `{"t": 1.0, "packet": {"src": "198.51.100.7", "dst": "203.0.113.10", "proto": "udp", "sport": 1, "dport": 443, "quic_dcid": "0x12"}}`, "1 to 20 octets in hex"},
		{"quic_type without quic_dcid", `{"t": 1.0, "packet": {"src": "198.51.100.7", "dst": "203.0.113.10", "proto": "udp", "sport": 1, "dport": 443, "quic_type": "initial"}}`, "quic_type needs quic_dcid"},
		{"bad quic_type", `{"t": 1.0, "packet": {"src": "198.51.100.7", "dst": "203.0.113.10", "proto": "udp", "sport": 1, "dport": 443, "quic_dcid": "01", "quic_type": "retry"}}`, `quic type "retry"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Blank and comment lines before the bad one count as lines.
			head := "# a scenario\n\n" + healthOK + "\n   \n  # indented comment\n" + tc.text
			line := strings.Count(head, "\n") + 1
			text := head + "\n" + synLine + "\n"
			_, err := sim.Parse(strings.NewReader(text))
			if err == nil {
				t.Fatalf("no error for:\n%s", tc.text)
			}
			prefix := "line " + strconv.Itoa(line) + ": "
			if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q, want %q... containing %q", err, prefix, tc.msg)
			}
		})
	}
}

func TestScenarioBlankAndCommentLinesIgnored(t *testing.T) {
	text := "\n# comment\n   # indented comment\n\t\n" + healthOK + "\n\n#" + synLine + "\n" + synLine + "\n# trailing"
	evs, err := sim.Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Health == nil || evs[1].Packet == nil {
		t.Fatalf("events %+v, want a health and a packet event", evs)
	}
	if evs[0].Line != 5 || evs[1].Line != 8 {
		t.Errorf("lines %d and %d, want 5 and 8", evs[0].Line, evs[1].Line)
	}
	// Equal t is allowed (non-decreasing).
	if _, err := sim.Parse(strings.NewReader(healthOK + "\n" + healthOK)); err != nil {
		t.Errorf("equal t rejected: %v", err)
	}
}

// runScenario writes a config and a scenario to a temp dir and returns the
// decoded output lines (as generic maps, to see exactly which fields are
// present) and the warnings.
func runScenario(t *testing.T, cfg, scenario string) ([]map[string]any, string) {
	t.Helper()
	dir := t.TempDir()
	cfgPath, scPath := filepath.Join(dir, "xlb.toml"), filepath.Join(dir, "s.jsonl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(scPath, []byte(scenario), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, warn bytes.Buffer
	if _, err := sim.Run(cfgPath, scPath, sim.JSONLines(&out), &warn); err != nil {
		t.Fatal(err)
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		dec := json.NewDecoder(strings.NewReader(l))
		dec.UseNumber()
		m := map[string]any{}
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines, warn.String()
}

func TestScenarioOutputFields(t *testing.T) {
	scenario := strings.Join([]string{
		`{"t": 0, "packet": {"id": "fwd", "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 40000, "dport": 80, "flags": "S"}}`,
		`{"t": 0.25, "packet": {"id": 42, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 40000, "dport": 80}}`,
		`{"t": 0.5, "packet": {"src": "198.51.100.7", "dst": "192.0.2.99", "proto": "tcp", "sport": 40000, "dport": 80}}`,
		`{"t": 1.0, "packet": {"id": "no-rule", "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 40000, "dport": 81, "flags": "S"}}`,
		`{"t": 1.5, "health": {"backend": "b1", "healthy": false}}`,
		`{"t": 1.5, "health": {"backend": "10.0.2.1", "healthy": false}}`,
		`{"t": 2.000, "packet": {"id": "dropped", "src": "198.51.100.8", "dst": "203.0.113.10", "proto": "tcp", "sport": 40000, "dport": 80, "flags": "S"}}`,
		`{"t": 3, "health": {"backend": "10.0.2.1", "healthy": true}}`,
		`{"t": 3, "packet": {"id": "failover", "src": "198.51.100.8", "dst": "203.0.113.10", "proto": "tcp", "sport": 40000, "dport": 80, "flags": "S"}}`,
		`{"t": 4, "health": {"backend": "nobody", "healthy": true}}`,
	}, "\n")
	lines, warn := runScenario(t, cptest.Testdata(t, "format.toml"), scenario)
	if len(lines) != 6 {
		t.Fatalf("%d output lines, want one per packet event (6)", len(lines))
	}
	for _, tc := range []struct {
		i      int
		id, t  string
		fields map[string]string // required field -> value ("" any)
	}{
		{0, "fwd", "0", map[string]string{"verdict": "forward", "backend": "b1", "track": "new", "side": "primary"}},
		{1, "42", "0.25", map[string]string{"verdict": "forward", "backend": "b1", "track": "hit", "side": "primary"}},
		{2, "", "0.5", map[string]string{"verdict": "pass"}},
		{3, "no-rule", "1.0", map[string]string{"verdict": "drop", "reason": "no-rule"}},
		{4, "dropped", "2.000", map[string]string{"verdict": "drop", "reason": "no-eligible-backend"}},
		{5, "failover", "3", map[string]string{"verdict": "forward", "backend": "10.0.2.1", "track": "new", "side": "failover"}},
	} {
		m := lines[tc.i]
		// id and t are always there: id echoed (a number as its text), t
		// as written.
		if id, ok := m["id"]; !ok || id != tc.id {
			t.Errorf("line %d: id %v (present %v), want %q", tc.i+1, id, ok, tc.id)
		}
		if got, ok := m["t"].(json.Number); !ok || got.String() != tc.t {
			t.Errorf("line %d: t %v, want %s", tc.i+1, m["t"], tc.t)
		}
		for k, want := range tc.fields {
			got, ok := m[k]
			if !ok || (want != "" && got != want) {
				t.Errorf("line %d (%s): %s = %v (present %v), want %q", tc.i+1, tc.id, k, got, ok, want)
			}
		}
		// A forward never carries a reason, a drop never a backend.
		if m["verdict"] == "forward" && m["reason"] != nil || m["verdict"] != "forward" && m["backend"] != nil {
			t.Errorf("line %d: %v", tc.i+1, m)
		}
	}
	if !strings.Contains(warn, "line 10: health") || !strings.Contains(warn, `"nobody"`) {
		t.Errorf("warning for an unknown backend: %q", warn)
	}
}

func TestScenarioIDEchoedInOrder(t *testing.T) {
	var b strings.Builder
	ids := []string{"z", "a", "m", "", "same", "same", `quote"d`}
	for i, id := range ids {
		raw, _ := json.Marshal(id)
		if id == "" {
			raw = nil
		}
		field := ""
		if raw != nil {
			field = `"id": ` + string(raw) + `, `
		}
		b.WriteString(`{"t": ` + strconv.Itoa(i) + `, "packet": {` + field + `"src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 40000, "dport": 80}}` + "\n")
	}
	lines, _ := runScenario(t, cptest.Testdata(t, "format.toml"), b.String())
	var got []string
	for _, m := range lines {
		got = append(got, m["id"].(string))
	}
	if !slices.Equal(got, ids) {
		t.Errorf("ids %q, want %q", got, ids)
	}
}
