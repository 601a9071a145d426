package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const examplePath = "../testdata/config/example.toml"

// exampleConfig is what the example of docs/config.md must load as.
func exampleConfig() *Config {
	return &Config{
		Path: examplePath,
		Dataplane: Dataplane{
			Interface: "eth1", AllQueues: true, CPUs: []int{2, 3},
			XDPMode: XDPAuto, ZeroCopy: ZeroCopyAuto,
			FrameSize: 4096, RingSize: 2048, ConntrackCapacity: 4194304, StateDir: "/run/xlb", ConntrackSYNTimeoutSec: 5,
			User: "xlb",
		},
		Admin: Admin{Listen: "127.0.0.1:9110", Socket: "/run/xlb/admin.sock"},
		HealthChecks: []HealthCheck{{
			Name: "web-hc", Type: CheckHTTP, Port: 8080, RequestPath: "/healthz",
			CheckInterval: 5 * time.Second, Timeout: 5 * time.Second,
			HealthyThreshold: 2, UnhealthyThreshold: 2,
		}},
		Services: []Service{{
			Name: "web", Protocol: ServiceTCP, Affinity: AffinityNone, Locality: LocalityMaglev,
			HealthCheck: 0, ForwardingMethod: ForwardL2DSR, GUEPort: 5555, MaglevTableSize: 65537,
			Tracking: TrackingPolicy{Mode: PerConnection, Persistence: PersistDefaultForProtocol, IdleTimeout: time.Minute},
			Groups: []Group{
				{Name: "pool-a", Endpoints: []Endpoint{
					{Name: "b1", IP: netip.MustParseAddr("10.10.0.11")},
					{Name: "b2", IP: netip.MustParseAddr("10.10.0.12"), MAC: [6]byte{2, 0, 0, 0, 0, 0x12}, HasMAC: true},
				}},
				{Name: "pool-b", Failover: true, Endpoints: []Endpoint{
					{Name: "b3", IP: netip.MustParseAddr("10.10.0.13")},
				}},
			},
		}},
		Rules: []ForwardingRule{{
			Name: "web-v4", VIP: netip.MustParseAddr("203.0.113.10"), Protocol: RuleTCP,
			Ports:   []PortRange{{80, 80}, {443, 443}, {8000, 8010}},
			Service: 0,
		}},
	}
}

