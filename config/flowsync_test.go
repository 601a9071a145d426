package config

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"xlb/internal/nettest"
)

const flowSyncExamplePath = "../testdata/config/flow_sync.toml"

// Two keys, as 64 hex digits, and their bytes.
const (
	keyHex1 = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	keyHex2 = "FFEEDDCCBBAA99887766554433221100ffeeddccbbaa99887766554433221100"
)

func keyBytes(tb testing.TB, h string) [32]byte {
	tb.Helper()
	var k [32]byte
	for i := range k {
		n, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			tb.Fatal(err)
		}
		k[i] = byte(n)
	}
	return k
}

// writeKey writes a key file (mode applied after the write, whatever the
// umask) and returns its path.
func writeKey(tb testing.TB, content string, mode os.FileMode) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "flow-sync.key")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		tb.Fatal(err)
	}
	return path
}

// flowSync is valid with a [flow_sync] of lines after it.
func flowSync(lines ...string) string {
	return valid + file(append([]string{"[flow_sync]"}, lines...)...)
}

func keyLine(path string) string { return fmt.Sprintf("key_file = %q", path) }

func TestFlowSyncDefaults(t *testing.T) {
	if cfg := mustParse(t, valid); cfg.FlowSync != nil {
		t.Errorf("no [flow_sync]: got %+v", cfg.FlowSync)
	}
	key := writeKey(t, keyHex1+"\n", 0o600)
	// This instance is listed among the peers, as in a file every instance
	// shares: it is dropped.
	cfg := mustParse(t, flowSync(`listen = "10.0.0.5:7300"`, `peers = ["10.0.0.5:7300", "10.0.0.6:7300", "10.0.0.7:7301"]`, keyLine(key)))
	want := &FlowSync{
		Listen:      netip.MustParseAddrPort("10.0.0.5:7300"),
		Peers:       []netip.AddrPort{netip.MustParseAddrPort("10.0.0.6:7300"), netip.MustParseAddrPort("10.0.0.7:7301")},
		KeyFile:     key,
		Keys:        [][32]byte{keyBytes(t, keyHex1)},
		PullOnStart: true, PullTimeout: 10 * time.Second, MaxRecordsPerSec: 100000,
	}
	if !reflect.DeepEqual(cfg.FlowSync, want) {
		t.Errorf("got\n%+v\nwant\n%+v", cfg.FlowSync, want)
	}
	const summary = "1 rule on 1 VIP, 1 service, 1 backend (1 primary, 0 failover), 1 health check, flow sync with 2 peers"
	if s := cfg.Summary(); s != summary {
		t.Errorf("Summary() = %q, want %q", s, summary)
	}
}

func TestFlowSyncSettings(t *testing.T) {
	// Two keys (a rollover), CRLF line ends, blank lines and blanks
	// around a key are fine; 0400 is stricter than 0600.
	key := writeKey(t, "\n  "+keyHex1+"\r\n\r\n"+keyHex2, 0o400)
	cfg := mustParse(t, flowSync(`listen = "[fd00::5]:7300"`, `peers = ["[fd00::6]:7300"]`, keyLine(key),
		"pull_on_start = false", "pull_timeout_sec = 600", "max_records_per_sec = 10000000"))
	want := &FlowSync{
		Listen:      netip.MustParseAddrPort("[fd00::5]:7300"),
		Peers:       []netip.AddrPort{netip.MustParseAddrPort("[fd00::6]:7300")},
		KeyFile:     key,
		Keys:        [][32]byte{keyBytes(t, keyHex1), keyBytes(t, keyHex2)},
		PullOnStart: false, PullTimeout: 600 * time.Second, MaxRecordsPerSec: 10000000,
	}
	if !reflect.DeepEqual(cfg.FlowSync, want) {
		t.Errorf("got\n%+v\nwant\n%+v", cfg.FlowSync, want)
	}
	cfg = mustParse(t, flowSync(`listen = "10.0.0.5:7300"`, `peers = ["10.0.0.5:7301"]`, keyLine(key),
		"pull_timeout_sec = 1", "max_records_per_sec = 100"))
	if f := cfg.FlowSync; f.PullTimeout != time.Second || f.MaxRecordsPerSec != 100 || len(f.Peers) != 1 {
		t.Errorf("lower bounds, another port of the same address as a peer: got %+v", f)
	}
}

