package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

type errCase struct {
	name  string
	src   string
	field string
	msg   string
	more  bool // other errors are expected too
}

func runErrCases(t *testing.T, cases []errCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, tc.src, tc.field, tc.msg, tc.more)
		})
	}
}

func TestDataplaneValidation(t *testing.T) {
	dp := func(lines ...string) string {
		return file(append([]string{"[dataplane]"}, lines...)...) + valid
	}
	runErrCases(t, []errCase{
		{"QueuesWord", dp(`queues = "some" # <-`), "dataplane.queues", `"some" is neither "all" nor a list`, false},
		{"QueuesType", dp(`queues = 3 # <-`), "dataplane.queues", `expected "all" or an array, got integer 3`, false},
		{"QueuesEmpty", dp(`queues = [] # <-`), "dataplane.queues", "lists no queue", false},
		{"QueueDuplicate", dp(`queues = [0,`, `  0, # <-`, `]`), "dataplane.queues[1]", "0 is already listed at dataplane.queues[0]", false},
		{"QueueNegative", dp(`queues = [-1] # <-`), "dataplane.queues[0]", "-1 is outside [0, 65535]", false},
		{"CPUsPerQueue", dp(`queues = [0, 1]`, `cpus = [2] # <-`), "dataplane.cpus", "lists 1 CPUs for 2 queues", false},
		{"CPUDuplicate", dp(`queues = [0, 1]`, `cpus = [2,`, `  2, # <-`, `]`), "dataplane.cpus[1]", "2 is already listed at dataplane.cpus[0]", false},
		{"CPUsType", dp(`cpus = "2" # <-`), "dataplane.cpus", `expected an array, got string "2"`, false},
		{"XDPModeCase", dp(`xdp_mode = "Native" # <-`), "dataplane.xdp_mode", `"Native" is not one of auto, native, generic`, false},
		{"ZeroCopy", dp(`zero_copy = true # <-`), "dataplane.zero_copy", "expected a string, got boolean true", false},
		{"FrameSize", dp(`frame_size = 3000 # <-`), "dataplane.frame_size", "3000 is not 2048 or 4096", false},
		{"FrameSizeBig", dp(`frame_size = 8192 # <-`), "dataplane.frame_size", "8192 is outside [2048, 4096]", false},
		{"RingSizePow2", dp(`ring_size = 100 # <-`), "dataplane.ring_size", "100 is not a power of two", false},
		{"RingSizeSmall", dp(`ring_size = 32 # <-`), "dataplane.ring_size", "32 is outside [64, 65536]", false},
		{"RingSizeBig", dp(`ring_size = 131072 # <-`), "dataplane.ring_size", "131072 is outside [64, 65536]", false},
		{"ConntrackSmall", dp(`conntrack_capacity = 1000 # <-`), "dataplane.conntrack_capacity", "1000 is outside [1024, 268435456]", false},
		{"StateDirRelative", dp(`state_dir = "run/xlb" # <-`), "dataplane.state_dir", `"run/xlb" is not an absolute path`, false},
		{"ConntrackBig", dp(`conntrack_capacity = 268435457 # <-`), "dataplane.conntrack_capacity", "268435457 is outside", false},
		{"SYNTimeoutZero", dp(`conntrack_syn_timeout_sec = 0 # <-`), "dataplane.conntrack_syn_timeout_sec", "0 is outside [1, 3600]", false},
		{"NewEntryRateNegative", dp(`conntrack_new_entry_rate = -1 # <-`), "dataplane.conntrack_new_entry_rate", "-1 is outside [0, 100000000]", false},
		{"UserSpace", dp(`user = "x lb" # <-`), "dataplane.user", `"x lb" is neither a user name nor a uid`, false},
		{"UserEmpty", dp(`user = "" # <-`), "dataplane.user", `"" is neither a user name nor a uid`, false},
		{"UserDash", dp(`user = "-xlb" # <-`), "dataplane.user", `"-xlb" is neither`, false},
		{"UserNoUID", dp(`user = "4294967295" # <-`), "dataplane.user", `"4294967295" is neither`, false},
		{"UserNumber", dp(`user = 999 # <-`), "dataplane.user", "expected a string, got integer 999", false},
		{"Interface", dp(`interface = "eth/1" # <-`), "dataplane.interface", `"eth/1" is not a valid interface name`, false},
		{"InterfaceEmpty", dp(`interface = "" # <-`), "dataplane.interface", `"" is not a valid interface name`, false},
	})
}

func TestAdminValidation(t *testing.T) {
	admin := func(v string) string { return file("[admin]", "listen = "+v+" # <-") + valid }
	sock := func(v string) string { return file("[admin]", "socket = "+v+" # <-") + valid }
	runErrCases(t, []errCase{
		{"NoPort", admin(`"localhost"`), "admin.listen", `"localhost" is not host:port`, false},
		{"NamedPort", admin(`"127.0.0.1:http"`), "admin.listen", `port "http" is not a number in [1, 65535]`, false},
		{"PortZero", admin(`":0"`), "admin.listen", `port "0" is not a number`, false},
		{"Type", admin(`9110`), "admin.listen", "expected a string, got integer 9110", false},
		{"SocketRelative", sock(`"run/xlb.sock"`), "admin.socket", `"run/xlb.sock" is not an absolute path`, false},
		{"SocketDir", sock(`"/run/xlb/"`), "admin.socket", "is not a clean file path", false},
		{"SocketDots", sock(`"/run/../tmp/x.sock"`), "admin.socket", "is not a clean file path", false},
		{"SocketBlank", sock(`"/run/x lb.sock"`), "admin.socket", "is not a clean file path", false},
		{"SocketLong", sock(`"/` + strings.Repeat("a", 80) + `"`), "admin.socket", "is 81 bytes, at most 80", false},
		{"SocketType", sock(`1`), "admin.socket", "expected a string, got integer 1", false},
		{"PprofType", file("[admin]", `pprof = "yes" # <-`) + valid, "admin.pprof", `expected a boolean, got string "yes"`, false},
	})
}

