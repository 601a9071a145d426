package config

import (
	"slices"
	"strings"
	"testing"
)

// TestDiff: rules, checks, services and backends added, removed and
// changed, each as one line naming it, in the documented order; the
// reverse diff swaps added and removed; a file against itself is no
// change.
func TestDiff(t *testing.T) {
	f := testdataArchive(t, "diff.txtar", "old.toml", "next.toml")
	diffOld, diffNext := f[0], f[1]
	old, next := mustParse(t, diffOld), mustParse(t, diffNext)
	want := []string{
		"removed rule dns-udp: 203.0.113.10 UDP 53 -> dns",
		"changed rule web-tcp: ports 80 -> 80,8000-8080",
		"added rule api-tcp: 203.0.113.20 TCP 443 from 198.51.100.0/24 -> api",
		"changed health_check hc: check_interval_sec 5 -> 10",
		"removed service dns: UDP, MAGLEV, 1 backend",
		"changed service web: connection_draining_timeout_sec 0 -> 30",
		"added service api: TCP, MAGLEV, 2 backends",
		"removed backend web/b2: 10.0.1.2 in a",
		"removed backend dns/10.0.4.1: in d",
		"changed backend web/b1: group a -> b",
		"added backend web/b3: 10.0.1.3 in a",
		"added backend api/a1: 10.0.2.1 in p",
		"added backend api/a2: 10.0.2.2 in s (failover)",
		"added [bgp]",
	}
	cs := Diff(old, next)
	if got := cs.Lines(); !slices.Equal(got, want) {
		t.Errorf("Diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := cs.Names(Removed, KindRule); !slices.Equal(got, []string{"dns-udp"}) {
		t.Errorf("removed rules %v", got)
	}
	if got := cs.Names(Removed, KindService); !slices.Equal(got, []string{"dns"}) {
		t.Errorf("removed services %v", got)
	}
	if got := cs.Names(Added, KindBackend); !slices.Equal(got, []string{"web/b3", "api/a1", "api/a2"}) {
		t.Errorf("added backends %v", got)
	}

	back := Diff(next, old)
	for _, c := range []string{"added rule dns-udp: 203.0.113.10 UDP 53 -> dns", "removed rule api-tcp: 203.0.113.20 TCP 443 from 198.51.100.0/24 -> api",
		"changed rule web-tcp: ports 80,8000-8080 -> 80", "added backend web/b2: 10.0.1.2 in a", "removed backend api/a2: 10.0.2.2 in s (failover)",
		"removed [bgp]"} {
		if !slices.Contains(back.Lines(), c) {
			t.Errorf("reverse diff lacks %q:\n%s", c, back)
		}
	}
	if same := Diff(old, mustParse(t, diffOld)); len(same) != 0 || same.String() != "no changes" {
		t.Errorf("a file against itself: %q", same.Lines())
	}
}

// TestDiff_Changed: a rule's address, protocol, ports and source
// ranges; a backend's name at the same address (the same backend,
// renamed) and its MAC; a service's policies; [bgp] edited. A backend
// whose address changes is one removed and one added.
func TestDiff_Changed(t *testing.T) {
	bgp := func(neighbor string) string {
		return "[bgp]\nasn = 65010\n[[bgp.neighbor]]\naddress = \"" + neighbor + "\"\nasn = 65000\n"
	}
	diffOld := testdataArchive(t, "diff.txtar", "old.toml")[0]
	old := mustParse(t, diffOld+bgp("10.0.0.1"))
	text := strings.NewReplacer(
		`{ name = "b1", ip = "10.0.1.1" }`, `{ name = "web1", ip = "10.0.1.1", mac = "02:00:00:00:00:01" }`,
		`{ name = "b2", ip = "10.0.1.2" }`, `{ name = "b2", ip = "10.0.1.22" }`,
		"name = \"web\"\nhealth_checks", "name = \"web\"\nlocality_lb_policy = \"WEIGHTED_MAGLEV\"\nsession_affinity = \"CLIENT_IP\"\nhealth_checks",
		`protocol = "UDP"`, `protocol = "UNSPECIFIED"`,
		"ip_protocol = \"UDP\"\nports = [\"53\"]", "ip_protocol = \"L3_DEFAULT\"\nall_ports = true",
		"ip_address = \"203.0.113.10\"\nip_protocol = \"TCP\"", "ip_address = \"203.0.113.11\"\nsource_ip_ranges = [\"10.0.0.0/8\", \"192.168.0.0/16\"]\nip_protocol = \"TCP\"",
	).Replace(diffOld) + bgp("10.0.0.2")
	next := mustParse(t, text)
	want := []string{
		"changed rule web-tcp: ip_address 203.0.113.10 -> 203.0.113.11, source_ip_ranges any -> 10.0.0.0/8,192.168.0.0/16",
		"changed rule dns-udp: ip_protocol UDP -> L3_DEFAULT, ports 53 -> all ports",
		"changed service web: session_affinity NONE -> CLIENT_IP, locality_lb_policy MAGLEV -> WEIGHTED_MAGLEV",
		"changed service dns: protocol UDP -> UNSPECIFIED",
		"removed backend web/b2: 10.0.1.2 in a",
		"changed backend web/web1: name b1 -> web1, mac resolved -> 02:00:00:00:00:01",
		"added backend web/b2: 10.0.1.22 in a",
		"changed [bgp]",
	}
	if got := Diff(old, next).Lines(); !slices.Equal(got, want) {
		t.Errorf("Diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
