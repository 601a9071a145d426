package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"xlb/config"
	"xlb/controlplane/cptest"
	"xlb/controlplane/explain"
	"xlb/controlplane/sim"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// cliDir holds the configuration and scenarios of these tests.
const cliDir = "../../testdata/cli"

func cli(name string) string { return filepath.Join(cliDir, name) }

// xlbBin is the binary built once by TestMain, to check real exit codes;
// "" when no go command was found (those tests skip).
var xlbBin string

func TestMain(m *testing.M) {
	if f := os.Getenv(hupStandInEnv); f != "" {
		hupStandIn(f)
		return
	}
	os.Exit(func() int {
		if _, err := exec.LookPath("go"); err != nil {
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "xlb-cli-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "xlb")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
			return 1
		}
		xlbBin = bin
		return m.Run()
	}())
}

// outcome is what one invocation printed and returned.
type outcome struct {
	code           int
	stdout, stderr string
}

// xlb runs the command line in-process through run.
func xlb(args ...string) outcome {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return outcome{code, out.String(), errb.String()}
}

// xlbExec runs the built binary and returns its real exit status.
func xlbExec(tb testing.TB, args ...string) outcome {
	tb.Helper()
	if xlbBin == "" {
		tb.Skip("no go command to build the binary with")
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(xlbBin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			tb.Fatalf("xlb %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return outcome{code, out.String(), errb.String()}
}

// wantCode fails the test when o did not exit with code.
func (o outcome) wantCode(tb testing.TB, code int) {
	tb.Helper()
	if o.code != code {
		tb.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", o.code, code, o.stdout, o.stderr)
	}
}

func readFile(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// lineOf is the 1-based line of the first occurrence of s in text.
func lineOf(tb testing.TB, text, s string) int {
	tb.Helper()
	i := strings.Index(text, s)
	if i < 0 {
		tb.Fatalf("%q not found", s)
	}
	return 1 + strings.Count(text[:i], "\n")
}

// ---- xlb check -------------------------------------------------------------

func TestCheck_ValidFilePrintsSummary(t *testing.T) {
	for _, path := range []string{cli("xlb.toml"), "../../testdata/config/example.toml", "../../testdata/demo/xlb.toml"} {
		t.Run(filepath.Base(filepath.Dir(path))+"/"+filepath.Base(path), func(t *testing.T) {
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			o := xlb("check", "-c", path)
			o.wantCode(t, 0)
			// The summary, then whether xlb run could start with it here
			// (TestCheck_SaysWhetherRunCanStart).
			if want := "ok: " + cfg.Summary() + "\n"; !strings.HasPrefix(o.stdout, want) || strings.Count(o.stdout, "\n") != 2 || o.stderr != "" {
				t.Errorf("stdout %q stderr %q, want stdout %q", o.stdout, o.stderr, want)
			}
		})
	}
}

// TestCheck_InvalidFileNamesFileLineAndField breaks the valid test
// configuration one way at a time. Every error must name the file, the line
// of the broken text and the field path (docs/config.md), and exit 1.
func TestCheck_InvalidFileNamesFileLineAndField(t *testing.T) {
	base := readFile(t, cli("xlb.toml"))
	tests := []struct {
		name     string
		old, new string
		field    string // "" for TOML syntax errors, which have no field
		msg      string
	}{
		{"syntax error", "port = 80\n", "port = = 80\n", "", "expected value"},
		{"unknown key", `request_path = "/healthz"`, `request_pth = "/healthz"`, "health_check[1].request_pth", "unknown key"},
		{"bad enum", `session_affinity = "CLIENT_IP"`, `session_affinity = "CLIENT-IP"`, "backend_service[1].session_affinity", `"CLIENT-IP" is not one of`},
		{"wrong type", "port = 8080", `port = "8080"`, "health_check[1].port", "expected an integer"},
		{"value out of range", "failover_ratio = 0.5", "failover_ratio = 1.5", "backend_service[0].failover_policy.failover_ratio", "1.5 is outside [0.0, 1.0]"},
		{"unresolved reference", `backend_service = "dns"`, `backend_service = "dnz"`, "forwarding_rule[2].backend_service", `"dnz"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Count(base, tc.old) == 0 {
				t.Fatalf("%q is not in xlb.toml", tc.old)
			}
			text := strings.Replace(base, tc.old, tc.new, 1)
			path := filepath.Join(t.TempDir(), "broken.toml")
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			o := xlb("check", "-c", path)
			o.wantCode(t, 1)
			if o.stdout != "" {
				t.Errorf("stdout %q, want nothing", o.stdout)
			}
			where := fmt.Sprintf("%s:%d: ", path, lineOf(t, text, tc.new))
			if tc.field != "" {
				where += tc.field + ": "
			}
			if !strings.Contains(o.stderr, where) || !strings.Contains(o.stderr, tc.msg) {
				t.Errorf("stderr does not say %q ... %q:\n%s", where, tc.msg, o.stderr)
			}
		})
	}
}

func TestCheck_UsageAndUnreadableFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.toml")
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"no -c", []string{"check"}, 2, []string{"-c FILE is required"}},
		{"unknown flag", []string{"check", "-c", cli("xlb.toml"), "--verbose"}, 2, []string{"verbose"}},
		{"stray argument", []string{"check", "-c", cli("xlb.toml"), "other.toml"}, 2, []string{`"other.toml"`}},
		{"missing file", []string{"check", "-c", missing}, 1, []string{missing, "no such file"}},
		{"a directory", []string{"check", "-c", cliDir}, 1, []string{cliDir}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := xlb(tc.args...)
			o.wantCode(t, tc.code)
			if o.stdout != "" {
				t.Errorf("stdout %q, want nothing", o.stdout)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(o.stderr, s) {
					t.Errorf("stderr %q does not mention %q", o.stderr, s)
				}
			}
		})
	}
}

// ---- xlb sim ---------------------------------------------------------------

// simLine is one output line; pointers tell absent fields from empty ones.
type simLine struct {
	ID      *string      `json:"id"`
	T       *json.Number `json:"t"`
	Verdict string       `json:"verdict"`
	Backend string       `json:"backend"`
	Track   string       `json:"track"`
	Side    string       `json:"side"`
	Reason  string       `json:"reason"`
	Rule    string       `json:"rule"`
	Service string       `json:"service"`
	Invalid string       `json:"invalid"`
	Steered bool         `json:"icmp_steered"`
}

// simJSON runs `xlb sim` on a scenario of testdata/cli and checks the output
// format of docs/sim-format.md: one JSON line per packet event, in input order,
// echoing id and t, with the required fields of each verdict.
func simJSON(tb testing.TB, scenario string) (map[string]simLine, outcome) {
	tb.Helper()
	o := xlb("sim", "-c", cli("xlb.toml"), cli(scenario))
	o.wantCode(tb, 0)
	f, err := os.Open(cli(scenario))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	events, err := sim.Parse(f)
	if err != nil {
		tb.Fatal(err)
	}
	var packets []*sim.Event
	for i := range events {
		if events[i].Packet != nil {
			packets = append(packets, &events[i])
		}
	}
	lines := strings.Split(strings.TrimSuffix(o.stdout, "\n"), "\n")
	if len(lines) != len(packets) {
		tb.Fatalf("%d output lines for %d packet events:\n%s", len(lines), len(packets), o.stdout)
	}
	byID := map[string]simLine{}
	backends := backendNames(tb)
	for i, text := range lines {
		var l simLine
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields() // extra fields are allowed, but these tests know them all
		if err := dec.Decode(&l); err != nil {
			tb.Fatalf("line %d %q: %v", i+1, text, err)
		}
		ev := packets[i]
		if l.ID == nil || *l.ID != ev.Packet.ID {
			tb.Errorf("line %d: id %v, want %q (input order)", i+1, l.ID, ev.Packet.ID)
		}
		if l.T == nil {
			tb.Errorf("line %d: no t", i+1)
		} else if tv, err := l.T.Float64(); err != nil || tv != ev.T {
			tb.Errorf("line %d: t %s, want %v", i+1, *l.T, ev.T)
		}
		switch l.Verdict {
		case "forward":
			if !slices.Contains(backends, l.Backend) || !slices.Contains([]string{"new", "hit", "replaced", "untracked"}, l.Track) ||
				(l.Side != "primary" && l.Side != "failover") || l.Reason != "" {
				tb.Errorf("line %d: forward needs backend, track and side (and no reason): %s", i+1, text)
			}
		case "drop":
			if l.Reason == "" || l.Backend != "" {
				tb.Errorf("line %d: drop needs a reason and no backend: %s", i+1, text)
			}
		case "pass":
			if l.Backend != "" || l.Reason != "" {
				tb.Errorf("line %d: pass has no backend or reason: %s", i+1, text)
			}
		default:
			tb.Errorf("line %d: verdict %q", i+1, l.Verdict)
		}
		byID[*l.ID] = l
	}
	return byID, o
}

func backendNames(tb testing.TB) []string {
	tb.Helper()
	cfg, err := config.Load(cli("xlb.toml"))
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, s := range cfg.Services {
		for _, g := range s.Groups {
			for _, ep := range g.Endpoints {
				names = append(names, ep.Name)
			}
		}
	}
	return names
}

// TestSim_JSONLinesOnePerPacketEvent replays basic.jsonl and checks the
// format, then what the lines say against the rules each event exercises.
func TestSim_JSONLinesOnePerPacketEvent(t *testing.T) {
	got, o := simJSON(t, "basic.jsonl")
	if o.stderr != "" {
		t.Errorf("stderr: %s", o.stderr)
	}
	syn := got["syn"]
	checks := []struct {
		id, rule string
		ok       bool
	}{
		{"syn", "CT1: a SYN is new, on the primary side", syn.Verdict == "forward" && syn.Track == "new" && syn.Side == "primary"},
		{"ack", "CT4: the ACK hits the SYN's entry", got["ack"].Track == "hit" && got["ack"].Backend == syn.Backend},
		{"dns", "E2: d1 reports weight 0, so d2 or d3", got["dns"].Track == "new" && slices.Contains([]string{"d2", "d3"}, got["dns"].Backend)},
		{"dns-frag", "T2: CLIENT_IP + PER_SESSION keys by 2T, a fragment joins the session", got["dns-frag"].Track == "hit" && got["dns-frag"].Backend == got["dns"].Backend},
		{"esp", "T1: ESP is tracked under CLIENT_IP_PROTO", got["esp"].Verdict == "forward" && got["esp"].Track == "new" && got["esp"].Rule == "any-v4"},
		{"v6", "IPv6 VIP", got["v6"].Verdict == "forward" && got["v6"].Rule == "web-v6"},
		{"not-vip", "FR1: not a VIP", got["not-vip"].Verdict == "pass"},
		{"no-rule", "FR4: no rule for port 8080", got["no-rule"].Verdict == "drop" && got["no-rule"].Reason == "no-rule"},
		{"icmp", "X1: steered to the quoted flow's backend", got["icmp"].Steered && got["icmp"].Track == "hit" && got["icmp"].Backend == syn.Backend},
		{"syn2", "E3.1: no healthy primary, the failover backend", got["syn2"].Backend == "w9" && got["syn2"].Side == "failover" && got["syn2"].Track == "new"},
		{"ack-after", "P1: TCP persists on an unhealthy backend, on its recorded side", got["ack-after"].Track == "hit" && got["ack-after"].Backend == syn.Backend && got["ack-after"].Side == "primary"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: %s does not hold: %+v", c.id, c.rule, got[c.id])
		}
	}
}

// TestSim_FlagsAfterScenario: flags may follow the scenario file.
func TestSim_FlagsAfterScenario(t *testing.T) {
	before := xlb("sim", "-c", cli("xlb.toml"), cli("basic.jsonl"))
	after := xlb("sim", cli("basic.jsonl"), "-c", cli("xlb.toml"))
	before.wantCode(t, 0)
	after.wantCode(t, 0)
	if before.stdout != after.stdout {
		t.Errorf("output differs with flags after the scenario:\n%s\n---\n%s", before.stdout, after.stdout)
	}
}

// TestSim_SummaryTable: --summary prints the tally of the same replay that
// the JSON lines show.
func TestSim_SummaryTable(t *testing.T) {
	lines, _ := simJSON(t, "basic.jsonl")
	verdicts := map[string]int{}
	packets := map[string]int{}
	for _, l := range lines {
		verdicts[l.Verdict]++
		if l.Verdict == "forward" {
			packets[l.Backend]++
		}
	}
	o := xlb("sim", "--summary", "-c", cli("xlb.toml"), cli("basic.jsonl"))
	o.wantCode(t, 0)
	rows := strings.Split(strings.TrimSuffix(o.stdout, "\n"), "\n")
	want := fmt.Sprintf("%d packets: %d forwarded, %d dropped, %d passed to the host",
		len(lines), verdicts["forward"], verdicts["drop"], verdicts["pass"])
	if rows[0] != want {
		t.Errorf("first line %q, want %q", rows[0], want)
	}
	if h := strings.Fields(rows[1]); !slices.Equal(h, []string{"backend", "address", "role", "health", "weight", "packets", "new"}) {
		t.Errorf("header %q", rows[1])
	}
	names := backendNames(t)
	if len(rows) != 2+len(names) {
		t.Fatalf("%d backend rows, want one per backend (%d):\n%s", len(rows)-2, len(names), o.stdout)
	}
	for _, row := range rows[2:] {
		f := strings.Fields(row)
		if !slices.Contains(names, f[0]) || f[5] != strconv.Itoa(packets[f[0]]) {
			t.Errorf("row %q: want %d packets for %s", row, packets[f[0]], f[0])
		}
		// basic.jsonl took w1-w4 down and d1 reported weight 0.
		wantHealth := "healthy"
		if slices.Contains([]string{"w1", "w2", "w3", "w4"}, f[0]) {
			wantHealth = "down"
		}
		if f[3] != wantHealth {
			t.Errorf("row %q: health %s, want %s", row, f[3], wantHealth)
		}
		if (f[0] == "d1") != (f[4] == "0") {
			t.Errorf("row %q: reported weight %s", row, f[4])
		}
	}
}

// TestSim_ScenarioErrorsNameTheLine: an unknown field or event kind stops
// the replay before any output, exit 1, naming the file and line.
func TestSim_ScenarioErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct{ file, culprit string }{
		{"bad-field.jsonl", `"sprot"`},
		{"bad-event.jsonl", `"drain"`},
	} {
		t.Run(tc.file, func(t *testing.T) {
			o := xlb("sim", "-c", cli("xlb.toml"), cli(tc.file))
			o.wantCode(t, 1)
			// The culprit as a JSON key (the comment above it names it too).
			line := lineOf(t, readFile(t, cli(tc.file)), tc.culprit+":")
			want := fmt.Sprintf("%s: line %d: ", cli(tc.file), line)
			if !strings.Contains(o.stderr, want) || !strings.Contains(o.stderr, tc.culprit) {
				t.Errorf("stderr %q, want %q and %s", o.stderr, want, tc.culprit)
			}
			if o.stdout != "" {
				t.Errorf("output before the error: %s", o.stdout)
			}
		})
	}
	t.Run("usage", func(t *testing.T) {
		xlb("sim", "-c", cli("xlb.toml")).wantCode(t, 2)
		xlb("sim", cli("basic.jsonl")).wantCode(t, 2)
		xlb("sim", "-c", cli("xlb.toml"), cli("basic.jsonl"), cli("basic.jsonl")).wantCode(t, 2)
		xlb("sim", "--fast", "-c", cli("xlb.toml"), cli("basic.jsonl")).wantCode(t, 2)
	})
	t.Run("missing scenario", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "none.jsonl")
		o := xlb("sim", "-c", cli("xlb.toml"), missing)
		o.wantCode(t, 1)
		if !strings.Contains(o.stderr, missing) {
			t.Errorf("stderr %q does not name %s", o.stderr, missing)
		}
	})
}

// TestX2_SimReloadOfInvalidFileWarnsAndContinues: the reload is rejected
// with the file's own error on stderr, the running configuration stays (the
// established flow keeps its entry, the rule that invalid.toml lacks still
// forwards), and the replay exits 0.
func TestX2_SimReloadOfInvalidFileWarnsAndContinues(t *testing.T) {
	got, o := simJSON(t, "reload-invalid.jsonl")
	for _, s := range []string{"reload invalid.toml rejected", "running configuration kept", "failover_policy.failover_ratio"} {
		if !strings.Contains(o.stderr, s) {
			t.Errorf("stderr does not say %q:\n%s", s, o.stderr)
		}
	}
	if got["ack"].Track != "hit" || got["ack"].Backend != got["syn"].Backend {
		t.Errorf("after the rejected reload the flow lost its entry: syn %+v ack %+v", got["syn"], got["ack"])
	}
	if n := got["syn-new"]; n.Verdict != "forward" || n.Rule != "web-v4" {
		t.Errorf("a new connection after the rejected reload: %+v, want forward by web-v4", n)
	}
}

// ---- xlb explain (X4) ------------------------------------------------------

// explainArgs renders a packet description as explain flags.
func explainArgs(p craft.Packet) []string {
	a := []string{"--src", p.Src.String(), "--dst", p.Dst.String(), "--proto", p.Proto.String()}
	if p.Proto == packet.ProtoTCP || p.Proto == packet.ProtoUDP {
		a = append(a, "--sport", strconv.Itoa(int(p.SrcPort)), "--dport", strconv.Itoa(int(p.DstPort)))
	}
	if p.Flags != "" {
		a = append(a, "--flags", p.Flags)
	}
	if p.Frag != craft.FragNone {
		a = append(a, "--frag", [...]string{"none", "first", "middle", "last"}[p.Frag])
	}
	if p.Inner != nil {
		a = append(a, "--inner-proto", p.Inner.Proto.String(),
			"--inner-sport", strconv.Itoa(int(p.Inner.SrcPort)), "--inner-dport", strconv.Itoa(int(p.Inner.DstPort)))
	}
	return a
}

// icmpError is the packet `--proto icmp|icmpv6 --inner-proto ...` describes:
// an error from src to the VIP quoting the backend's reply VIP:vport -> src:sport.
func icmpError(src, dst string, vport, sport uint16) craft.Packet {
	p := cptest.TCP(src, dst, 0, 0, "")
	inner := cptest.TCP(dst, src, vport, sport, "")
	p.Proto, p.ICMPType, p.ICMPCode, p.Inner = packet.ProtoICMP, 3, 4, &inner
	if p.Dst.Is6() {
		p.Proto, p.ICMPType, p.ICMPCode = packet.ProtoICMPv6, 2, 0
	}
	return p
}

// explainJSON runs `xlb explain --json` and decodes the report strictly.
func explainJSON(tb testing.TB, args ...string) *explain.Report {
	tb.Helper()
	o := xlb(append([]string{"explain", "-c", cli("xlb.toml"), "--json"}, args...)...)
	o.wantCode(tb, 0)
	dec := json.NewDecoder(strings.NewReader(o.stdout))
	dec.DisallowUnknownFields()
	var rep explain.Report
	if err := dec.Decode(&rep); err != nil {
		tb.Fatalf("decode %q: %v", o.stdout, err)
	}
	if dec.More() {
		tb.Fatalf("more than one JSON value: %s", o.stdout)
	}
	return &rep
}

// rigDecide decides p in a fresh rig on xlb.toml with the given state.
func rigDecide(tb testing.TB, p craft.Packet, unhealthy []string, weights map[string]uint32) (*cptest.Result, *dataplane.Snapshot) {
	tb.Helper()
	rig := cptest.New(tb, readFile(tb, cli("xlb.toml")))
	for _, n := range unhealthy {
		rig.Health(n, false)
	}
	for n, w := range weights {
		rig.Weight(n, w)
	}
	return rig.Send(p), rig.CP.Snapshot()
}

// textFields reads the "key value" lines of the text report ("%-14s %s";
// "because" is indented; member lines are left out).
func textFields(tb testing.TB, text string) map[string]string {
	tb.Helper()
	fields := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if strings.HasSuffix(line, " ") {
			tb.Errorf("trailing blank in %q", line)
		}
		if len(line) > 15 && (line[0] != ' ' || strings.HasPrefix(line, "  because")) {
			fields[strings.TrimSpace(line[:14])] = line[15:]
		}
	}
	return fields
}

// TestX4_ExplainJSONAgreesWithRig explains packets through the command line
// and decides the same packets in the same state with the cptest rig: same
// verdict, rule, keys, track, eligible set, side and backend, and the Maglev
// slot is the selection hash modulo the table size.
func TestX4_ExplainJSONAgreesWithRig(t *testing.T) {
	tests := []struct {
		name      string
		p         craft.Packet
		unhealthy []string
		weights   map[string]uint32
	}{
		{"tcp syn", cptest.TCP("198.51.100.7", "203.0.113.10", 40000, 80, "S"), nil, nil},
		{"tcp ack", cptest.TCP("198.51.100.7", "203.0.113.10", 40000, 443, "A"), nil, nil},
		{"tcp syn ipv6", cptest.TCP("2001:db8::7", "2001:db8:1::10", 40000, 443, "S"), nil, nil},
		{"tcp failover", cptest.TCP("198.51.100.7", "203.0.113.10", 40000, 80, "S"), []string{"w1", "w2", "w3"}, nil},
		{"udp weighted", cptest.UDP("198.51.100.7", "203.0.113.10", 5000, 53), nil, map[string]uint32{"d1": 0, "d2": 10, "d3": 990}},
		{"udp first fragment", func() craft.Packet {
			p := cptest.UDP("198.51.100.7", "203.0.113.10", 5000, 53)
			p.Frag = craft.FragFirst
			return p
		}(), []string{"d2"}, nil},
		{"esp l3", cptest.Proto("198.51.100.7", "203.0.113.20", packet.ProtoESP), nil, nil},
		{"gre l3", cptest.Proto("198.51.100.7", "203.0.113.20", packet.ProtoGRE), []string{"g1"}, nil},
		{"icmp echo l3", cptest.Proto("198.51.100.7", "203.0.113.20", packet.ProtoICMP), nil, nil},
		{"icmp error", icmpError("198.51.100.7", "203.0.113.10", 80, 40000), nil, nil},
		{"icmpv6 error", icmpError("2001:db8::7", "2001:db8:1::10", 443, 40000), []string{"w4"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := explainArgs(tc.p)
			if tc.unhealthy != nil {
				args = append(args, "--unhealthy", strings.Join(tc.unhealthy, ","))
			}
			var ws []string
			for n, w := range tc.weights {
				ws = append(ws, fmt.Sprintf("%s=%d", n, w))
			}
			if ws != nil {
				args = append(args, "--weights", strings.Join(ws, ","))
			}
			rep := explainJSON(t, args...)
			res, snap := rigDecide(t, tc.p, tc.unhealthy, tc.weights)

			if res.Verdict != dataplane.VerdictForward {
				t.Fatalf("rig verdict %s %s; these cases all forward", res.Verdict, res.Reason)
			}
			if rep.Verdict != "forward" || rep.Backend != res.BackendName() || rep.Side != res.Side.String() ||
				rep.Track != res.Track.String() || rep.Rule != res.Rule.Name || rep.Service != res.Service.Name ||
				rep.ICMPSteered != res.ICMPSteered || rep.Trackable != res.Trackable {
				t.Errorf("explain: %s to %s (%s, %s) by %s/%s steered=%v trackable=%v\nrig:     forward to %s (%s, %s) by %s/%s steered=%v trackable=%v",
					rep.Verdict, rep.Backend, rep.Side, rep.Track, rep.Rule, rep.Service, rep.ICMPSteered, rep.Trackable,
					res.BackendName(), res.Side, res.Track, res.Rule.Name, res.Service.Name, res.ICMPSteered, res.Trackable)
			}
			if rep.BackendIP != res.Backend.IP.String() {
				t.Errorf("backend_ip %s, want %s", rep.BackendIP, res.Backend.IP)
			}
			h, err := strconv.ParseUint(rep.SelectionHash, 0, 64)
			if err != nil || h != res.SelHash {
				t.Errorf("selection_hash %q, rig %#x", rep.SelectionHash, res.SelHash)
			}
			if !strings.HasPrefix(rep.SelectionKey, res.SelKind.String()+" ") ||
				(res.Trackable && !strings.HasPrefix(rep.TrackingKey, res.TrackKey.Kind.String()+" ")) {
				t.Errorf("keys %q / %q, rig %s / %s", rep.SelectionKey, rep.TrackingKey, res.SelKind, res.TrackKey.Kind)
			}
			table := res.Service.Table
			if rep.MaglevSlot == nil || rep.MaglevSize != len(table) ||
				uint64(*rep.MaglevSlot) != h%uint64(rep.MaglevSize) || *rep.MaglevSlot != res.TableSlot {
				t.Errorf("maglev slot %v of %d; want hash %% %d = %d", rep.MaglevSlot, rep.MaglevSize, len(table), res.SelHash%uint64(len(table)))
			} else if at := snap.Backend(res.Service.Eligible[table[*rep.MaglevSlot]]).Name; at != rep.Backend {
				t.Errorf("slot %d holds %s, report says %s", *rep.MaglevSlot, at, rep.Backend)
			}
			var elig []string
			for _, ref := range res.Service.Eligible {
				elig = append(elig, snap.Backend(ref).Name)
			}
			if !slices.Equal(rep.Eligible, elig) {
				t.Errorf("eligible %v, rig %v", rep.Eligible, elig)
			}
		})
	}
}

// TestX4_ExplainTextNamesEveryStep: the text output of a SYN names the rule,
// selection key, tracking key, step-1 rule, eligible set with side and
// E-rule, Maglev slot and backend, and says what the JSON output says.
func TestX4_ExplainTextNamesEveryStep(t *testing.T) {
	p := cptest.TCP("198.51.100.7", "203.0.113.10", 40000, 80, "S")
	o := xlb(append([]string{"explain", "-c", cli("xlb.toml")}, explainArgs(p)...)...)
	o.wantCode(t, 0)
	got := textFields(t, o.stdout)
	rep := explainJSON(t, explainArgs(p)...)
	res, _ := rigDecide(t, p, nil, nil)
	slot := res.SelHash % uint64(len(res.Service.Table))
	flow := "5T (src 198.51.100.7, sport 40000, proto tcp, dst 203.0.113.10, dport 80)"
	want := map[string]string{
		"rule":          "web-v4  203.0.113.10 TCP ports 80,443",
		"service":       "web (affinity NONE, tracking PER_CONNECTION, IPIP)",
		"selection key": flow, // A1: NONE, port information -> 5T
		"tracking key":  flow, // T2: NONE, TCP -> 5T
		"step 1":        rep.Step1,
		"eligible set":  "primary side: w1, w2, w3, w4",
		"because":       rep.EligibleWhy,
		"maglev":        fmt.Sprintf("slot %d of %d -> %s", slot, len(res.Service.Table), res.BackendName()),
		"verdict":       "forward",
		"why":           "forward to " + res.BackendName() + " via IPIP",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if !strings.HasPrefix(got["step 1"], "CT1:") || !strings.HasPrefix(got["because"], "E3.4:") {
		t.Errorf("step 1 %q, because %q: want CT1 (SYN, PER_CONNECTION) and E3.4 (4/4 healthy >= 0.5)", got["step 1"], got["because"])
	}
	for _, m := range []string{"w1", "w2", "w3", "w4"} {
		if !strings.Contains(o.stdout, "  * "+m+" ") {
			t.Errorf("member %s not marked eligible:\n%s", m, o.stdout)
		}
	}
	if !strings.Contains(o.stdout, "    w9 ") {
		t.Errorf("failover member w9 not listed as not eligible:\n%s", o.stdout)
	}
}

// TestX4_ExplainStateFlagsFollowERules: --unhealthy and --weights change the
// eligible set as E3 (web: 4 primaries, 1 failover, ratio 0.5) and E2 (dns:
// weighted, no failover) say.
func TestX4_ExplainStateFlagsFollowERules(t *testing.T) {
	web := explainArgs(cptest.TCP("198.51.100.7", "203.0.113.10", 40000, 80, "S"))
	dns := explainArgs(cptest.UDP("198.51.100.7", "203.0.113.10", 5000, 53))
	tests := []struct {
		name  string
		args  []string
		why   string
		side  string
		elig  []string
		state map[string]bool // backend -> healthy, for members listed
	}{
		{"E3.4 all healthy", web, "E3.4", "primary", []string{"w1", "w2", "w3", "w4"}, nil},
		{"E3.4 half healthy meets the ratio", slices.Concat(web, []string{"--unhealthy", "w1,w2"}), "E3.4", "primary", []string{"w3", "w4"},
			map[string]bool{"w1": false, "w2": false, "w3": true}},
		{"E3.5 below the ratio: failover", slices.Concat(web, []string{"--unhealthy", "w1,w2,w3"}), "E3.5", "failover", []string{"w9"}, nil},
		{"E3.1 no healthy primary", slices.Concat(web, []string{"--unhealthy", "w1, w2, w3, w4"}), "E3.1", "failover", []string{"w9"},
			map[string]bool{"w4": false, "w9": true}},
		{"E3.2 no healthy failover", slices.Concat(web, []string{"--unhealthy", "w9,w1"}), "E3.2", "primary", []string{"w2", "w3", "w4"}, nil},
		{"E2 healthy with weight > 0", slices.Concat(dns, []string{"--weights", "d1=0"}), "E2: healthy, weight > 0", "primary", []string{"d2", "d3"}, nil},
		{"E2 healthy with weight 0", slices.Concat(dns, []string{"--weights", "d1=0,d2=0,d3=0", "--unhealthy", "d3"}), "E2: no backend with weight > 0; healthy, weight 0",
			"primary", []string{"d1", "d2"}, map[string]bool{"d3": false}},
		{"E2 unhealthy with weight > 0", slices.Concat(dns, []string{"--unhealthy", "d1,d2,d3"}), "E2: no healthy backend with weight > 0; unhealthy, weight > 0",
			"primary", []string{"d1", "d2", "d3"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := explainJSON(t, tc.args...)
			if !strings.HasPrefix(rep.EligibleWhy, tc.why) || rep.Side != tc.side || !slices.Equal(rep.Eligible, tc.elig) {
				t.Errorf("eligible %v side %s because %q; want %v side %s because %s...", rep.Eligible, rep.Side, rep.EligibleWhy, tc.elig, tc.side, tc.why)
			}
			if !slices.Contains(tc.elig, rep.Backend) {
				t.Errorf("backend %q is not in the eligible set %v", rep.Backend, tc.elig)
			}
			for _, m := range rep.Members {
				if h, ok := tc.state[m.Name]; ok && m.Healthy != h {
					t.Errorf("member %s healthy=%v, want %v", m.Name, m.Healthy, h)
				}
			}
			o := xlb(append([]string{"explain", "-c", cli("xlb.toml")}, tc.args...)...)
			o.wantCode(t, 0)
			if got := textFields(t, o.stdout)["eligible set"]; got != tc.side+" side: "+strings.Join(tc.elig, ", ") {
				t.Errorf("text eligible set %q", got)
			}
		})
	}
}

// TestX4_ExplainWithoutService: FR1 (not a VIP) and FR4 (no matching rule)
// are explained, exit 0, and go no further.
func TestX4_ExplainWithoutService(t *testing.T) {
	tests := []struct {
		name          string
		p             craft.Packet
		verdict, why  string
		reason, which string
	}{
		{"FR1 not a VIP", cptest.TCP("198.51.100.7", "192.0.2.99", 40000, 22, "S"), "pass", "FR1:", "", "pass"},
		{"FR4 port without a rule", cptest.TCP("198.51.100.7", "203.0.113.10", 40000, 8080, "S"), "drop", "FR4:", "no-rule", "drop no-rule"},
		{"FR4 protocol without a rule", cptest.Proto("198.51.100.7", "203.0.113.10", packet.ProtoESP), "drop", "FR4:", "no-rule", "drop no-rule"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := explainJSON(t, explainArgs(tc.p)...)
			res, _ := rigDecide(t, tc.p, nil, nil)
			if rep.Verdict != tc.verdict || res.Verdict.String() != tc.verdict || rep.Reason != tc.reason || !strings.HasPrefix(rep.Why, tc.why) {
				t.Errorf("verdict %q reason %q why %q (rig %s); want %s %q %s...", rep.Verdict, rep.Reason, rep.Why, res.Verdict, tc.verdict, tc.reason, tc.why)
			}
			if rep.Rule != "" || rep.SelectionKey != "" || rep.MaglevSlot != nil || rep.Backend != "" {
				t.Errorf("went past the rule: %+v", rep)
			}
			o := xlb(append([]string{"explain", "-c", cli("xlb.toml")}, explainArgs(tc.p)...)...)
			o.wantCode(t, 0)
			f := textFields(t, o.stdout)
			if f["verdict"] != tc.which || !strings.HasPrefix(f["why"], tc.why) || f["rule"] != "" {
				t.Errorf("text:\n%s", o.stdout)
			}
		})
	}
}

// TestX4_ExplainICMPErrorX1Steering: --inner-proto describes the quote of an
// ICMP error; the report says X1, and its key, hash and backend are those
// of the client flow the quote belongs to.
func TestX4_ExplainICMPErrorX1Steering(t *testing.T) {
	for _, tc := range []struct{ name, src, dst string }{
		{"icmp", "198.51.100.7", "203.0.113.10"},
		{"icmpv6", "2001:db8::7", "2001:db8:1::10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := icmpError(tc.src, tc.dst, 443, 40000)
			rep := explainJSON(t, explainArgs(p)...)
			flow := explainJSON(t, explainArgs(cptest.TCP(tc.src, tc.dst, 40000, 443, "S"))...)
			res, _ := rigDecide(t, p, nil, nil)
			if !rep.ICMPSteered || !strings.HasPrefix(rep.Step1, "X1:") || rep.Track != "untracked" {
				t.Errorf("steered %v step1 %q track %q; want X1, untracked", rep.ICMPSteered, rep.Step1, rep.Track)
			}
			if rep.SelectionKey != flow.SelectionKey || rep.SelectionHash != flow.SelectionHash || rep.Rule != flow.Rule {
				t.Errorf("ICMP error: %s %s by %s; client flow: %s %s by %s",
					rep.SelectionKey, rep.SelectionHash, rep.Rule, flow.SelectionKey, flow.SelectionHash, flow.Rule)
			}
			if rep.Backend != flow.Backend || rep.Backend != res.BackendName() {
				t.Errorf("backend %q; client flow %q, rig %q", rep.Backend, flow.Backend, res.BackendName())
			}
			o := xlb(append([]string{"explain", "-c", cli("xlb.toml")}, explainArgs(p)...)...)
			o.wantCode(t, 0)
			if f := textFields(t, o.stdout); !strings.Contains(f["steered by"], "X1") || !strings.Contains(f["packet"], "quoting [tcp") {
				t.Errorf("text does not show the steering:\n%s", o.stdout)
			}
		})
	}
}

// TestX4_ExplainPacketFlags: the packet flags build the packet described:
// an IPv4-mapped address is the IPv4 address (as in xlb sim), --icmp-code
// alone keeps the default error type, flags are case-insensitive.
func TestX4_ExplainPacketFlags(t *testing.T) {
	plain := explainJSON(t, "--src", "198.51.100.7", "--dst", "203.0.113.10", "--sport", "40000", "--dport", "80", "--flags", "S")
	mapped := explainJSON(t, "--src", "::ffff:198.51.100.7", "--dst", "::ffff:203.0.113.10", "--sport", "40000", "--dport", "80", "--flags", "s")
	if mapped.Verdict != "forward" || mapped.SelectionHash != plain.SelectionHash || mapped.Backend != plain.Backend || mapped.Step1 != plain.Step1 {
		t.Errorf("mapped addresses: %s to %q (%s, %s); plain: %s to %q (%s, %s)",
			mapped.Verdict, mapped.Backend, mapped.SelectionHash, mapped.Step1, plain.Verdict, plain.Backend, plain.SelectionHash, plain.Step1)
	}
	icmp := explainJSON(t, "--src", "198.51.100.7", "--dst", "203.0.113.10", "--proto", "icmp",
		"--inner-proto", "tcp", "--inner-sport", "80", "--inner-dport", "40000", "--icmp-code", "1")
	if !strings.Contains(icmp.Packet, "icmp 198.51.100.7 -> 203.0.113.10 type 3 code 1 quoting [tcp 203.0.113.10:80 -> 198.51.100.7:40000") {
		t.Errorf("packet %q, want destination unreachable code 1 quoting the backend's reply", icmp.Packet)
	}
	echo := explainJSON(t, "--src", "198.51.100.7", "--dst", "203.0.113.20", "--proto", "icmp")
	if !strings.Contains(echo.Packet, "type 8 code 0") || echo.ICMPSteered {
		t.Errorf("packet %q steered %v, want an echo request, not steered", echo.Packet, echo.ICMPSteered)
	}
}

// TestX4_ExplainBadFlagsAreUsageErrors: every wrong argument exits 2 with a
// message and no report; a configuration that cannot be read exits 1.
func TestX4_ExplainBadFlagsAreUsageErrors(t *testing.T) {
	ok := []string{"-c", cli("xlb.toml"), "--src", "198.51.100.7", "--dst", "203.0.113.10", "--sport", "40000", "--dport", "80"}
	with := func(extra ...string) []string { return append(slices.Clone(ok), extra...) }
	tests := []struct {
		name string
		args []string
	}{
		{"unknown flag", with("--colour")},
		{"no -c", []string{"--src", "198.51.100.7", "--dst", "203.0.113.10"}},
		{"no --dst", []string{"-c", cli("xlb.toml"), "--src", "198.51.100.7"}},
		{"bad --src", with("--src", "198.51.100")},
		{"bad --proto", with("--proto", "sctpish")},
		{"port out of range", with("--sport", "70000")},
		{"negative port", with("--dport", "-1")},
		{"bad --flags", with("--flags", "SX")},
		{"bad --frag", with("--frag", "sideways")},
		{"weight out of range", with("--weights", "d1=1001")},
		{"weight without value", with("--weights", "d1")},
		{"unknown backend in --unhealthy", with("--unhealthy", "w7")},
		{"unknown backend in --weights", with("--weights", "x=5")},
		{"--inner-proto without icmp", with("--inner-proto", "tcp")},
		{"--inner-sport without --inner-proto", with("--proto", "icmp", "--inner-sport", "80")},
		{"icmp to an IPv6 address", []string{"-c", cli("xlb.toml"), "--src", "2001:db8::7", "--dst", "2001:db8:1::10", "--proto", "icmp"}},
		{"mixed families", with("--src", "2001:db8::7")},
		{"stray argument", with("extra")},
		{"tcp without ports", []string{"-c", cli("xlb.toml"), "--src", "198.51.100.7", "--dst", "203.0.113.10"}},
		{"udp without --dport", []string{"-c", cli("xlb.toml"), "--src", "198.51.100.7", "--dst", "203.0.113.10", "--proto", "udp", "--sport", "5000"}},
		{"tcp without --sport", []string{"-c", cli("xlb.toml"), "--src", "198.51.100.7", "--dst", "203.0.113.10", "--dport", "80"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := xlb(append([]string{"explain"}, tc.args...)...)
			o.wantCode(t, 2)
			if o.stdout != "" || o.stderr == "" {
				t.Errorf("stdout %q stderr %q; want only a message", o.stdout, o.stderr)
			}
		})
	}
	missing := filepath.Join(t.TempDir(), "none.toml")
	o := xlb("explain", "-c", missing, "--src", "198.51.100.7", "--dst", "203.0.113.10")
	o.wantCode(t, 1)
	if !strings.Contains(o.stderr, missing) {
		t.Errorf("stderr %q does not name %s", o.stderr, missing)
	}
}

// ---- the command itself ----------------------------------------------------

func TestCLI_Subcommands(t *testing.T) {
	tests := []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string // substrings; "" = must be empty
	}{
		{"no command", nil, 2, "", "usage: xlb"},
		{"unknown command", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{"help", []string{"help"}, 0, "usage: xlb", ""},
		{"-h", []string{"-h"}, 0, "usage: xlb", ""},
		{"--help", []string{"--help"}, 0, "usage: xlb", ""},
		{"check -h", []string{"check", "-h"}, 0, "usage: xlb", ""},
		{"explain --help", []string{"explain", "--help"}, 0, "usage: xlb", ""},
		// The CLI tests' file has no [dataplane]: run refuses it before
		// it touches anything.
		{"run without dataplane.interface", []string{"run", "-c", cli("xlb.toml")}, 1, "", "dataplane.interface: required by xlb run"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := xlb(tc.args...)
			o.wantCode(t, tc.code)
			for _, c := range []struct{ got, want, which string }{{o.stdout, tc.stdout, "stdout"}, {o.stderr, tc.stderr, "stderr"}} {
				if (c.want == "" && c.got != "") || !strings.Contains(c.got, c.want) {
					t.Errorf("%s %q, want %q", c.which, c.got, c.want)
				}
			}
			if tc.code == 2 && !strings.Contains(o.stderr, "commands:") {
				t.Errorf("usage error without the usage text: %q", o.stderr)
			}
		})
	}
}

// TestCLI_BinaryExitStatus runs the built binary: main must hand run's
// code to the process.
func TestCLI_BinaryExitStatus(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "broken.toml")
	if err := os.WriteFile(broken, []byte("[[backend_service]]\nname = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"check valid", []string{"check", "-c", cli("xlb.toml")}, 0, ""},
		{"check invalid", []string{"check", "-c", broken}, 1, broken + ":2: backend_service[0].name"},
		{"check without -c", []string{"check"}, 2, "-c FILE"},
		{"unknown command", []string{"nope"}, 2, "usage"},
		{"run without -c", []string{"run"}, 2, "-c FILE"},
		{"run without dataplane.interface", []string{"run", "-c", cli("xlb.toml")}, 1, "dataplane.interface"},
		{"run bad log level", []string{"run", "-c", cli("xlb.toml"), "--log-level", "loud"}, 2, "--log-level"},
		{"sim bad scenario", []string{"sim", "-c", cli("xlb.toml"), cli("bad-event.jsonl")}, 1, "line"},
		{"explain bad flag", []string{"explain", "-c", cli("xlb.toml"), "--src", "x", "--dst", "203.0.113.10"}, 2, "--src"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := xlbExec(t, tc.args...)
			o.wantCode(t, tc.code)
			if !strings.Contains(o.stderr, tc.stderr) {
				t.Errorf("stderr %q, want %q", o.stderr, tc.stderr)
			}
			if in := xlb(tc.args...); in != o {
				t.Errorf("binary and run() differ:\n%+v\n%+v", o, in)
			}
		})
	}
}

// TestX4M5_ExplainPreviousDrainingRule: --previous explains as just after
// a reload from that file: a packet only the removed rule web-v4 took is
// reported draining (drop vip-draining, in text and JSON), with the backend
// a flow tracked before the reload keeps, the rig's across the same
// reload. Without --previous the same file says no-rule; a --previous that
// does not load is an error, and nothing is explained.
func TestX4M5_ExplainPreviousDrainingRule(t *testing.T) {
	dir := t.TempDir()
	text := strings.Replace(readFile(t, cli("xlb.toml")), `health_checks = ["hc-tcp"]`,
		"health_checks = [\"hc-tcp\"]\nconnection_draining_timeout_sec = 20", 1)
	rule := "[[forwarding_rule]]\nname = \"web-v4\"\n"
	start := strings.Index(text, rule)
	end := strings.Index(text[start+len(rule):], "[[forwarding_rule]]")
	if start < 0 || end < 0 {
		t.Fatal("testdata/cli/xlb.toml has no rule web-v4 followed by another")
	}
	reloaded := text[:start] + text[start+len(rule)+end:]
	before, after := filepath.Join(dir, "before.toml"), filepath.Join(dir, "after.toml")
	for name, s := range map[string]string{before: text, after: reloaded} {
		if err := os.WriteFile(name, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := cptest.TCP("198.51.100.7", "203.0.113.10", 40000, 443, "A")
	rig := cptest.New(t, text)
	syn := p
	syn.Flags = "S"
	was := rig.Send(syn)
	rig.Reload(reloaded)
	tracked := rig.Send(p)
	if was.BackendName() == "" || tracked.Track != dataplane.TrackHit || tracked.BackendName() != was.BackendName() {
		t.Fatalf("rig: %q before the reload, tracked flow after it %v to %q", was.BackendName(), tracked.Track, tracked.BackendName())
	}

	o := xlb(append([]string{"explain", "-c", after, "--previous", before, "--json"}, explainArgs(p)...)...)
	o.wantCode(t, 0)
	var rep explain.Report
	if err := json.Unmarshal([]byte(o.stdout), &rep); err != nil {
		t.Fatalf("decode %q: %v", o.stdout, err)
	}
	if rep.Verdict != "drop" || rep.Reason != "vip-draining" || rep.Rule != "web-v4" || rep.TrackedBackend != was.BackendName() ||
		!strings.Contains(rep.Draining, "20s") || !strings.HasPrefix(rep.Why, "M5:") {
		t.Errorf("JSON report %+v; want drop vip-draining of web-v4, draining 20s, tracked flow to %s", rep, was.BackendName())
	}
	o = xlb(append([]string{"explain", "-c", after, "--previous", before}, explainArgs(p)...)...)
	o.wantCode(t, 0)
	f := textFields(t, o.stdout)
	if f["verdict"] != "drop vip-draining" || !strings.HasPrefix(f["draining"], "removed by the reload") ||
		!strings.HasPrefix(f["tracked flow"], "forward to "+was.BackendName()) {
		t.Errorf("text:\n%s", o.stdout)
	}

	o = xlb(append([]string{"explain", "-c", after}, explainArgs(p)...)...)
	o.wantCode(t, 0)
	if f := textFields(t, o.stdout); f["verdict"] != "drop no-rule" || f["draining"] != "" {
		t.Errorf("without --previous:\n%s", o.stdout)
	}

	o = xlb(append([]string{"explain", "-c", after, "--previous", filepath.Join(dir, "missing.toml")}, explainArgs(p)...)...)
	if o.code == 0 || o.stdout != "" || !strings.Contains(o.stderr, "--previous") {
		t.Errorf("a --previous that does not load: exit %d, stdout %q, stderr %q", o.code, o.stdout, o.stderr)
	}
}