// TestFlowSyncExample loads the [flow_sync] example of docs/config.md
// after a valid file, with its key file at a path of the test's.
func TestFlowSyncExample(t *testing.T) {
	example, err := os.ReadFile(flowSyncExamplePath)
	if err != nil {
		t.Fatal(err)
	}
	key := writeKey(t, keyHex1+"\n", 0o600)
	const docKey = `"/etc/xlb/flow-sync.key"`
	if !strings.Contains(string(example), docKey) {
		t.Fatalf("%s has no key_file = %s", flowSyncExamplePath, docKey)
	}
	cfg := mustParse(t, valid+strings.Replace(string(example), docKey, strconv.Quote(key), 1))
	want := &FlowSync{
		Listen:      netip.MustParseAddrPort("10.0.0.5:7300"),
		Peers:       []netip.AddrPort{netip.MustParseAddrPort("10.0.0.6:7300"), netip.MustParseAddrPort("10.0.0.7:7300")},
		KeyFile:     key,
		Keys:        [][32]byte{keyBytes(t, keyHex1)},
		PullOnStart: true, PullTimeout: 10 * time.Second, MaxRecordsPerSec: 100000,
	}
	if !reflect.DeepEqual(cfg.FlowSync, want) {
		t.Errorf("got\n%+v\nwant\n%+v", cfg.FlowSync, want)
	}
}

// TestFlowSyncExampleIsDocumented keeps testdata in step with the
// [flow_sync] example of docs/config.md.
func TestFlowSyncExampleIsDocumented(t *testing.T) {
	checkDocumented(t, flowSyncExamplePath, "## `[flow_sync]`")
}