// TestAdminSocketAndPprof: the socket and pprof keys are read; their
// defaults are /run/xlb/admin.sock and false.
func TestAdminSocketAndPprof(t *testing.T) {
	cfg := mustParse(t, file("[admin]", `socket = "/run/xlb-test/a.sock"`, "pprof = true")+valid)
	if cfg.Admin.Socket != "/run/xlb-test/a.sock" || !cfg.Admin.Pprof {
		t.Errorf("admin %+v, want the socket and pprof as set", cfg.Admin)
	}
	cfg = mustParse(t, valid)
	if cfg.Admin.Socket != "/run/xlb/admin.sock" || cfg.Admin.Pprof {
		t.Errorf("admin %+v, want the defaults", cfg.Admin)
	}
}

func TestHealthCheckValidation(t *testing.T) {
	hc := func(lines ...string) string {
		return file(append([]string{hcHTTP}, lines...)...) + file(svcWeb, groupA, ruleWeb)
	}
	runErrCases(t, []errCase{
		{"NameRequired", file("[[health_check]] # <-", `type = "TCP"`) + valid, "health_check[0].name", "required", false},
		{"NameEmpty", file("[[health_check]]", `name = "" # <-`, `type = "TCP"`) + valid, "health_check[0].name", "must not be empty", false},
		{"NameBlank", file("[[health_check]]", `name = "a b" # <-`, `type = "TCP"`) + valid, "health_check[0].name", `"a b" must not contain blanks`, false},
		{"NameUnique", file(hcHTTP, "[[health_check]]", `name = "hc" # <-`, `type = "TCP"`, svcWeb, groupA, ruleWeb),
			"health_check[1].name", `"hc" is already the name of health_check[0]`, false},
		{"TypeRequired", file("[[health_check]] # <-", `name = "hc"`, svcWeb, groupA, ruleWeb), "health_check[0].type", "required", false},
		{"TypeCase", file("[[health_check]]", `name = "hc"`, `type = "http" # <-`, svcWeb, groupA, ruleWeb),
			"health_check[0].type", `"http" is not one of HTTP, TCP`, false},
		{"PortZero", hc(`port = 0 # <-`), "health_check[0].port", "0 is outside [1, 65535]", false},
		{"PortBig", hc(`port = 65536 # <-`), "health_check[0].port", "65536 is outside [1, 65535]", false},
		{"PortType", hc(`port = "80" # <-`), "health_check[0].port", `expected an integer, got string "80"`, false},
		{"TimeoutAboveInterval", hc(`check_interval_sec = 5`, `timeout_sec = 6 # <-`), "health_check[0].timeout_sec", "6 is larger than check_interval_sec 5", false},
		{"TimeoutAboveDefaultInterval", hc(`timeout_sec = 10 # <-`), "health_check[0].timeout_sec", "10 is larger than check_interval_sec 5", false},
		{"IntervalZero", hc(`check_interval_sec = 0 # <-`, `timeout_sec = 1`), "health_check[0].check_interval_sec", "0 is outside [1, 300]", false},
		{"TimeoutZero", hc(`timeout_sec = 0 # <-`), "health_check[0].timeout_sec", "0 is outside [1, 300]", false},
		{"HealthyThreshold", hc(`healthy_threshold = 0 # <-`), "health_check[0].healthy_threshold", "0 is outside [1, 10]", false},
		{"UnhealthyThreshold", hc(`unhealthy_threshold = 0 # <-`), "health_check[0].unhealthy_threshold", "0 is outside [1, 10]", false},
		{"RequestPathSlash", hc(`request_path = "healthz" # <-`), "health_check[0].request_path", `"healthz" must start with /`, false},
		{"HostBlank", hc(`host = "a b" # <-`), "health_check[0].host", `"a b" must contain no blanks`, false},
		{"RequestPathOnTCP", file(hcTCP, `request_path = "/x" # <-`, `[[backend_service]]`, `name = "web"`, `health_checks = ["tcp-hc"]`, groupA, ruleWeb),
			"health_check[0].request_path", "applies only to HTTP health checks", false},
		{"HostOnTCP", file(hcTCP, `host = "x" # <-`, `[[backend_service]]`, `name = "web"`, `health_checks = ["tcp-hc"]`, groupA, ruleWeb),
			"health_check[0].host", "applies only to HTTP health checks", false},
	})
}

