package config

import (
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const bgpExamplePath = "../testdata/config/bgp.toml"

// TestBGPExample loads the [bgp] example of docs/config.md after a valid file.
func TestBGPExample(t *testing.T) {
	example, err := os.ReadFile(bgpExamplePath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustParse(t, valid+string(example))
	want := &BGP{
		ASN: 65010, RouterID: netip.MustParseAddr("10.0.0.5"),
		HoldTime: 9 * time.Second, GracefulShutdown: 5 * time.Second, Announce: AnnounceWhenHealthy,
		Neighbors: []BGPNeighbor{{Address: netip.MustParseAddr("10.0.0.1"), ASN: 65000, Port: 179}},
	}
	if !reflect.DeepEqual(cfg.BGP, want) {
		t.Errorf("got\n%+v\nwant\n%+v", cfg.BGP, want)
	}
	const summary = "1 rule on 1 VIP, 1 service, 1 backend (1 primary, 0 failover), 1 health check, BGP AS 65010 with 1 neighbor"
	if s := cfg.Summary(); s != summary {
		t.Errorf("Summary() = %q, want %q", s, summary)
	}
}

// TestBGPExampleIsDocumented keeps testdata in step with the [bgp] example
// of docs/config.md (the first toml block after its [bgp] heading).
func TestBGPExampleIsDocumented(t *testing.T) {
	checkDocumented(t, bgpExamplePath, "## `[bgp]`")
}

func TestBGPDefaults(t *testing.T) {
	if cfg := mustParse(t, valid); cfg.BGP != nil {
		t.Errorf("no [bgp]: got %+v", cfg.BGP)
	}
	cfg := mustParse(t, valid+file("[bgp]", "asn = 65010", "[[bgp.neighbor]]", `address = "fd00::1"`, "asn = 4200000000"))
	want := &BGP{
		ASN: 65010, HoldTime: 9 * time.Second, GracefulShutdown: 5 * time.Second, Announce: AnnounceWhenHealthy,
		Neighbors: []BGPNeighbor{{Address: netip.MustParseAddr("fd00::1"), ASN: 4200000000, Port: 179}},
	}
	if !reflect.DeepEqual(cfg.BGP, want) {
		t.Errorf("got\n%+v\nwant\n%+v", cfg.BGP, want)
	}
	// No neighbor at all is valid: a reload may take the last one away.
	cfg = mustParse(t, valid+file("[bgp]", "asn = 1"))
	if cfg.BGP == nil || len(cfg.BGP.Neighbors) != 0 || cfg.BGP.RouterID.IsValid() {
		t.Errorf("got %+v", cfg.BGP)
	}
}

func TestBGPSettings(t *testing.T) {
	cfg := mustParse(t, valid+file("[bgp]", "asn = 4294967295", `router_id = "192.0.2.9"`, "hold_time_sec = 3",
		"graceful_shutdown_sec = 0", `announce = "always"`,
		"[[bgp.neighbor]]", `address = "10.0.0.1"`, "asn = 65000", "port = 1790", `password = "s3cret pass"`, "multihop_ttl = 255",
		"[[bgp.neighbor]]", `address = "10.0.0.2"`, "asn = 4294967295"))
	want := &BGP{
		ASN: 4294967295, RouterID: netip.MustParseAddr("192.0.2.9"),
		HoldTime: 3 * time.Second, GracefulShutdown: 0, Announce: AnnounceAlways,
		Neighbors: []BGPNeighbor{
			{Address: netip.MustParseAddr("10.0.0.1"), ASN: 65000, Port: 1790, Password: "s3cret pass", MultihopTTL: 255},
			{Address: netip.MustParseAddr("10.0.0.2"), ASN: 4294967295, Port: 179}, // iBGP
		},
	}
	if !reflect.DeepEqual(cfg.BGP, want) {
		t.Errorf("got\n%+v\nwant\n%+v", cfg.BGP, want)
	}
	cfg = mustParse(t, valid+file("[bgp]", "asn = 1", "hold_time_sec = 65535", "graceful_shutdown_sec = 300",
		`neighbor = [{ address = "10.0.0.1", asn = 2, password = "`+strings.Repeat("k", 80)+`" }]`))
	if b := cfg.BGP; b.HoldTime != 65535*time.Second || b.GracefulShutdown != 300*time.Second || len(b.Neighbors[0].Password) != 80 {
		t.Errorf("bounds: got %+v", b)
	}
}

func TestBGPValidation(t *testing.T) {
	bgp := func(lines ...string) string {
		return valid + file(append([]string{"[bgp]"}, lines...)...)
	}
	nb := func(lines ...string) string {
		return bgp(append([]string{"asn = 65010", "[[bgp.neighbor]]"}, lines...)...)
	}
	runErrCases(t, []errCase{
		{"ASNRequired", valid + "[bgp] # <-\n", "bgp.asn", "required", false},
		{"ASNZero", bgp("asn = 0 # <-"), "bgp.asn", "0 is outside [1, 4294967295]", false},
		{"ASNTooBig", bgp("asn = 4294967296 # <-"), "bgp.asn", "4294967296 is outside [1, 4294967295]", false},
		{"ASNType", bgp(`asn = "65010" # <-`), "bgp.asn", `expected an integer, got string "65010"`, false},
		{"RouterIDv6", bgp("asn = 1", `router_id = "fd00::1" # <-`), "bgp.router_id", `"fd00::1" is not an IPv4 address`, false},
		{"RouterIDWord", bgp("asn = 1", `router_id = "eth0" # <-`), "bgp.router_id", `"eth0" is not an IPv4 address`, false},
		{"RouterIDZero", bgp("asn = 1", `router_id = "0.0.0.0" # <-`), "bgp.router_id", "0.0.0.0 is not a valid BGP identifier", false},
		{"RouterIDType", bgp("asn = 1", `router_id = 167772165 # <-`), "bgp.router_id", "expected a string, got integer 167772165", false},
		{"HoldTimeSmall", bgp("asn = 1", "hold_time_sec = 2 # <-"), "bgp.hold_time_sec", "2 is outside [3, 65535]", false},
		{"HoldTimeZero", bgp("asn = 1", "hold_time_sec = 0 # <-"), "bgp.hold_time_sec", "0 is outside [3, 65535]", false},
		{"HoldTimeBig", bgp("asn = 1", "hold_time_sec = 65536 # <-"), "bgp.hold_time_sec", "65536 is outside [3, 65535]", false},
		{"GracefulNegative", bgp("asn = 1", "graceful_shutdown_sec = -1 # <-"), "bgp.graceful_shutdown_sec", "-1 is outside [0, 300]", false},
		{"GracefulBig", bgp("asn = 1", "graceful_shutdown_sec = 301 # <-"), "bgp.graceful_shutdown_sec", "301 is outside [0, 300]", false},
		{"Announce", bgp("asn = 1", `announce = "when_healthy" # <-`), "bgp.announce", `"when_healthy" is not one of when-healthy, always`, false},
		{"UnknownKey", bgp("asn = 1", "local_pref = 100 # <-"), "bgp.local_pref", "unknown key", false},
		{"NotATable", "bgp = 65010 # <-\n" + valid, "bgp", "expected a table, got integer 65010", false},
		{"NeighborsNotTables", bgp("asn = 1", `neighbor = ["10.0.0.1"] # <-`), "bgp.neighbor", "expected an array of tables, got array", false},

		{"NeighborAddressRequired", bgp("asn = 65010", "[[bgp.neighbor]] # <-", "asn = 65000"), "bgp.neighbor[0].address", "required", false},
		{"NeighborAddress", nb(`address = "router1" # <-`, "asn = 65000"), "bgp.neighbor[0].address", `"router1" is not an IP address`, false},
		{"NeighborAddressZone", nb(`address = "fe80::1%eth0" # <-`, "asn = 65000"), "bgp.neighbor[0].address", "zones are not supported", false},
		{"NeighborAddressMapped", nb(`address = "::ffff:10.0.0.1" # <-`, "asn = 65000"), "bgp.neighbor[0].address", "IPv4-mapped", false},
		{"NeighborAddressUnique", nb(`address = "10.0.0.1"`, "asn = 65000", "[[bgp.neighbor]]", `address = "10.0.0.1" # <-`, "asn = 65001"),
			"bgp.neighbor[1].address", "10.0.0.1 is already the address of bgp.neighbor[0]", false},
		{"NeighborAddressUniqueV6", nb(`address = "fd00::1"`, "asn = 65000", "[[bgp.neighbor]]", `address = "fd00:0::1" # <-`, "asn = 65001"),
			"bgp.neighbor[1].address", "fd00::1 is already the address of bgp.neighbor[0]", false},
		{"NeighborASNRequired", bgp("asn = 65010", "[[bgp.neighbor]] # <-", `address = "10.0.0.1"`), "bgp.neighbor[0].asn", "required", false},
		{"NeighborASNZero", nb(`address = "10.0.0.1"`, "asn = 0 # <-"), "bgp.neighbor[0].asn", "0 is outside [1, 4294967295]", false},
		{"NeighborPortZero", nb(`address = "10.0.0.1"`, "asn = 65000", "port = 0 # <-"), "bgp.neighbor[0].port", "0 is outside [1, 65535]", false},
		{"NeighborPortBig", nb(`address = "10.0.0.1"`, "asn = 65000", "port = 65536 # <-"), "bgp.neighbor[0].port", "65536 is outside [1, 65535]", false},
		{"NeighborPasswordType", nb(`address = "10.0.0.1"`, "asn = 65000", "password = 1234 # <-"), "bgp.neighbor[0].password", "expected a string, got integer 1234", false},
		{"NeighborPasswordLong", nb(`address = "10.0.0.1"`, "asn = 65000", `password = "`+strings.Repeat("k", 81)+`" # <-`),
			"bgp.neighbor[0].password", "is 81 bytes long; TCP MD5 keys have at most 80", false},
		{"NeighborTTLBig", nb(`address = "10.0.0.1"`, "asn = 65000", "multihop_ttl = 256 # <-"), "bgp.neighbor[0].multihop_ttl", "256 is outside [0, 255]", false},
		{"NeighborTTLNegative", nb(`address = "10.0.0.1"`, "asn = 65000", "multihop_ttl = -1 # <-"), "bgp.neighbor[0].multihop_ttl", "-1 is outside [0, 255]", false},
		{"NeighborTTLOnIBGP", nb(`address = "10.0.0.1"`, "asn = 65010", "multihop_ttl = 2 # <-"),
			"bgp.neighbor[0].multihop_ttl", "applies only to eBGP neighbors; asn 65010 is bgp.asn", false},
		{"NeighborUnknownKey", nb(`address = "10.0.0.1"`, "asn = 65000", "remote_as = 65000 # <-"), "bgp.neighbor[0].remote_as", "unknown key", false},
		{"SecondNeighborInline", bgp("asn = 65010", "neighbor = [", `  { address = "10.0.0.1", asn = 65000 },`,
			`  { address = "10.0.0.2", asn = 65000, port = 0 }, # <-`, "]"), "bgp.neighbor[1].port", "0 is outside [1, 65535]", false},
	})
}

// TestBGPErrorText checks a whole message as `xlb check` prints it.
func TestBGPErrorText(t *testing.T) {
	src := valid + file("[bgp]", "asn = 65010", "[[bgp.neighbor]]", `address = "10.0.0.1"`, "asn = 65000", "",
		"[[bgp.neighbor]]", `address = "10.0.0.1" # <-`, "asn = 65001")
	es := parseErrors(t, src)
	line := markedLine(src)
	want := "test.toml:" + strconv.Itoa(line) + ": bgp.neighbor[1].address: 10.0.0.1 is already the address of bgp.neighbor[0]"
	if len(es) != 1 || es.Error() != want {
		t.Errorf("got %q, want %q", es.Error(), want)
	}
}

func TestBGPRestartFields(t *testing.T) {
	base := func() *BGP {
		return &BGP{ASN: 65010, RouterID: netip.MustParseAddr("10.0.0.5"), HoldTime: 9 * time.Second,
			GracefulShutdown: 5 * time.Second,
			Neighbors:        []BGPNeighbor{{Address: netip.MustParseAddr("10.0.0.1"), ASN: 65000, Port: 179}}}
	}
	for _, tc := range []struct {
		name     string
		old, cfg *BGP
		want     []string
	}{
		{"NeitherHasBGP", nil, nil, nil},
		{"Same", base(), base(), nil},
		{"Added", nil, base(), []string{"bgp"}},
		{"Removed", base(), nil, []string{"bgp"}},
		{"ASN", base(), func() *BGP { b := base(); b.ASN = 65011; return b }(), []string{"bgp.asn"}},
		{"RouterID", base(), func() *BGP { b := base(); b.RouterID = netip.Addr{}; return b }(), []string{"bgp.router_id"}},
		{"Both", base(), func() *BGP { b := base(); b.ASN = 1; b.RouterID = netip.MustParseAddr("10.0.0.6"); return b }(),
			[]string{"bgp.asn", "bgp.router_id"}},
		{"ReloadableSettings", base(), func() *BGP {
			b := base()
			b.HoldTime, b.GracefulShutdown, b.Announce = 30*time.Second, 0, AnnounceAlways
			b.Neighbors = append(b.Neighbors, BGPNeighbor{Address: netip.MustParseAddr("fd00::1"), ASN: 65001, Port: 179})
			b.Neighbors[0].Password = "x"
			return b
		}(), nil},
		{"NeighborsRemoved", base(), func() *BGP { b := base(); b.Neighbors = nil; return b }(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := BGPRestartFields(tc.old, tc.cfg); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