func TestFlowSyncValidation(t *testing.T) {
	key := writeKey(t, keyHex1+"\n", 0o600)
	kl := keyLine(key)
	const listen, peers = `listen = "10.0.0.5:7300"`, `peers = ["10.0.0.6:7300"]`
	withListen := func(v string) string { return flowSync("listen = "+v+" # <-", peers, kl) }
	withPeers := func(v string) string { return flowSync(listen, "peers = "+v+" # <-", kl) }
	runErrCases(t, []errCase{
		{"NotATable", "flow_sync = 1 # <-\n" + valid, "flow_sync", "expected a table, got integer 1", false},
		{"UnknownKey", flowSync(listen, peers, kl, "port = 7300 # <-"), "flow_sync.port", "unknown key", false},
		{"KeyCase", flowSync(listen, peers, kl, "Pull_On_Start = true # <-"), "flow_sync.Pull_On_Start", `unknown key; did you mean "pull_on_start"?`, false},

		{"ListenRequired", valid + file("[flow_sync] # <-", peers, kl), "flow_sync.listen", "required", false},
		{"ListenType", withListen("7300"), "flow_sync.listen", "expected a string, got integer 7300", false},
		{"ListenNoPort", withListen(`"10.0.0.5"`), "flow_sync.listen", `"10.0.0.5" is not an IP address with a port`, false},
		{"ListenName", withListen(`"lb1:7300"`), "flow_sync.listen", `"lb1:7300" is not an IP address with a port`, false},
		{"ListenV6Unbracketed", withListen(`"fd00::5:7300"`), "flow_sync.listen", "is not an IP address with a port", false},
		{"ListenPortZero", withListen(`"10.0.0.5:0"`), "flow_sync.listen", "port 0 is not a port", false},
		{"ListenPortBig", withListen(`"10.0.0.5:65536"`), "flow_sync.listen", "is not an IP address with a port", false},
		{"ListenUnspecified", withListen(`"0.0.0.0:7300"`), "flow_sync.listen", "0.0.0.0 is not a unicast address", false},
		{"ListenMulticast", withListen(`"239.1.1.1:7300"`), "flow_sync.listen", "239.1.1.1 is not a unicast address", false},
		{"ListenZone", withListen(`"[fe80::1%eth0]:7300"`), "flow_sync.listen", "zones are not supported", false},
		{"ListenMapped", withListen(`"[::ffff:10.0.0.5]:7300"`), "flow_sync.listen", "IPv4-mapped", false},
		{"ListenVIP", withListen(`"192.0.2.1:7300"`), "flow_sync.listen", "192.0.2.1 is the VIP of forwarding_rule[0]", false},
		{"ListenAdmin", withListen(`"127.0.0.1:9110"`), "flow_sync.listen", "port 9110 is admin.listen's (127.0.0.1:9110) too", false},
		{"ListenAdminWildcard", file("[admin]", `listen = "0.0.0.0:7300"`) + withListen(`"10.0.0.5:7300"`),
			"flow_sync.listen", "port 7300 is admin.listen's (0.0.0.0:7300) too", false},

		{"PeersRequired", valid + file("[flow_sync] # <-", listen, kl), "flow_sync.peers", "required", false},
		{"PeersType", withPeers(`"10.0.0.6:7300"`), "flow_sync.peers", `expected an array, got string "10.0.0.6:7300"`, false},
		{"PeersEmpty", withPeers(`[]`), "flow_sync.peers", "lists no peer: list the other instances", false},
		{"PeersOnlySelf", withPeers(`["10.0.0.5:7300"]`), "flow_sync.peers", "lists no peer but this instance (listen 10.0.0.5:7300)", false},
		{"PeerType", withPeers(`[7300]`), "flow_sync.peers[0]", "expected a string, got integer 7300", false},
		{"PeerNoPort", withPeers(`["10.0.0.6"]`), "flow_sync.peers[0]", `"10.0.0.6" is not an IP address with a port`, false},
		{"PeerPortZero", withPeers(`["10.0.0.6:0"]`), "flow_sync.peers[0]", "port 0 is not a port", false},
		{"PeerUnspecified", withPeers(`["[::]:7300"]`), "flow_sync.peers[0]", ":: is not a unicast address", false},
		{"PeerFamily", withPeers(`["[fd00::6]:7300"]`), "flow_sync.peers[0]",
			"[fd00::6]:7300 is not of the family of flow_sync.listen 10.0.0.5:7300", false},
		{"PeerDuplicate", flowSync(listen, `peers = ["10.0.0.6:7300",`, `  "10.0.0.6:7300", # <-`, "]", kl),
			"flow_sync.peers[1]", "10.0.0.6:7300 is already listed at flow_sync.peers[0]", false},
		{"SelfTwice", flowSync(listen, `peers = ["10.0.0.5:7300", "10.0.0.6:7300",`, `  "10.0.0.5:7300", # <-`, "]", kl),
			"flow_sync.peers[2]", "10.0.0.5:7300 is already listed at flow_sync.peers[0]", false},
		{"SecondPeerBad", flowSync(listen, `peers = [`, `  "10.0.0.6:7300",`, `  "10.0.0.7", # <-`, "]", kl),
			"flow_sync.peers[1]", `"10.0.0.7" is not an IP address with a port`, false},

		{"KeyFileRequired", valid + file("[flow_sync] # <-", listen, peers), "flow_sync.key_file", "required", false},
		{"KeyFileType", flowSync(listen, peers, "key_file = 1 # <-"), "flow_sync.key_file", "expected a string, got integer 1", false},
		{"KeyFileRelative", flowSync(listen, peers, `key_file = "flow-sync.key" # <-`), "flow_sync.key_file", `"flow-sync.key" is not an absolute path`, false},
		{"KeyFileMissing", flowSync(listen, peers, keyLine(filepath.Join(t.TempDir(), "none"))+" # <-"), "flow_sync.key_file", "no such file or directory", false},
		{"KeyFileDirectory", flowSync(listen, peers, keyLine(t.TempDir())+" # <-"), "flow_sync.key_file", "is not a regular file", false},

		{"PullOnStartType", flowSync(listen, peers, kl, `pull_on_start = "yes" # <-`), "flow_sync.pull_on_start", `expected a boolean, got string "yes"`, false},
		{"PullTimeoutZero", flowSync(listen, peers, kl, "pull_timeout_sec = 0 # <-"), "flow_sync.pull_timeout_sec", "0 is outside [1, 600]", false},
		{"PullTimeoutBig", flowSync(listen, peers, kl, "pull_timeout_sec = 601 # <-"), "flow_sync.pull_timeout_sec", "601 is outside [1, 600]", false},
		{"PullTimeoutType", flowSync(listen, peers, kl, "pull_timeout_sec = 1.5 # <-"), "flow_sync.pull_timeout_sec", "expected an integer, got float 1.5", false},
		{"MaxRecordsSmall", flowSync(listen, peers, kl, "max_records_per_sec = 99 # <-"), "flow_sync.max_records_per_sec", "99 is outside [100, 10000000]", false},
		{"MaxRecordsBig", flowSync(listen, peers, kl, "max_records_per_sec = 10000001 # <-"), "flow_sync.max_records_per_sec", "10000001 is outside [100, 10000000]", false},
	})
}