func TestServiceValidation(t *testing.T) {
	svc := func(lines ...string) string {
		return file(append([]string{hcHTTP, svcWeb}, lines...)...) + file(groupA, ruleWeb)
	}
	runErrCases(t, []errCase{
		{"NameRequired", file(hcHTTP, "[[backend_service]] # <-", `health_checks = ["hc"]`, groupA), "backend_service[0].name", "required", false},
		{"NameUnique", file(hcHTTP, svcWeb, groupA, "[[backend_service]]", `name = "web" # <-`, `health_checks = ["hc"]`, groupA, ruleWeb),
			"backend_service[1].name", `"web" is already the name of backend_service[0]`, false},
		{"Protocol", svc(`protocol = "SCTP" # <-`), "backend_service[0].protocol", `"SCTP" is not one of TCP, UDP, UNSPECIFIED`, false},
		{"Affinity", svc(`session_affinity = "CLIENT_IP_PORT" # <-`), "backend_service[0].session_affinity", `"CLIENT_IP_PORT" is not one of NONE, CLIENT_IP_PORT_PROTO`, false},
		{"Locality", svc(`locality_lb_policy = "ROUND_ROBIN" # <-`), "backend_service[0].locality_lb_policy", `"ROUND_ROBIN" is not one of MAGLEV, WEIGHTED_MAGLEV`, false},
		{"HealthChecksRequired", file(hcHTTP, "[[backend_service]] # <-", `name = "web"`, groupA, ruleWeb), "backend_service[0].health_checks", "required", false},
		{"HealthChecksEmpty", file(hcHTTP, "[[backend_service]]", `name = "web"`, `health_checks = [] # <-`, groupA, ruleWeb),
			"backend_service[0].health_checks", "lists 0 health checks; exactly one is required", false},
		{"HealthChecksTwo", file(hcHTTP, hcTCP, "[[backend_service]]", `name = "web"`, `health_checks = ["hc", "tcp-hc"] # <-`, groupA, ruleWeb),
			"backend_service[0].health_checks", "lists 2 health checks", false},
		{"HealthCheckUnknown", file(hcHTTP, "[[backend_service]]", `name = "web"`, `health_checks = ["nope"] # <-`, groupA, ruleWeb),
			"backend_service[0].health_checks[0]", `no health_check is named "nope"`, false},
		{"W1_WeightedNeedsHTTPCheck", file(hcTCP, "[[backend_service]]", `name = "web"`, `health_checks = ["tcp-hc"]`,
			`locality_lb_policy = "WEIGHTED_MAGLEV" # <-`, groupA, ruleWeb),
			"backend_service[0].locality_lb_policy", `WEIGHTED_MAGLEV needs an HTTP health check; "tcp-hc" is TCP`, false},
		{"DrainingTooLong", svc(`connection_draining_timeout_sec = 3601 # <-`), "backend_service[0].connection_draining_timeout_sec", "3601 is outside [0, 3600]", false},
		{"DrainingNegative", svc(`connection_draining_timeout_sec = -1 # <-`), "backend_service[0].connection_draining_timeout_sec", "-1 is outside [0, 3600]", false},
		{"ForwardingMethod", svc(`forwarding_method = "DSR" # <-`), "backend_service[0].forwarding_method", `"DSR" is not one of L2_DSR, IPIP, GUE`, false},
		{"GUEPortRange", svc(`forwarding_method = "GUE"`, `gue_port = 0 # <-`), "backend_service[0].gue_port", "0 is outside [1, 65535]", false},
		{"GUEPortWithoutGUE", svc(`gue_port = 6000 # <-`), "backend_service[0].gue_port", "applies only to forwarding_method GUE, not L2_DSR", false},
		{"MaglevNotPrime", svc(`maglev_table_size = 65536 # <-`), "backend_service[0].maglev_table_size", "65536 is not a prime", false},
		{"MaglevTooSmall", svc(`maglev_table_size = 241 # <-`), "backend_service[0].maglev_table_size", "241 is outside [251, 16777213]", false},
		{"MaglevTooBig", svc(`maglev_table_size = 16777259 # <-`), "backend_service[0].maglev_table_size", "16777259 is outside [251, 16777213]", false},
		{"MaglevTwiceEndpoints", maglevWithEndpoints(126), "backend_service[0].maglev_table_size", "251 is not larger than 2 × 126 endpoints", false},
		{"TrackingMode", svc(`connection_tracking_policy.tracking_mode = "PER_FLOW" # <-`),
			"backend_service[0].connection_tracking_policy.tracking_mode", `"PER_FLOW" is not one of PER_CONNECTION, PER_SESSION`, false},
		{"P1_AlwaysPersistPerSessionInvalid", svc(`  [backend_service.connection_tracking_policy]`, `  tracking_mode = "PER_SESSION"`,
			`  connection_persistence_on_unhealthy_backends = "ALWAYS_PERSIST" # <-`),
			"backend_service[0].connection_tracking_policy.connection_persistence_on_unhealthy_backends",
			"ALWAYS_PERSIST is invalid with tracking_mode PER_SESSION", false},
		{"IdleTimeoutZero", svc(`connection_tracking_policy = { idle_timeout_sec = 0 } # <-`),
			"backend_service[0].connection_tracking_policy.idle_timeout_sec", "0 is outside [1, 86400]", false},
		{"IdleTimeoutLong", svc(`connection_tracking_policy.idle_timeout_sec = 86401 # <-`),
			"backend_service[0].connection_tracking_policy.idle_timeout_sec", "86401 is outside [1, 86400]", false},
		{"F1_RatioAboveOne", svc(`  [backend_service.failover_policy]`, `  failover_ratio = 1.5 # <-`),
			"backend_service[0].failover_policy.failover_ratio", "1.5 is outside [0.0, 1.0]", false},
		{"F1_RatioNegative", svc(`failover_policy.failover_ratio = -0.1 # <-`),
			"backend_service[0].failover_policy.failover_ratio", "-0.1 is outside [0.0, 1.0]", false},
		{"F1_RatioNaN", svc(`failover_policy.failover_ratio = nan # <-`),
			"backend_service[0].failover_policy.failover_ratio", "NaN is outside [0.0, 1.0]", false},
		{"F1_RatioType", svc(`failover_policy.failover_ratio = "0.5" # <-`),
			"backend_service[0].failover_policy.failover_ratio", `expected a number, got string "0.5"`, false},
		{"DropType", svc(`failover_policy.drop_traffic_if_unhealthy = "yes" # <-`),
			"backend_service[0].failover_policy.drop_traffic_if_unhealthy", `expected a boolean, got string "yes"`, false},
	})
}