func TestExampleFromConfigMD(t *testing.T) {
	cfg, err := Load(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	if want := exampleConfig(); !reflect.DeepEqual(cfg, want) {
		t.Errorf("got\n%+v\nwant\n%+v", cfg, want)
	}
	if err := cfg.ValidateForRun(); err != nil {
		t.Errorf("ValidateForRun: %v", err)
	}
	const summary = "1 rule on 1 VIP, 1 service, 3 backends (2 primary, 1 failover), 1 health check"
	if s := cfg.Summary(); s != summary {
		t.Errorf("Summary() = %q, want %q", s, summary)
	}
}

// TestExampleIsDocumented keeps testdata in step with the documentation:
// the toml block of docs/config.md's complete example is the example,
// byte for byte.
func TestExampleIsDocumented(t *testing.T) {
	checkDocumented(t, examplePath, "## Complete example")
}

// TestMinimalFromREADME: the README's configuration is
// testdata/config/minimal.toml, byte for byte, and `xlb run` could start
// with it (ValidateForRun), with the defaults its comments promise.
func TestMinimalFromREADME(t *testing.T) {
	const path = "../testdata/config/minimal.toml"
	checkDocumentedIn(t, "../README.md", path, "## A configuration")
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.ValidateForRun(); err != nil {
		t.Errorf("ValidateForRun: %v", err)
	}
	const summary = "1 rule on 1 VIP, 1 service, 3 backends (3 primary, 0 failover), 1 health check"
	if s := cfg.Summary(); s != summary {
		t.Errorf("Summary() = %q, want %q", s, summary)
	}
	svc := cfg.Services[0]
	if svc.Locality != LocalityMaglev || svc.Affinity != AffinityNone ||
		svc.Tracking.Mode != PerConnection || svc.ForwardingMethod != ForwardL2DSR {
		t.Errorf("service defaults: %+v", svc)
	}
	if !cfg.Dataplane.AllQueues {
		t.Error("queues default is not all")
	}
	if hc := cfg.HealthChecks[0]; hc.HealthyThreshold != 2 {
		t.Errorf("healthy_threshold default %d, the README says two", hc.HealthyThreshold)
	}
}

// checkDocumented fails t unless the file at path is, byte for byte, the
// first toml block of docs/config.md after heading (from the top when
// heading is "").
func checkDocumented(t *testing.T, path, heading string) {
	t.Helper()
	checkDocumentedIn(t, "../docs/config.md", path, heading)
}

// checkDocumentedIn is checkDocumented for the page at docPath.
func checkDocumentedIn(t *testing.T, docPath, path, heading string) {
	t.Helper()
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	where := docPath
	if heading != "" {
		where = fmt.Sprintf("the %s section of %s", heading, docPath)
	}
	_, section, ok := strings.Cut(string(doc), heading) // "" cuts before the first byte
	_, block, ok2 := strings.Cut(section, "```toml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("no toml block in %s", where)
	}
	example, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(example) != block {
		t.Errorf("%s differs from the toml block of %s", path, where)
	}
}

func TestDefaults(t *testing.T) {
	cfg := mustParse(t, valid)
	want := &Config{
		Path: "test.toml",
		Dataplane: Dataplane{
			AllQueues: true, XDPMode: XDPAuto, ZeroCopy: ZeroCopyAuto,
			FrameSize: 4096, RingSize: 2048, ConntrackCapacity: 4194304, ConntrackSYNTimeoutSec: 5,
			StateDir: "/run/xlb", // kept unless the file says state_dir = ""
		},
		Admin: Admin{Listen: "127.0.0.1:9110", Socket: "/run/xlb/admin.sock"},
		HealthChecks: []HealthCheck{{
			Name: "hc", Type: CheckHTTP, Port: 80, RequestPath: "/",
			CheckInterval: 5 * time.Second, Timeout: 5 * time.Second,
			HealthyThreshold: 2, UnhealthyThreshold: 2,
		}},
		Services: []Service{{
			Name: "web", Protocol: ServiceTCP, Affinity: AffinityNone, Locality: LocalityMaglev,
			HealthCheck: 0, DrainingTimeout: 0, ForwardingMethod: ForwardL2DSR, GUEPort: 5555,
			MaglevTableSize: 65537,
			Tracking:        TrackingPolicy{Mode: PerConnection, Persistence: PersistDefaultForProtocol, IdleTimeout: 60 * time.Second},
			Failover:        FailoverPolicy{Ratio: 0, DropTrafficIfUnhealthy: false, DisableDrainOnFailover: false},
			Groups: []Group{{Name: "a", Failover: false, Endpoints: []Endpoint{
				{Name: "10.0.0.1", IP: netip.MustParseAddr("10.0.0.1")}, // named after its address
			}}},
		}},
		Rules: []ForwardingRule{{
			Name: "r", VIP: netip.MustParseAddr("192.0.2.1"), Protocol: RuleTCP,
			Ports: []PortRange{{80, 80}}, Service: 0,
		}},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got\n%+v\nwant\n%+v", cfg, want)
	}
}

func TestF1_FailoverPolicy(t *testing.T) {
	// Defaults are in TestDefaults; the bounds themselves are accepted, and an
	// integer is a number.
	for src, want := range map[string]FailoverPolicy{
		"failover_ratio = 1":   {Ratio: 1},
		"failover_ratio = 0.0": {Ratio: 0},
		"failover_ratio = 0.5\ndrop_traffic_if_unhealthy = true\ndisable_connection_drain_on_failover = true": {
			Ratio: 0.5, DropTrafficIfUnhealthy: true, DisableDrainOnFailover: true},
	} {
		cfg := mustParse(t, file(hcHTTP, svcWeb, "[backend_service.failover_policy]", src, groupA, ruleWeb))
		if got := cfg.Services[0].Failover; got != want {
			t.Errorf("%s: got %+v, want %+v", src, got, want)
		}
	}
}

func TestDataplaneSettings(t *testing.T) {
	cfg := mustParse(t, file("[dataplane]", `interface = "ens5f0"`, "queues = [0, 3]", "cpus = [4, 5]",
		`xdp_mode = "generic"`, `zero_copy = "off"`, "frame_size = 2048", "ring_size = 64", "conntrack_capacity = 1024", "conntrack_syn_timeout_sec = 3", "conntrack_new_entry_rate = 50000",
		`state_dir = "/run/xlb-a"`, `user = "xlb"`,
		"[admin]", `listen = "[::1]:9000"`)+valid)
	want := Dataplane{Interface: "ens5f0", Queues: []int{0, 3}, CPUs: []int{4, 5}, XDPMode: XDPGeneric,
		ZeroCopy: ZeroCopyOff, FrameSize: 2048, RingSize: 64, ConntrackCapacity: 1024, ConntrackSYNTimeoutSec: 3, ConntrackNewEntryRate: 50000, StateDir: "/run/xlb-a", User: "xlb"}
	if !reflect.DeepEqual(cfg.Dataplane, want) {
		t.Errorf("got %+v, want %+v", cfg.Dataplane, want)
	}
	if cfg.Admin.Listen != "[::1]:9000" {
		t.Errorf("listen %q", cfg.Admin.Listen)
	}
}

// TestStateDirDefault: tracked flows are kept in /run/xlb unless the file
// turns keeping off with an explicit state_dir = "" (absent and empty
// differ); a [dataplane] without the key keeps the default too.
func TestStateDirDefault(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"NoDataplane", valid, "/run/xlb"},
		{"DataplaneWithoutKey", file("[dataplane]", `interface = "eth1"`) + valid, "/run/xlb"},
		{"Empty", file("[dataplane]", `state_dir = ""`) + valid, ""},
		{"EmptyLiteral", file("[dataplane]", `state_dir = ''`) + valid, ""},
		{"Other", file("[dataplane]", `state_dir = "/run/xlb-b"`) + valid, "/run/xlb-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustParse(t, tc.src).Dataplane.StateDir; got != tc.want {
				t.Errorf("state_dir %q, want %q", got, tc.want)
			}
		})
	}
	wantError(t, file("[dataplane]", `state_dir = false # <-`)+valid, "dataplane.state_dir", "expected a string, got boolean false", false)
}

