package config

import (
	"bytes"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

const quicLBExamplePath = "../testdata/config/quic_lb.toml"

// TestQUICLBExampleIsDocumented keeps testdata in step with the QUIC-LB
// example of docs/config.md.
func TestQUICLBExampleIsDocumented(t *testing.T) {
	checkDocumented(t, quicLBExamplePath, "### `[[backend_service.quic_lb]]`")
}

// TestQUICLBExample loads the example, its key file at a path of the
// test's: two configurations, the first encrypted, and the endpoints'
// server IDs (one endpoint without).
func TestQUICLBExample(t *testing.T) {
	example, err := os.ReadFile(quicLBExamplePath)
	if err != nil {
		t.Fatal(err)
	}
	key := writeKey(t, "000102030405060708090a0b0c0d0e0f\n", 0o600)
	const docKey = `"/etc/xlb/quic-lb-0.key"`
	if !bytes.Contains(example, []byte(docKey)) {
		t.Fatalf("%s has no key_file = %s", quicLBExamplePath, docKey)
	}
	cfg := mustParse(t, strings.Replace(string(example), docKey, strconv.Quote(key), 1))
	s := cfg.Services[0]
	want := []QUICLB{
		{Rotation: 0, ServerIDLen: 2, NonceLen: 6, KeyFile: key, Key: []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
		{Rotation: 1, ServerIDLen: 2, NonceLen: 8},
	}
	if !reflect.DeepEqual(s.QUICLB, want) {
		t.Errorf("quic_lb = %+v, want %+v", s.QUICLB, want)
	}
	ids := []string{}
	for _, e := range s.Groups[0].Endpoints {
		ids = append(ids, e.Name+"="+strconv.Quote(string(e.ServerID)))
	}
	if got := strings.Join(ids, " "); got != `q1="\x00\x01" q2="\x00\x02" q3=""` {
		t.Errorf("server IDs: %s", got)
	}
	// xlb run takes it: the data plane routes by connection ID.
	cfg.Dataplane.Interface = "eth1"
	if err := cfg.ValidateForRun(); err != nil {
		t.Errorf("ValidateForRun = %v, want nil", err)
	}
}

// TestQUICLBValidation: every rule of [[backend_service.quic_lb]] and of
// server_id, with the field and the line it is reported at.
func TestQUICLBValidation(t *testing.T) {
	const udpSvc = `
[[backend_service]]
name = "web"
protocol = "UDP"
health_checks = ["hc"]`
	const udpRule = `
[[forwarding_rule]]
name = "r"
ip_address = "192.0.2.1"
ip_protocol = "UDP"
ports = ["443"]
backend_service = "web"`
	conf := func(lines ...string) string {
		return file(append([]string{"  [[backend_service.quic_lb]]"}, lines...)...)
	}
	// marked puts the marker on a configuration's table header, where an
	// error about the whole table points.
	marked := func(c string) string {
		return strings.Replace(c, "[[backend_service.quic_lb]]", "[[backend_service.quic_lb]] # <-", 1)
	}
	good := conf("config_rotation = 0", "server_id_length = 2", "nonce_length = 6")
	eps := func(list string) string {
		return file("  [[backend_service.backend]]", `  group = "a"`, "  endpoints = [", "    "+list, "  ]")
	}
	udp := func(parts ...string) string {
		return file(append(append([]string{hcHTTP, udpSvc}, parts...), udpRule)...)
	}
	goodKey := writeKey(t, "000102030405060708090a0b0c0d0e0f\n", 0o600)
	shortKey := writeKey(t, "0001\n", 0o600)
	openKey := writeKey(t, "000102030405060708090a0b0c0d0e0f\n", 0o644)
	keyed := func(path string) string {
		return conf("config_rotation = 0", "server_id_length = 2", "nonce_length = 6", "key_file = "+strconv.Quote(path)+" # <-")
	}
	runErrCases(t, []errCase{
		{"TCPService", file(hcHTTP, svcWeb, marked(good), groupA, ruleWeb), "backend_service[0].quic_lb", "QUIC-LB applies to UDP services only, not TCP", false},
		{"RotationRequired", udp(marked(conf("server_id_length = 2", "nonce_length = 6")), eps(`{ ip = "10.0.0.1" }`)), "backend_service[0].quic_lb[0].config_rotation", "required", false},
		{"RotationSeven", udp(conf("config_rotation = 7 # <-", "server_id_length = 2", "nonce_length = 6"), eps(`{ ip = "10.0.0.1" }`)),
			"backend_service[0].quic_lb[0].config_rotation", "7 is outside [0, 6]", false},
		{"RotationTwice", udp(good, conf("config_rotation = 0 # <-", "server_id_length = 2", "nonce_length = 8"), eps(`{ ip = "10.0.0.1" }`)),
			"backend_service[0].quic_lb[1].config_rotation", "0 is already the config rotation of backend_service[0].quic_lb[0]", false},
		{"ThreeConfigs", udp(marked(good), conf("config_rotation = 1", "server_id_length = 2", "nonce_length = 6"),
			conf("config_rotation = 2", "server_id_length = 2", "nonce_length = 6"), eps(`{ ip = "10.0.0.1" }`)),
			"backend_service[0].quic_lb", "has 3 configurations; at most 2", false},
		{"ServerIDLengthZero", udp(conf("config_rotation = 0", "server_id_length = 0 # <-", "nonce_length = 6"), eps(`{ ip = "10.0.0.1" }`)),
			"backend_service[0].quic_lb[0].server_id_length", "0 is outside [1, 15]", false},
		{"NonceShort", udp(conf("config_rotation = 0", "server_id_length = 2", "nonce_length = 3 # <-"), eps(`{ ip = "10.0.0.1" }`)),
			"backend_service[0].quic_lb[0].nonce_length", "3 is outside [4, 18]", false},
		{"BlockTooLong", udp(conf("config_rotation = 0", "server_id_length = 10", "nonce_length = 10 # <-"), eps(`{ ip = "10.0.0.1" }`)),
			"backend_service[0].quic_lb[0].nonce_length", "server_id_length 10 + nonce_length 10 is 20; QUIC's 20-octet connection IDs allow at most 19", false},
		{"ServerIDLengthsDiffer", udp(good, conf("config_rotation = 1", "server_id_length = 3 # <-", "nonce_length = 6"), eps(`{ ip = "10.0.0.1" }`)),
			"backend_service[0].quic_lb[1].server_id_length", "3 differs from backend_service[0].quic_lb[0]'s 2", false},
		{"KeyFileShort", udp(keyed(shortKey), eps(`{ ip = "10.0.0.1" }`)),
			"backend_service[0].quic_lb[0].key_file", "does not hold one line of 32 hex digits", false},
		{"KeyFileReadable", udp(keyed(openKey), eps(`{ ip = "10.0.0.1" }`)),
			"backend_service[0].quic_lb[0].key_file", "is mode 0644: a key must be readable by its owner only", false},
		{"KeyFileRelative", udp(keyed("quic.key"), eps(`{ ip = "10.0.0.1" }`)),
			"backend_service[0].quic_lb[0].key_file", `"quic.key" is not an absolute path`, false},
		{"UnknownKey", udp(conf("config_rotation = 0", "server_id_length = 2", "nonce_length = 6", "key = \"00\" # <-"), eps(`{ ip = "10.0.0.1" }`)),
			"backend_service[0].quic_lb[0].key", "unknown key", false},
		{"ServerIDWithoutQUICLB", file(hcHTTP, svcWeb, eps(`{ ip = "10.0.0.1", server_id = "0001" } # <-`), ruleWeb),
			"backend_service[0].backend[0].endpoints[0].server_id", "applies only to a service with [[backend_service.quic_lb]]", false},
		{"ServerIDNotHex", udp(good, eps(`{ ip = "10.0.0.1", server_id = "zz01" } # <-`)),
			"backend_service[0].backend[0].endpoints[0].server_id", `"zz01" is not a server ID in hex`, false},
		{"ServerIDLength", udp(good, eps(`{ ip = "10.0.0.1", server_id = "000102" } # <-`)),
			"backend_service[0].backend[0].endpoints[0].server_id", "has 3 octets; server_id_length is 2", false},
		{"ServerIDTwice", udp(good, eps(`{ ip = "10.0.0.1", server_id = "0001" }, { ip = "10.0.0.2", server_id = "0001" }, # <-`)),
			"backend_service[0].backend[0].endpoints[1].server_id", "0001 is already the server ID of backend_service[0].backend[0].endpoints[0]", false},
		{"ServerIDType", udp(good, eps(`{ ip = "10.0.0.1", server_id = 1 } # <-`)),
			"backend_service[0].backend[0].endpoints[0].server_id", "expected a string, got integer 1", false},
	})
	// The largest shape and an encrypted one pass.
	cfg := mustParse(t, udp(conf("config_rotation = 6", "server_id_length = 15", "nonce_length = 4"),
		eps(`{ ip = "10.0.0.1", server_id = "000102030405060708090a0b0c0d0e" }`)))
	if q := cfg.Services[0].QUICLB; len(q) != 1 || q[0].Rotation != 6 || q[0].ServerIDLen != 15 {
		t.Errorf("largest shape: %+v", q)
	}
	cfg = mustParse(t, strings.Replace(udp(keyed(goodKey), eps(`{ ip = "10.0.0.1", server_id = "0a0b" }`)), " # <-", "", 1))
	if q := cfg.Services[0].QUICLB[0]; len(q.Key) != 16 || q.KeyFile != goodKey {
		t.Errorf("keyed: %+v", q)
	}
}