// maglevWithEndpoints is a service whose table (251) is too small for n
// endpoints, with the marker on the table size.
func maglevWithEndpoints(n int) string {
	var b strings.Builder
	b.WriteString(file(hcHTTP, svcWeb, "maglev_table_size = 251 # <-", "[[backend_service.backend]]", `group = "a"`, "endpoints = ["))
	for i := range n {
		fmt.Fprintf(&b, "  { ip = \"10.0.%d.%d\" },\n", i/200, i%200+1)
	}
	b.WriteString("]\n")
	return b.String() + ruleWeb + "\n"
}

// TestAtMost65535Endpoints: a Maglev table entry is 2 bytes, so a service
// has at most 65,535 endpoints (its table then needs M > 131,070).
func TestAtMost65535Endpoints(t *testing.T) {
	src := func(n int) string {
		var b strings.Builder
		b.WriteString(file(hcHTTP, svcWeb, "maglev_table_size = 131101", "[[backend_service.backend]] # <-", `group = "a"`, "endpoints = ["))
		for i := range n {
			fmt.Fprintf(&b, "{ ip = \"10.%d.%d.%d\" },\n", i>>16+1, i>>8&255, i&255)
		}
		b.WriteString("]\n")
		return b.String() + ruleWeb + "\n"
	}
	if testing.Short() {
		t.Skip("parses two files of 65,535 endpoints")
	}
	mustParse(t, src(65535))
	wantError(t, src(65536), "backend_service[0].backend", "has 65536 endpoints; at most 65535 are allowed", false)
}

// groups returns a service with primary and failover groups of one
// endpoint each; the marker is on the first group.
func groups(primary, failover int) string {
	var b strings.Builder
	b.WriteString(file(hcHTTP, svcWeb))
	for i := range primary + failover {
		marker := ""
		if i == 0 {
			marker = " # <-"
		}
		fmt.Fprintf(&b, "[[backend_service.backend]]%s\ngroup = \"g%d\"\nfailover = %t\nendpoints = [{ ip = \"10.1.%d.%d\" }]\n",
			marker, i, i >= primary, i/200, i%200+1)
	}
	return b.String() + ruleWeb + "\n"
}

func TestF2_AtMost50GroupsPerRole(t *testing.T) {
	mustParse(t, groups(50, 50))
	runErrCases(t, []errCase{
		{"Primary", groups(51, 0), "backend_service[0].backend", "has 51 primary groups; at most 50 are allowed", false},
		{"Failover", groups(1, 51), "backend_service[0].backend", "has 51 failover groups; at most 50 are allowed", false},
	})
}

