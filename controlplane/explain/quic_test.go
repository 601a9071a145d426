package explain_test

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"xlb/controlplane/cptest"
	"xlb/controlplane/explain"
)

// TestX4_ExplainQUICConnectionID: for a UDP packet of a service with
// QUIC-LB, explain shows the QUIC packet, the configuration its connection
// ID names, the decoded server ID and why it was or was not used, and
// decides as the engine does (the rig, same packet).
func TestX4_ExplainQUICConnectionID(t *testing.T) {
	text := cptest.QUICText(t, 8) // rotation 2: the four-pass construction
	cfg := cptest.Config(t, text)
	plain, enc := cptest.QUICConfigs(t, 8)
	hexID := func(b []byte) string { return hex.EncodeToString(b) }
	for _, tc := range []struct {
		name, dcid, typ, unhealthy string
		outcome, serverID, config  string
		backend                    string // "": any by the usual path, not the unhealthy one
		why                        string
	}{
		{"plaintext", hexID(cptest.QUICCID(t, plain, "0001", 1)), "short", "", "routed", "0001", "plaintext", "q1", "is q1's"},
		{"four-pass", hexID(cptest.QUICCID(t, enc, "0003", 2)), "handshake", "", "routed", "0003", "AES four-pass", "q3", "is q3's"},
		{"unhealthy", hexID(cptest.QUICCID(t, enc, "0002", 3)), "short", "q2", "backend_unavailable", "0002", "AES four-pass", "", "unhealthy"},
		{"Initial", hexID(cptest.QUICCID(t, plain, "0001", 4)), "initial", "", "client_chosen", "", "", "", "Initial"},
		{"unknown server ID", hexID(cptest.QUICCID(t, plain, "0009", 5)), "short", "", "unknown_server_id", "0009", "plaintext", "", "server ID 0009"},
		{"unroutable", "e8000102030405060708", "short", "", "unroutable", "", "", "", "0b111"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := explain.Args{Src: "198.51.100.7", Dst: "203.0.113.10", Proto: "udp", Sport: 4000, Dport: 443,
				SportSet: true, DportSet: true, QUICDCID: tc.dcid, QUICType: tc.typ, Unhealthy: tc.unhealthy}
			req, err := a.Request()
			if err != nil {
				t.Fatal(err)
			}
			rep, err := explain.Explain(cfg, req)
			if err != nil {
				t.Fatal(err)
			}
			q := rep.QUIC
			if q == nil || q.Outcome != tc.outcome || q.ServerID != tc.serverID || !strings.Contains(q.Config, tc.config) ||
				!strings.Contains(q.Why, tc.why) {
				t.Fatalf("quic %+v; want outcome %s, server ID %q, config %q, why with %q", q, tc.outcome, tc.serverID, tc.config, tc.why)
			}
			if !strings.Contains(rep.Packet, "QUIC "+tc.typ+" packet to connection ID "+tc.dcid) {
				t.Errorf("packet %q does not describe the QUIC packet", rep.Packet)
			}
			switch {
			case tc.backend != "" && rep.Backend != tc.backend:
				t.Errorf("backend %s, want %s", rep.Backend, tc.backend)
			case tc.backend == "" && (rep.Backend == "" || rep.Backend == tc.unhealthy):
				t.Errorf("backend %q, want one by the usual path", rep.Backend)
			}
			if routed := tc.outcome == "routed"; routed != (rep.MaglevSlot == nil) || routed != strings.HasPrefix(rep.Step1, "QUIC-LB") {
				t.Errorf("routed %v: maglev slot %v, step 1 %q", routed, rep.MaglevSlot, rep.Step1)
			}

			// The engine, fed the same frame, agrees.
			r := cptest.New(t, text)
			if tc.unhealthy != "" {
				r.Health(tc.unhealthy, false)
			}
			res := r.Send(req.Packet)
			if res.BackendName() != rep.Backend || res.CID.Outcome.String() != q.Outcome {
				t.Errorf("engine: %s, %v; explain: %s, %s", res.BackendName(), res.CID.Outcome, rep.Backend, q.Outcome)
			}
		})
	}
	// A service without QUIC-LB shows no quic section.
	a := explain.Args{Src: "198.51.100.7", Dst: "203.0.113.10", Proto: "udp", Sport: 1, Dport: 53, SportSet: true, DportSet: true, QUICDCID: "0102"}
	req, err := a.Request()
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := explain.Explain(cptest.Config(t, svcConfig(svcOpts{})), req); err != nil || rep.QUIC != nil {
		t.Fatalf("without QUIC-LB: quic %+v, err %v", rep.QUIC, err)
	}
}

// TestExplainQUICArgs: the QUIC flags are checked as the others are.
func TestExplainQUICArgs(t *testing.T) {
	base := explain.Args{Src: "198.51.100.7", Dst: "203.0.113.10", Proto: "udp", Sport: 1, Dport: 443, SportSet: true, DportSet: true}
	for _, tc := range []struct {
		name string
		edit func(*explain.Args)
		want string
	}{
		{"tcp", func(a *explain.Args) { a.Proto, a.QUICDCID = "tcp", "01" }, "needs --proto udp"},
		{"not hex", func(a *explain.Args) { a.QUICDCID = "zz" }, "1 to 20 octets in hex"},
		{"21 octets", func(a *explain.Args) { a.QUICDCID = strings.Repeat("00", 21) }, "1 to 20 octets in hex"},
		{"type alone", func(a *explain.Args) { a.QUICType, a.QUICTypeSet = "initial", true }, "--quic-type needs --quic-dcid"},
		{"bad type", func(a *explain.Args) { a.QUICDCID, a.QUICType = "01", "retry" }, "short, initial, 0-rtt or handshake"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := base
			tc.edit(&a)
			_, err := a.Request()
			var ae *explain.ArgError
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want an ArgError with %q", err, tc.want)
			}
		})
	}
}