// TestFlowSyncKeyFile: the key file is a secret of one or two keys of 32
// bytes in hex; its content never appears in a message.
func TestFlowSyncKeyFile(t *testing.T) {
	const listen, peers = `listen = "10.0.0.5:7300"`, `peers = ["10.0.0.6:7300"]`
	notHex := strings.Repeat("g", 64)
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		msg           string
	}{
		{"GroupReadable", keyHex1, 0o640, "is mode 0640: a key must be readable by its owner only"},
		{"OthersReadable", keyHex1, 0o604, "is mode 0604"},
		{"WorldReadable", keyHex1, 0o644, "is mode 0644"},
		{"GroupExecutable", keyHex1, 0o610, "is mode 0610"},
		{"Empty", "", 0o600, "has no key: one line of 64 hex digits (32 bytes) is needed"},
		{"BlankLines", "\n \n\r\n", 0o600, "has no key"},
		{"Short", keyHex1[:62] + "\n", 0o600, "line 1 has 62 characters, not 64 hex digits (32 bytes)"},
		{"Long", keyHex1 + "00\n", 0o600, "line 1 has 66 characters"},
		{"NotHex", notHex + "\n", 0o600, "line 1 is not 64 hex digits (32 bytes)"},
		{"SecondNotHex", keyHex1 + "\n" + notHex + "\n", 0o600, "line 2 is not 64 hex digits"},
		{"Spaced", keyHex1[:32] + " " + keyHex1[32:], 0o600, "line 1 has 65 characters"},
		{"ThreeKeys", keyHex1 + "\n" + keyHex2 + "\n" + strings.Repeat("ab", 32) + "\n", 0o600, "has 3 keys; at most 2"},
		{"SameTwice", keyHex1 + "\n" + strings.ToUpper(keyHex1) + "\n", 0o600, "line 2 repeats the key before it"},
		{"Large", strings.Repeat(keyHex1+"\n", 64), 0o600, "is larger than 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := writeKey(t, tc.content, tc.mode)
			src := flowSync(listen, peers, keyLine(key)+" # <-")
			wantError(t, src, "flow_sync.key_file", key+" "+tc.msg, false)
			msg := parseErrors(t, src).Error()
			for _, secret := range []string{keyHex1[:16], keyHex2[:16], notHex[:16]} {
				if strings.Contains(strings.ToLower(msg), strings.ToLower(secret)) {
					t.Errorf("the message shows the key file's content: %s", msg)
				}
			}
		})
	}
}

// TestFlowSyncKeyFileOwner: loaded by root, a key file must be root's, or
// the user's of dataplane.user, who reads it again on every reload.
func TestFlowSyncKeyFileOwner(t *testing.T) {
	nettest.RequireRootTo(t, "give the key file to another user")
	key := writeKey(t, keyHex1+"\n", 0o600)
	if err := os.Chown(key, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	src := flowSync(`listen = "10.0.0.5:7300"`, `peers = ["10.0.0.6:7300"]`, keyLine(key)+" # <-")
	wantError(t, src, "flow_sync.key_file", key+" is owned by uid 65534; a key must be owned by root", false)
	cfg := mustParse(t, file("[dataplane]", `user = "65534"`)+src)
	if len(cfg.FlowSync.Keys) != 1 {
		t.Errorf("a key of dataplane.user's: got %+v", cfg.FlowSync)
	}
	wantError(t, file("[dataplane]", `user = "65533"`)+src, "flow_sync.key_file",
		key+" is owned by uid 65534; a key must be owned by root or uid 65533", false)
	if err := os.Chown(key, 0, 0); err != nil {
		t.Fatal(err)
	}
	mustParse(t, file("[dataplane]", `user = "65534"`)+src)
}

// TestFlowSyncErrorText checks a whole message as `xlb check` prints it.
func TestFlowSyncErrorText(t *testing.T) {
	key := writeKey(t, keyHex1+"\n", 0o644)
	src := flowSync(`listen = "10.0.0.5:7300"`, `peers = ["10.0.0.6:7300"]`, keyLine(key)+" # <-")
	es := parseErrors(t, src)
	want := "test.toml:" + strconv.Itoa(markedLine(src)) + ": flow_sync.key_file: " + key +
		" is mode 0644: a key must be readable by its owner only (chmod 0600 it)"
	if len(es) != 1 || es.Error() != want {
		t.Errorf("got %q, want %q", es.Error(), want)
	}
}

func TestFlowSyncRestartFields(t *testing.T) {
	base := func() *FlowSync {
		return &FlowSync{Listen: netip.MustParseAddrPort("10.0.0.5:7300"),
			Peers: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.6:7300")}, KeyFile: "/k",
			Keys: [][32]byte{{1}}, PullOnStart: true, PullTimeout: 10 * time.Second, MaxRecordsPerSec: 100000}
	}
	for _, tc := range []struct {
		name     string
		old, cfg *FlowSync
		want     []string
	}{
		{"NeitherHasFlowSync", nil, nil, nil},
		{"Same", base(), base(), nil},
		{"Added", nil, base(), []string{"flow_sync"}},
		{"Removed", base(), nil, []string{"flow_sync"}},
		{"Listen", base(), func() *FlowSync { f := base(); f.Listen = netip.MustParseAddrPort("10.0.0.5:7301"); return f }(),
			[]string{"flow_sync.listen"}},
		{"ReloadableSettings", base(), func() *FlowSync {
			f := base()
			f.Peers = append(f.Peers, netip.MustParseAddrPort("10.0.0.7:7300"))
			f.KeyFile, f.Keys = "/k2", [][32]byte{{2}, {1}}
			f.PullOnStart, f.PullTimeout, f.MaxRecordsPerSec = false, time.Second, 100
			return f
		}(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FlowSyncRestartFields(tc.old, tc.cfg); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