func TestGroupAndEndpointValidation(t *testing.T) {
	grp := func(lines ...string) string {
		return file(append([]string{hcHTTP, svcWeb, "[[backend_service.backend]]"}, lines...)...) + file(ruleWeb)
	}
	twoServices := func(ep1, ep2 string) string {
		return file(hcHTTP, svcWeb, "[[backend_service.backend]]", `group = "a"`, "endpoints = [ "+ep1+" ]",
			"[[backend_service]]", `name = "other"`, `health_checks = ["hc"]`,
			"[[backend_service.backend]]", `group = "a"`, "endpoints = [ "+ep2+" ] # <-", ruleWeb)
	}
	runErrCases(t, []errCase{
		{"GroupNameRequired", file(hcHTTP, svcWeb, "[[backend_service.backend]] # <-", `endpoints = [{ ip = "10.0.0.1" }]`, ruleWeb),
			"backend_service[0].backend[0].group", "required", false},
		{"GroupNameUnique", file(hcHTTP, svcWeb, groupA, "[[backend_service.backend]]", `group = "a" # <-`, `endpoints = [{ ip = "10.0.0.2" }]`, ruleWeb),
			"backend_service[0].backend[1].group", `"a" is already the name of backend_service[0].backend[0]`, false},
		{"NoEndpointsKey", file(hcHTTP, svcWeb, "[[backend_service.backend]] # <-", `group = "a"`, ruleWeb),
			"backend_service[0].backend[0].endpoints", "a group needs at least one endpoint", false},
		{"EmptyEndpoints", grp(`group = "a"`, `endpoints = [] # <-`),
			"backend_service[0].backend[0].endpoints", "a group needs at least one endpoint", false},
		{"FailoverType", grp(`group = "a"`, `failover = 1 # <-`, `endpoints = [{ ip = "10.0.0.1" }]`),
			"backend_service[0].backend[0].failover", "expected a boolean, got integer 1", false},
		{"IPRequired", grp(`group = "a"`, `endpoints = [{ name = "b1" }] # <-`),
			"backend_service[0].backend[0].endpoints[0].ip", "required", false},
		{"IPBad", grp(`group = "a"`, `endpoints = [`, `  { ip = "10.0.0.1" },`, `  { ip = "10.0.0.300" }, # <-`, `]`),
			"backend_service[0].backend[0].endpoints[1].ip", `"10.0.0.300" is not an IP address`, false},
		{"IPMapped", grp(`group = "a"`, `endpoints = [{ ip = "::ffff:10.0.0.1" }] # <-`),
			"backend_service[0].backend[0].endpoints[0].ip", "write it as 10.0.0.1", false},
		{"IPUnspecified", grp(`group = "a"`, `endpoints = [{ ip = "0.0.0.0" }] # <-`),
			"backend_service[0].backend[0].endpoints[0].ip", "0.0.0.0 is not a unicast address", false},
		{"IPZone", grp(`group = "a"`, `endpoints = [{ ip = "fe80::1%eth0" }] # <-`),
			"backend_service[0].backend[0].endpoints[0].ip", "zones are not supported", false},
		{"AddressOncePerService", file(hcHTTP, svcWeb, groupA, "[[backend_service.backend]]", `group = "b"`,
			`endpoints = [ { name = "x", ip = "10.0.0.1" } ] # <-`, ruleWeb),
			"backend_service[0].backend[1].endpoints[0].ip", "10.0.0.1 is already an endpoint of this service at backend_service[0].backend[0].endpoints[0]", false},
		// More than 16 endpoints: found through a map instead of a search.
		{"AddressOncePerServiceOfMany", file(hcHTTP, svcWeb, "[[backend_service.backend]]", `group = "a"`,
			"endpoints = ["+manyEndpoints(20)+"]", "[[backend_service.backend]]", `group = "b"`,
			`endpoints = [ { ip = "10.0.2.3" }, { ip = "10.0.1.19" } ] # <-`, ruleWeb),
			"backend_service[0].backend[1].endpoints[1].ip", "10.0.1.19 is already an endpoint of this service at backend_service[0].backend[0].endpoints[19]", false},
		{"NameUniqueAcrossFile", twoServices(`{ name = "b1", ip = "10.0.0.1" }`, `{ name = "b1", ip = "10.0.0.2" }`),
			"backend_service[1].backend[0].endpoints[0].name", `"b1" is already the name of backend_service[0].backend[0].endpoints[0]`, false},
		{"NameClashesWithDefaultName", twoServices(`{ ip = "10.0.0.1" }`, `{ name = "10.0.0.1", ip = "10.0.0.2" }`),
			"backend_service[1].backend[0].endpoints[0].name", `"10.0.0.1" is already the name of backend_service[0].backend[0].endpoints[0]`, false},
		{"MACFormat", grp(`group = "a"`, `endpoints = [{ ip = "10.0.0.1", mac = "02-00-00-00-00-12" }] # <-`),
			"backend_service[0].backend[0].endpoints[0].mac", `"02-00-00-00-00-12" is not a MAC address`, false},
		{"MACShort", grp(`group = "a"`, `endpoints = [{ ip = "10.0.0.1", mac = "2:0:0:0:0:12" }] # <-`),
			"backend_service[0].backend[0].endpoints[0].mac", `is not a MAC address`, false},
		{"MACMulticast", grp(`group = "a"`, `endpoints = [{ ip = "10.0.0.1", mac = "01:00:5e:00:00:01" }] # <-`),
			"backend_service[0].backend[0].endpoints[0].mac", "01:00:5e:00:00:01 is not a unicast MAC address", false},
	})

	t.Run("SameUnnamedAddressInTwoServices", func(t *testing.T) {
		cfg := mustParse(t, twoServices(`{ ip = "10.0.0.1" }`, `{ ip = "10.0.0.1" }`))
		if a, b := cfg.Services[0].Groups[0].Endpoints[0].Name, cfg.Services[1].Groups[0].Endpoints[0].Name; a != "10.0.0.1" || b != a {
			t.Errorf("names %q, %q", a, b)
		}
	})
	t.Run("SameGroupNameInTwoServices", func(t *testing.T) {
		mustParse(t, twoServices(`{ ip = "10.0.0.1" }`, `{ ip = "10.0.0.2" }`))
	})
	t.Run("MAC", func(t *testing.T) {
		cfg := mustParse(t, grp(`group = "a"`, `endpoints = [{ ip = "10.0.0.1", mac = "02:AB:cd:00:00:12" }]`))
		e := cfg.Services[0].Groups[0].Endpoints[0]
		if !e.HasMAC || e.MAC != [6]byte{2, 0xab, 0xcd, 0, 0, 0x12} {
			t.Errorf("MAC %x, HasMAC %t", e.MAC, e.HasMAC)
		}
	})
}