func TestValidateForRun(t *testing.T) {
	cfg := mustParse(t, valid)
	err := cfg.ValidateForRun()
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 || es[0].Field != "dataplane.interface" {
		t.Fatalf("ValidateForRun() = %v", err)
	}
	if got, want := err.Error(), "test.toml: dataplane.interface: required by xlb run"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestSummary(t *testing.T) {
	src := file(hcHTTP, hcTCP, svcWeb,
		"[[backend_service.backend]]", `group = "a"`, `endpoints = [{ ip = "10.0.0.1" }, { ip = "10.0.0.2" }, { ip = "10.0.0.3" }]`,
		"[[backend_service.backend]]", `group = "b"`, "failover = true", `endpoints = [{ ip = "10.0.0.4" }]`,
		"[[backend_service]]", `name = "dns"`, `protocol = "UDP"`, `health_checks = ["tcp-hc"]`,
		"[[backend_service.backend]]", `group = "a"`, `endpoints = [{ ip = "10.0.0.1" }, { ip = "10.0.0.2" }]`,
		"[[backend_service.backend]]", `group = "b"`, "failover = true", `endpoints = [{ ip = "10.0.0.4" }]`,
		ruleWeb,
		"[[forwarding_rule]]", `name = "r2"`, `ip_address = "192.0.2.1"`, `ip_protocol = "UDP"`, `ports = ["53"]`, `backend_service = "dns"`,
		"[[forwarding_rule]]", `name = "r3"`, `ip_address = "192.0.2.2"`, `ip_protocol = "TCP"`, `all_ports = true`, `backend_service = "web"`)
	const want = "3 rules on 2 VIPs, 2 services, 7 backends (5 primary, 2 failover), 2 health checks"
	if got := mustParse(t, src).Summary(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := (&Config{}).Summary(); got != "0 rules on 0 VIPs, 0 services, 0 backends (0 primary, 0 failover), 0 health checks" {
		t.Errorf("empty: %q", got)
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{"a.toml", 7, "backend_service[1].failover_policy.failover_ratio", "1.5 is outside [0.0, 1.0]"},
			"a.toml:7: backend_service[1].failover_policy.failover_ratio: 1.5 is outside [0.0, 1.0]"},
		{Error{"a.toml", 0, "dataplane.interface", "required by xlb run"}, "a.toml: dataplane.interface: required by xlb run"},
		{Error{"a.toml", 3, "", "syntax"}, "a.toml:3: syntax"},
		{Error{"", 3, "x", "m"}, "line 3: x: m"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
	es := Errors{{File: "f", Line: 1, Field: "a", Msg: "x"}, {File: "f", Line: 2, Field: "b", Msg: "y"}}
	if got := es.Error(); got != "f:1: a: x\nf:2: b: y" {
		t.Errorf("Errors: %q", got)
	}
	var e *Error
	if !errors.As(error(es), &e) || e.Field != "a" {
		t.Errorf("errors.As found %v", e)
	}
}

func TestSyntaxError(t *testing.T) {
	src := valid + "[[forwarding_rule]]\nname = \"x\nip = 1\n"
	es := parseErrors(t, src)
	if len(es) != 1 || es[0].Line != strings.Count(valid, "\n")+2 || es[0].Field != "" || es[0].File != "test.toml" {
		t.Errorf("got %#v", es[0])
	}
	es = parseErrors(t, "[admin]\nlisten = 1\nlisten = 2\n")
	if len(es) != 1 || es[0].Line != 3 {
		t.Errorf("duplicate key: %v", es)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "none.toml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v", err)
	}
}

func TestAllErrorsCollected(t *testing.T) {
	src := file(hcHTTP, "timeout_sec = 9", svcWeb, `protocol = "SCTP"`, groupA, ruleWeb, "all_ports = true")
	es := parseErrors(t, src)
	var fields []string
	for _, e := range es {
		fields = append(fields, e.Field)
	}
	want := []string{"health_check[0].timeout_sec", "backend_service[0].protocol", "forwarding_rule[0].all_ports"}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("got %v\n%v", fields, es)
	}
}

func TestUnknownKeys(t *testing.T) {
	runErrCases(t, []errCase{
		{"TopLevel", "bogus = 1 # <-\n" + valid, "bogus", "unknown key", false},
		{"TopLevelTable", valid + "[metrics] # <-\nlisten = 1\n", "metrics", "unknown key", false},
		{"Nested", "[dataplane]\ninterface = \"eth0\"\nqueue = [0] # <-\n" + valid, "dataplane.queue", "unknown key", false},
		{"NestedDotted", "dataplane.bogus.deep = 1 # <-\n" + valid, "dataplane.bogus", "unknown key", false},
		{"SecondArrayElement", file(hcHTTP, svcWeb, groupA, "[[backend_service]]", `name = "b"`, `health_checks = ["hc"]`, `weight = 3 # <-`, groupA, ruleWeb),
			"backend_service[1].weight", "unknown key", false},
		{"InTableOfArrayElement", file(hcHTTP, svcWeb, groupA, "[[backend_service]]", `name = "b"`, `health_checks = ["hc"]`,
			"[backend_service.failover_policy]", "ratio = 0.5 # <-", groupA, ruleWeb),
			"backend_service[1].failover_policy.ratio", "unknown key", false},
		{"InEndpoint", file(hcHTTP, svcWeb, "[[backend_service.backend]]", `group = "a"`, "endpoints = [",
			`  { ip = "10.0.0.1" },`, `  { ip = "10.0.0.2", port = 8080 }, # <-`, "]", ruleWeb),
			"backend_service[0].backend[0].endpoints[1].port", "unknown key", false},
		{"CaseMatters", file(hcHTTP, svcWeb, groupA, ruleWeb, `Backend_Service = "web" # <-`),
			"forwarding_rule[0].Backend_Service", `unknown key; did you mean "backend_service"?`, false},
		{"CaseOfTable", "DATAPLANE = 5 # <-\n" + valid, "DATAPLANE", `unknown key; did you mean "dataplane"?`, false},
		{"QuotedKey", "\"odd key\" = 1 # <-\n" + valid, `"odd key"`, "unknown key", false},
	})

	// A value of the wrong shape for a table is reported, not decoded.
	runErrCases(t, []errCase{
		{"TableIsScalar", "dataplane = 1 # <-\n" + valid, "dataplane", "expected a table, got integer 1", false},
		{"ArrayOfTablesIsString", "health_check = \"hc\" # <-\n", "health_check", `expected an array of tables, got string "hc"`, false},
		{"EndpointsOfStrings", file(hcHTTP, svcWeb, "[[backend_service.backend]]", `group = "a"`, `endpoints = ["10.0.0.1"] # <-`, ruleWeb),
			"backend_service[0].backend[0].endpoints", "expected an array of tables, got array", false},
	})
}

// TestArraysOfInlineTables checks that sections written inline load like
// [[...]] sections.
func TestArraysOfInlineTables(t *testing.T) {
	src := `health_check = [{ name = "hc", type = "TCP" }]
backend_service = [{ name = "web", health_checks = ["hc"], backend = [{ group = "a", endpoints = [{ ip = "10.0.0.1" }] }] }]
forwarding_rule = [{ name = "r", ip_address = "192.0.2.1", ip_protocol = "TCP", all_ports = true, backend_service = "web" }]
`
	cfg := mustParse(t, src)
	if cfg.Summary() != "1 rule on 1 VIP, 1 service, 1 backend (1 primary, 0 failover), 1 health check" {
		t.Errorf("got %s", cfg.Summary())
	}
	wantError(t, strings.Replace(src, `type = "TCP" }]`, `type = "UDP" }] # <-`, 1), "health_check[0].type", `"UDP" is not one of`, false)
}

// TestTruncatedFileWording: a file cut inside a table name says the file
// ends there, not that the parser "got '\x00'".
func TestTruncatedFileWording(t *testing.T) {
	_, err := Parse("cut.toml", []byte("[dataplane]\ninterface = \"eth1\"\n[[backend_serv"))
	if err == nil {
		t.Fatal("a cut table name parsed")
	}
	if msg := err.Error(); strings.Contains(msg, `\x00`) || !strings.Contains(msg, "cut.toml:3:") || !strings.Contains(msg, "the file ends there") {
		t.Errorf("error %q: want line 3 and that the file ends there, no \\x00", msg)
	}
}