func TestRuleValidation(t *testing.T) {
	// rule is a file whose only rule has the given lines after its name.
	rule := func(lines ...string) string {
		return file(hcHTTP, svcWeb, groupA) + file(append([]string{"[[forwarding_rule]]", `name = "r"`}, lines...)...)
	}
	// missing is a rule with the marker on its header, for missing keys.
	missing := func(lines ...string) string {
		return file(hcHTTP, svcWeb, groupA) + file(append([]string{"[[forwarding_rule]] # <-", `name = "r"`}, lines...)...)
	}
	tcp := func(lines ...string) string {
		return rule(append([]string{`ip_address = "192.0.2.1"`, `ip_protocol = "TCP"`, `backend_service = "web"`}, lines...)...)
	}
	runErrCases(t, []errCase{
		{"NameRequired", file(hcHTTP, svcWeb, groupA, "[[forwarding_rule]] # <-", `ip_address = "192.0.2.1"`, `ip_protocol = "TCP"`, `ports = ["80"]`, `backend_service = "web"`),
			"forwarding_rule[0].name", "required", false},
		{"NameUnique", valid + file("[[forwarding_rule]]", `name = "r" # <-`, `ip_address = "192.0.2.2"`, `ip_protocol = "TCP"`, `ports = ["80"]`, `backend_service = "web"`),
			"forwarding_rule[1].name", `"r" is already the name of forwarding_rule[0]`, false},
		{"IPAddressRequired", missing(`ip_protocol = "TCP"`, `ports = ["80"]`, `backend_service = "web"`),
			"forwarding_rule[0].ip_address", "required", false},
		{"IPAddressBad", rule(`ip_address = "192.0.2" # <-`, `ip_protocol = "TCP"`, `ports = ["80"]`, `backend_service = "web"`),
			"forwarding_rule[0].ip_address", `"192.0.2" is not an IP address`, false},
		{"ProtocolRequired", missing(`ip_address = "192.0.2.1"`, `ports = ["80"]`, `backend_service = "web"`),
			"forwarding_rule[0].ip_protocol", "required", false},
		{"Protocol", rule(`ip_address = "192.0.2.1"`, `ip_protocol = "ICMP" # <-`, `ports = ["80"]`, `backend_service = "web"`),
			"forwarding_rule[0].ip_protocol", `"ICMP" is not one of TCP, UDP, L3_DEFAULT`, false},
		{"ServiceRequired", missing(`ip_address = "192.0.2.1"`, `ip_protocol = "TCP"`, `ports = ["80"]`),
			"forwarding_rule[0].backend_service", "required", false},
		{"ServiceUnknown", rule(`ip_address = "192.0.2.1"`, `ip_protocol = "TCP"`, `ports = ["80"]`, `backend_service = "webb" # <-`),
			"forwarding_rule[0].backend_service", `no backend_service is named "webb"`, false},

		{"FR3_PortsPortRangeExclusive", tcp(`ports = ["80"]`, `port_range = "80-90" # <-`),
			"forwarding_rule[0].port_range", "ports and port_range are mutually exclusive", false},
		{"FR3_PortsAllPortsExclusive", tcp(`ports = ["80"]`, `all_ports = true # <-`),
			"forwarding_rule[0].all_ports", "ports and all_ports are mutually exclusive", false},
		{"FR3_PortRangeAllPortsExclusive", tcp(`port_range = "80"`, `all_ports = true # <-`),
			"forwarding_rule[0].all_ports", "port_range and all_ports are mutually exclusive", false},
		{"FR3_PortsRequired", missing(`ip_address = "192.0.2.1"`, `ip_protocol = "UDP"`, `backend_service = "web"`),
			"forwarding_rule[0].ports", "required: a UDP rule needs ports, port_range or all_ports = true", true},
		{"FR3_AllPortsFalseIsNoPorts", missing(`ip_address = "192.0.2.1"`, `ip_protocol = "TCP"`, `backend_service = "web"`, `all_ports = false`),
			"forwarding_rule[0].ports", "required: a TCP rule needs ports", false},
		{"FR3_AtMostFivePorts", tcp(`ports = ["1", "2", "3", "4", "5", "6"] # <-`),
			"forwarding_rule[0].ports", "lists 6 ports or ranges; at most 5 are allowed", false},
		{"FR3_NoPortListed", tcp(`ports = [] # <-`), "forwarding_rule[0].ports", "lists no port", false},
		{"FR3_PortZero", tcp(`ports = ["0"] # <-`), "forwarding_rule[0].ports[0]", `"0": ports must be in [1, 65535]`, false},
		{"FR3_PortTooBig", tcp(`ports = ["80",`, `  "65536"] # <-`), "forwarding_rule[0].ports[1]", `"65536" is not a port or a range`, false},
		{"FR3_RangeReversed", tcp(`ports = ["90-80"] # <-`), "forwarding_rule[0].ports[0]", `"90-80": the first port is larger than the last`, false},
		{"FR3_PortSyntax", tcp(`ports = [" 80"] # <-`), "forwarding_rule[0].ports[0]", `" 80" is not a port or a range`, false},
		{"FR3_PortType", tcp(`ports = [80] # <-`), "forwarding_rule[0].ports[0]", "expected a string, got integer 80", false},
		{"FR3_PortsOverlapInRule", tcp(`ports = ["80-90", "85"] # <-`), "forwarding_rule[0].ports[1]", `"85" overlaps "80-90" of the same rule`, false},
		{"FR3_PortRangeSyntax", tcp(`port_range = "80-" # <-`), "forwarding_rule[0].port_range", `"80-" is not a port or a range`, false},

		{"FR7_L3DefaultNeedsAllPorts", missing(`ip_address = "192.0.2.1"`, `ip_protocol = "L3_DEFAULT"`, `backend_service = "web"`),
			"forwarding_rule[0].all_ports", "an L3_DEFAULT rule needs all_ports = true", true},
		{"FR7_L3DefaultTakesNoPorts", file(hcHTTP, svcWeb, `protocol = "UNSPECIFIED"`, groupA, "[[forwarding_rule]]", `name = "r"`, `ip_address = "192.0.2.1"`,
			`ip_protocol = "L3_DEFAULT"`, `ports = ["80"] # <-`, `backend_service = "web"`),
			"forwarding_rule[0].ports", "an L3_DEFAULT rule takes all ports; set all_ports = true instead", false},
		{"FR7_L3DefaultPortRangeAll", file(hcHTTP, svcWeb, `protocol = "UNSPECIFIED"`, groupA, "[[forwarding_rule]]", `name = "r"`, `ip_address = "192.0.2.1"`,
			`ip_protocol = "L3_DEFAULT"`, `port_range = "1-65535" # <-`, `backend_service = "web"`),
			"forwarding_rule[0].port_range", "an L3_DEFAULT rule takes all ports", false},
		{"FR7_L3DefaultPairsWithUnspecified", rule(`ip_address = "192.0.2.1"`, `ip_protocol = "L3_DEFAULT"`, `all_ports = true`, `backend_service = "web" # <-`),
			"forwarding_rule[0].backend_service", `"web" has protocol TCP; a L3_DEFAULT rule needs a backend_service of protocol UNSPECIFIED`, false},
		{"FR7_TCPRulePairsWithTCP", file(hcHTTP, svcWeb, `protocol = "UDP"`, groupA, "[[forwarding_rule]]", `name = "r"`, `ip_address = "192.0.2.1"`,
			`ip_protocol = "TCP"`, `ports = ["80"]`, `backend_service = "web" # <-`),
			"forwarding_rule[0].backend_service", `"web" has protocol UDP; a TCP rule needs a backend_service of protocol TCP`, false},
		{"FR7_UDPRulePairsWithUDP", file(hcHTTP, svcWeb, `protocol = "UNSPECIFIED"`, groupA, "[[forwarding_rule]]", `name = "r"`, `ip_address = "192.0.2.1"`,
			`ip_protocol = "UDP"`, `all_ports = true`, `backend_service = "web" # <-`),
			"forwarding_rule[0].backend_service", `"web" has protocol UNSPECIFIED; a UDP rule needs a backend_service of protocol UDP`, false},

		{"FR6_AtMost64SourceRanges", tcp(`ports = ["80"]`, `source_ip_ranges = [`+strings.Repeat(`"10.0.0.0/8", `, 65)+`] # <-`),
			"forwarding_rule[0].source_ip_ranges", "lists 65 ranges; at most 64 are allowed", false},
		{"FR6_SourceRangeSyntax", tcp(`ports = ["80"]`, `source_ip_ranges = ["10.0.0.0/33"] # <-`),
			"forwarding_rule[0].source_ip_ranges[0]", `"10.0.0.0/33" is not an address or a CIDR`, false},
		{"FR6_SourceRangeHostBits", tcp(`ports = ["80"]`, `source_ip_ranges = ["10.0.0.1/8"] # <-`),
			"forwarding_rule[0].source_ip_ranges[0]", "10.0.0.1/8 has host bits set; did you mean 10.0.0.0/8?", false},
		{"FR6_SourceRangeFamily", tcp(`ports = ["80"]`, `source_ip_ranges = ["10.0.0.0/8",`, `"2001:db8::/32"] # <-`),
			"forwarding_rule[0].source_ip_ranges[1]", "2001:db8::/32 is IPv6 but ip_address 192.0.2.1 is IPv4", false},
	})

	t.Run("FR6_SourceRangesUpTo64", func(t *testing.T) {
		cfg := mustParse(t, tcp(`ports = ["80"]`, `source_ip_ranges = [`+strings.Repeat(`"10.0.0.0/8", `, 63)+`"192.0.2.7"]`))
		r := cfg.Rules[0].SourceRanges
		if len(r) != 64 || r[0].String() != "10.0.0.0/8" || r[63].String() != "192.0.2.7/32" {
			t.Errorf("source ranges %v", r)
		}
		cfg = mustParse(t, tcp(`ports = ["80"]`, `source_ip_ranges = []`))
		if cfg.Rules[0].SourceRanges != nil {
			t.Errorf("empty allow-list became %v", cfg.Rules[0].SourceRanges)
		}
	})
	t.Run("FR3_Ports", func(t *testing.T) {
		for _, tc := range []struct {
			line  string
			all   bool
			ports []PortRange
		}{
			{`ports = ["80", "443", "8000-8010"]`, false, []PortRange{{80, 80}, {443, 443}, {8000, 8010}}},
			{`port_range = "8000-8010"`, false, []PortRange{{8000, 8010}}},
			{`port_range = "53"`, false, []PortRange{{53, 53}}},
			{`port_range = "1-65535"`, true, nil},
			{`all_ports = true`, true, nil},
			{`ports = ["1-65535"]`, false, []PortRange{{1, 65535}}},
		} {
			r := mustParse(t, tcp(tc.line)).Rules[0]
			if r.AllPorts != tc.all || fmt.Sprint(r.Ports) != fmt.Sprint(tc.ports) {
				t.Errorf("%s: AllPorts %t, Ports %v", tc.line, r.AllPorts, r.Ports)
			}
		}
	})
}

// TestFR7_NoOverlap checks that two rules of one VIP and protocol never share
// a port, and that other combinations are fine.
func TestFR7_NoOverlap(t *testing.T) {
	services := file(hcHTTP, svcWeb, groupA, "[[backend_service]]", `name = "any"`, `health_checks = ["hc"]`, `protocol = "UNSPECIFIED"`,
		"[[backend_service.backend]]", `group = "a"`, `endpoints = [{ ip = "10.0.0.1" }]`,
		"[[backend_service]]", `name = "dns"`, `health_checks = ["hc"]`, `protocol = "UDP"`,
		"[[backend_service.backend]]", `group = "a"`, `endpoints = [{ ip = "10.0.0.1" }]`)
	// rules is services plus one rule per spec "VIP PROTO service key~=~value...",
	// "~" standing for a blank.
	rules := func(specs ...string) string {
		var b strings.Builder
		b.WriteString(services)
		for i, spec := range specs {
			f := strings.Fields(spec)
			fmt.Fprintf(&b, "[[forwarding_rule]]\nname = \"r%d\"\nip_address = %q\nip_protocol = %q\nbackend_service = %q\n", i, f[0], f[1], f[2])
			for _, kv := range f[3:] {
				b.WriteString(strings.ReplaceAll(kv, "~", " ") + "\n")
			}
		}
		return b.String()
	}
	runErrCases(t, []errCase{
		{"PortInRange", rules(`192.0.2.1 TCP web ports~=~["80"]`, `192.0.2.1 TCP web ports~=~["443",~"70-90"]~#~<-`),
			"forwarding_rule[1].ports[1]", `"70-90" overlaps forwarding_rule[0] ("r0") on 192.0.2.1 TCP`, false},
		{"AllPortsAfterPorts", rules(`192.0.2.1 TCP web ports~=~["80"]`, `192.0.2.1 TCP web all_ports~=~true~#~<-`),
			"forwarding_rule[1].all_ports", `all ports overlaps forwarding_rule[0] ("r0")`, false},
		{"PortsAfterAllPorts", rules(`192.0.2.1 TCP web port_range~=~"1-65535"`, `192.0.2.1 TCP web ports~=~["22"]~#~<-`),
			"forwarding_rule[1].ports[0]", `"22" overlaps forwarding_rule[0] ("r0")`, false},
		{"PortRanges", rules(`192.0.2.1 UDP dns port_range~=~"50-60"`, `192.0.2.1 UDP dns port_range~=~"60-70"~#~<-`),
			"forwarding_rule[1].port_range", `"60-70" overlaps forwarding_rule[0] ("r0") on 192.0.2.1 UDP`, false},
		{"TwoL3Default", rules(`192.0.2.9 L3_DEFAULT any all_ports~=~true`, `192.0.2.9 L3_DEFAULT any all_ports~=~true~#~<-`),
			"forwarding_rule[1].all_ports", `all ports overlaps forwarding_rule[0] ("r0") on 192.0.2.9 L3_DEFAULT`, false},
	})
	// Rules of other VIPs and protocols between those that overlap, and a
	// last rule overlapping two earlier ones: each overlap is reported at
	// the later rule, against every earlier one, in file order.
	t.Run("Interleaved", func(t *testing.T) {
		src := rules(
			`192.0.2.1 TCP web ports~=~["80"]`,
			`192.0.2.2 TCP web ports~=~["80"]`,
			`192.0.2.1 UDP dns ports~=~["80"]`,
			`192.0.2.1 TCP web ports~=~["80-81"]`,
			`192.0.2.2 TCP web ports~=~["443"]`,
			`192.0.2.1 TCP web ports~=~["79-80"]`,
		)
		_, err := Parse("f.toml", []byte(src))
		var es Errors
		if !errors.As(err, &es) {
			t.Fatalf("no errors: %v", err)
		}
		var got []string
		for _, e := range es {
			got = append(got, e.Field+": "+e.Msg)
		}
		want := []string{
			`forwarding_rule[3].ports[0]: "80-81" overlaps forwarding_rule[0] ("r0") on 192.0.2.1 TCP`,
			`forwarding_rule[5].ports[0]: "79-80" overlaps forwarding_rule[0] ("r0") on 192.0.2.1 TCP`,
			`forwarding_rule[5].ports[0]: "79-80" overlaps forwarding_rule[3] ("r3") on 192.0.2.1 TCP`,
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
	t.Run("Disjoint", func(t *testing.T) {
		mustParse(t, rules(
			`192.0.2.1 TCP web ports~=~["80",~"443"]`,
			`192.0.2.1 TCP web ports~=~["81-442"]`,
			`192.0.2.1 UDP dns ports~=~["80"]`,          // other protocol
			`192.0.2.2 TCP web all_ports~=~true`,        // other VIP
			`192.0.2.1 L3_DEFAULT any all_ports~=~true`, // FR2: TCP rules take precedence
		))
	})
}

// TestL2DSRFamilies checks that with L2_DSR an endpoint has the family of
// every VIP of its service, while IPIP and GUE carry either.
func TestL2DSRFamilies(t *testing.T) {
	src := func(method string) string {
		return file(hcHTTP, svcWeb, `forwarding_method = "`+method+`"`, "[[backend_service.backend]]", `group = "a"`,
			`endpoints = [`, `{ ip = "10.0.0.1" },`, `{ ip = "2001:db8::2" }, # <-`, `]`, ruleWeb)
	}
	wantError(t, src("L2_DSR"), "backend_service[0].backend[0].endpoints[1].ip",
		"IPv6 endpoint 2001:db8::2 cannot serve IPv4 VIP 192.0.2.1 of forwarding_rule[0] with forwarding_method L2_DSR", false)
	mustParse(t, src("IPIP"))
	mustParse(t, src("GUE"))
	// Each service is matched against its own rules only, and an error
	// names the first rule of the other family routed to it.
	two := file(hcHTTP, svcWeb, "[[backend_service.backend]]", `group = "a"`, `endpoints = [{ ip = "10.0.0.1" }]`,
		"[[backend_service]]", `name = "v6"`, `health_checks = ["hc"]`, "[[backend_service.backend]]", `group = "b"`,
		`endpoints = [`, `{ ip = "2001:db8::2" }, # <-`, `{ ip = "10.0.0.9" },`, `]`,
		ruleWeb, "[[forwarding_rule]]", `name = "v6a"`, `ip_address = "2001:db8::80"`, `ip_protocol = "TCP"`, `ports = ["80"]`, `backend_service = "v6"`,
		"[[forwarding_rule]]", `name = "v6b"`, `ip_address = "192.0.2.7"`, `ip_protocol = "TCP"`, `ports = ["80"]`, `backend_service = "v6"`,
		"[[forwarding_rule]]", `name = "v6c"`, `ip_address = "192.0.2.8"`, `ip_protocol = "TCP"`, `ports = ["80"]`, `backend_service = "v6"`)
	es := parseErrors(t, two)
	if len(es) != 2 || es[0].Field != "backend_service[1].backend[0].endpoints[0].ip" ||
		es[0].Msg != "IPv6 endpoint 2001:db8::2 cannot serve IPv4 VIP 192.0.2.7 of forwarding_rule[2] with forwarding_method L2_DSR; use IPIP or GUE" ||
		es[1].Msg != "IPv4 endpoint 10.0.0.9 cannot serve IPv6 VIP 2001:db8::80 of forwarding_rule[1] with forwarding_method L2_DSR; use IPIP or GUE" {
		t.Errorf("errors: %v", es)
	}
	// A service no rule routes to has no VIP family to match.
	mustParse(t, file(hcHTTP, svcWeb, "[[backend_service.backend]]", `group = "a"`, `endpoints = [{ ip = "2001:db8::2" }]`))
}

// manyEndpoints lists n endpoints, 10.0.1.0 to 10.0.1.(n-1), inline.
func manyEndpoints(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{ ip = "10.0.1.%d" }, `, i)
	}
	return b.String()
}
