package controlplane_test

// Routing QUIC by the server ID in its connection IDs (QUIC-LB,
// [[backend_service.quic_lb]]), through the real control plane and
// decider: testdata/quic/service.toml's service, real frames.

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/quiclb"
)

// quicRig holds a rig on cptest.QUICText and the two configurations its
// servers would use, to make connection IDs with.
type quicRig struct {
	*cptest.Rig
	text  string
	plain *quiclb.Config // rotation 1
	enc   *quiclb.Config // rotation 2
}

func newQUICRig(t *testing.T, nonce2 int) *quicRig {
	t.Helper()
	plain, enc := cptest.QUICConfigs(t, nonce2)
	text := cptest.QUICText(t, nonce2)
	return &quicRig{Rig: cptest.New(t, text), text: text, plain: plain, enc: enc}
}

var (
	cid         = cptest.QUICCID
	shortHeader = cptest.QUICShort
	longHeader  = cptest.QUICLong
)

// client is the i-th client's address and port: every i a different
// 5-tuple, as a client that migrates or a NAT that rebinds makes.
func client(i int) (string, uint16) {
	return fmt.Sprintf("198.51.%d.%d", 100+i/250, 1+i%250), uint16(20000 + 7*i)
}

// send decides a UDP packet to the VIP's port 443 from client i with
// payload.
func (r *quicRig) send(i int, payload []byte) *cptest.Result {
	src, port := client(i)
	p := cptest.UDP(src, "203.0.113.10", port, 443)
	p.Payload = payload
	return r.Send(p)
}

func cidCount(r *cptest.Rig, o dataplane.CIDOutcome) uint64 { return r.D.Stats().CID[o].Load() }

// TestQUICLB_RoutesByServerIDWhateverTheClientAddress: a short-header
// packet, or a Handshake packet, whose connection ID carries a server ID
// goes to the endpoint with that server ID from any client address and
// port, untracked, counted as routed: in the clear, encrypted in one AES
// pass (server ID + nonce of 16 octets) and in four passes. The same
// tuples with an unroutable ID spread over the service by Maglev, which
// shows that the ID, not the tuple, chose the backend.
func TestQUICLB_RoutesByServerIDWhateverTheClientAddress(t *testing.T) {
	for _, nonce2 := range []int{14, 8} {
		r := newQUICRig(t, nonce2)
		for _, c := range []*quiclb.Config{r.plain, r.enc} {
			t.Run(c.String(), func(t *testing.T) {
				before := cidCount(r.Rig, dataplane.CIDRouted)
				sent := 0
				for _, want := range []string{"q1", "q2", "q3"} {
					sid := "000" + want[1:]
					for i := range 40 {
						payload := shortHeader(cid(t, c, sid, i))
						if i%4 == 3 {
							payload = longHeader(2, cid(t, c, sid, i))
						}
						res := r.send(i, payload)
						sent++
						if res.Verdict != dataplane.VerdictForward || res.BackendName() != want || res.CID.Outcome != dataplane.CIDRouted {
							t.Fatalf("server ID %s from client %d: verdict %v backend %q outcome %v; want forward to %s, routed",
								sid, i, res.Verdict, res.BackendName(), res.CID.Outcome, want)
						}
						if got := hex.EncodeToString(res.CID.ServerID.ServerID()); res.Track != dataplane.TrackUntracked || got != sid {
							t.Fatalf("client %d: track %v, decoded server ID %s; want untracked, %s", i, res.Track, got, sid)
						}
					}
				}
				if got := cidCount(r.Rig, dataplane.CIDRouted) - before; got != uint64(sent) {
					t.Fatalf("routed counter rose by %d; want %d", got, sent)
				}
			})
		}
		seen := map[string]bool{}
		for i := range 40 {
			seen[r.send(i, shortHeader([]byte{0xe0 | 8, 0, 1, 2, 3, 4, 5, 6, 7})).BackendName()] = true
		}
		if len(seen) < 3 {
			t.Fatalf("40 tuples by the usual path reached %v; want at least 3 backends", seen)
		}
	}
}

// TestQUICLB_FallbacksCountedByReason: packets whose connection ID cannot
// be routed take the service's usual path (tracked, Maglev) and still
// reach the backend that path gives the tuple; each is counted under its
// reason. Client Initial and
// 0-RTT packets carry an ID the client chose.
func TestQUICLB_FallbacksCountedByReason(t *testing.T) {
	r := newQUICRig(t, 14)
	q1 := cid(t, r.plain, "0001", 1)
	other, err := quiclb.New(3, 2, 6, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The usual path's backend for client 7: a UDP packet that is no QUIC.
	usual := r.send(7, make([]byte, 32)).BackendName()
	for _, tc := range []struct {
		name    string
		payload []byte
		want    dataplane.CIDOutcome
	}{
		{"not QUIC (fixed bit clear)", append([]byte{0x01}, q1...), dataplane.CIDNotQUIC},
		{"one octet", []byte{0x41}, dataplane.CIDNotQUIC},
		{"Initial", longHeader(0, q1), dataplane.CIDClientChosen},
		{"0-RTT", longHeader(1, q1), dataplane.CIDClientChosen},
		{"unroutable 0b111", shortHeader(append([]byte{0xe8}, q1[1:]...)), dataplane.CIDUnroutable},
		{"unknown config rotation", shortHeader(cid(t, other, "0001", 1)), dataplane.CIDUnknownConfig},
		{"shorter than its configuration", []byte{0x41, q1[0], q1[1], q1[2], q1[3]}, dataplane.CIDShort},
		{"unknown server ID", shortHeader(cid(t, r.plain, "0009", 1)), dataplane.CIDUnknownServerID},
		{"endpoint without server ID", shortHeader(cid(t, r.enc, "0004", 1)), dataplane.CIDUnknownServerID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := cidCount(r.Rig, tc.want)
			res := r.send(7, tc.payload)
			if res.CID.Outcome != tc.want || !res.CID.Outcome.Fallback() {
				t.Fatalf("outcome %v; want %v, a fallback", res.CID.Outcome, tc.want)
			}
			if res.Verdict != dataplane.VerdictForward || res.BackendName() != usual {
				t.Fatalf("verdict %v backend %q; want forwarded by the usual path, to %s", res.Verdict, res.BackendName(), usual)
			}
			if got := cidCount(r.Rig, tc.want) - before; got != 1 {
				t.Fatalf("%s counter rose by %d; want 1", tc.want, got)
			}
		})
	}
}

// TestQUICLB_UnhealthyBackendFallsBack: the backend a connection ID names
// is held to what a tracked flow's is. Unhealthy, a UDP flow does not
// persist on it (M3, P1): the packet takes the usual path to a healthy
// backend, counted as backend_unavailable.
func TestQUICLB_UnhealthyBackendFallsBack(t *testing.T) {
	r := newQUICRig(t, 14)
	r.Health("q1", false)
	for i := range 20 {
		res := r.send(i, shortHeader(cid(t, r.enc, "0001", i)))
		if res.CID.Outcome != dataplane.CIDBackendUnavailable || res.CID.Unavailable != "unhealthy" {
			t.Fatalf("client %d: outcome %v (%q); want backend_unavailable (unhealthy)", i, res.CID.Outcome, res.CID.Unavailable)
		}
		if b := res.BackendName(); res.Verdict != dataplane.VerdictForward || b == "q1" || b == "" {
			t.Fatalf("client %d: verdict %v backend %q; want forwarded to a healthy backend", i, res.Verdict, b)
		}
	}
	r.Health("q1", true)
	if res := r.send(30, shortHeader(cid(t, r.enc, "0001", 30))); res.BackendName() != "q1" {
		t.Fatalf("healthy again: backend %q; want q1", res.BackendName())
	}
}

// TestM5_QUICConnectionsDrainWithRemovedBackend: a backend removed by a
// reload keeps its QUIC connections, by connection ID from any client
// address, for connection_draining_timeout_sec (30 s) like tracked flows;
// then its IDs fall back (backend_unavailable, removed). A new endpoint
// given the removed one's server ID while it drains takes the ID over:
// the current configuration wins.
func TestM5_QUICConnectionsDrainWithRemovedBackend(t *testing.T) {
	r := newQUICRig(t, 14)
	removed := strings.Replace(r.text, `{ name = "q1", ip = "10.0.1.1", server_id = "0001" },`, "", 1)
	r.At(100).Reload(removed)
	r.At(129)
	for i := range 20 {
		if res := r.send(100+i, shortHeader(cid(t, r.plain, "0001", i))); res.BackendName() != "q1" || res.CID.Outcome != dataplane.CIDRouted {
			t.Fatalf("draining, client %d: backend %q outcome %v; want q1, routed", i, res.BackendName(), res.CID.Outcome)
		}
	}
	r.At(130.5)
	res := r.send(200, shortHeader(cid(t, r.plain, "0001", 200)))
	if res.CID.Outcome != dataplane.CIDBackendUnavailable || res.CID.Unavailable != "removed" {
		t.Fatalf("after the drain: outcome %v (%q); want backend_unavailable (removed)", res.CID.Outcome, res.CID.Unavailable)
	}
	if b := res.BackendName(); b == "q1" || b == "" {
		t.Fatalf("after the drain: backend %q; want another by the usual path", b)
	}

	r.At(200).Reload(r.text) // q1 back
	r.At(210).Reload(removed)
	taken := strings.Replace(removed, `{ name = "q4", ip = "10.0.1.4" },`, `{ name = "q4", ip = "10.0.1.4", server_id = "0001" },`, 1)
	r.At(215).Reload(taken)
	if res := r.send(300, shortHeader(cid(t, r.plain, "0001", 300))); res.BackendName() != "q4" {
		t.Fatalf("server ID 0001 moved to q4 while q1 drains: backend %q; want q4", res.BackendName())
	}
}

// TestQUICLB_ReloadRemovesConfiguration: a reload that drops a
// configuration leaves its IDs unknown (they fall back); one without any
// QUIC-LB makes the service's packets plain UDP (no outcome counted).
func TestQUICLB_ReloadRemovesConfiguration(t *testing.T) {
	r := newQUICRig(t, 14)
	id := cid(t, r.enc, "0002", 1)
	if res := r.send(1, shortHeader(id)); res.BackendName() != "q2" {
		t.Fatalf("before: backend %q; want q2", res.BackendName())
	}
	i := strings.Index(r.text, "  [[backend_service.quic_lb]]\n  config_rotation = 2")
	j := strings.Index(r.text, "  [[backend_service.backend]]")
	r.At(10).Reload(r.text[:i] + r.text[j:])
	if res := r.send(1, shortHeader(id)); res.CID.Outcome != dataplane.CIDUnknownConfig {
		t.Fatalf("rotation 2 removed: outcome %v; want unknown_config", res.CID.Outcome)
	}
	var none strings.Builder
	for _, line := range strings.Split(r.text, "\n") {
		if strings.Contains(line, "config_rotation") || strings.Contains(line, "_length") ||
			strings.Contains(line, "key_file") || strings.Contains(line, "quic_lb") {
			continue
		}
		if k := strings.Index(line, `, server_id = "`); k >= 0 {
			line = line[:k] + " },"
		}
		none.WriteString(line + "\n")
	}
	r.At(20).Reload(none.String())
	res := r.send(1, shortHeader(cid(t, r.plain, "0001", 1)))
	if res.CID.Outcome != dataplane.CIDNone || res.Verdict != dataplane.VerdictForward {
		t.Fatalf("without QUIC-LB: outcome %v verdict %v; want none, forwarded", res.CID.Outcome, res.Verdict)
	}
}

// TestQUICLB_IPv6: the same routing over IPv6 (the UDP payload found
// after the IPv6 header): the service's VIP and endpoints made IPv6.
func TestQUICLB_IPv6(t *testing.T) {
	plain, enc := cptest.QUICConfigs(t, 14)
	text := strings.NewReplacer("10.0.1.", "2001:db8:1::", "203.0.113.10", "2001:db8:f::10").Replace(cptest.QUICText(t, 14))
	r := cptest.New(t, text)
	for i := range 20 {
		c, want := plain, "q"+fmt.Sprint(1+i%3)
		if i%2 == 1 {
			c = enc
		}
		p := cptest.UDP(fmt.Sprintf("2001:db8:c::%x", i+1), "2001:db8:f::10", uint16(30000+i), 443)
		p.Payload = shortHeader(cid(t, c, "000"+want[1:], i))
		if res := r.Send(p); res.BackendName() != want || res.CID.Outcome != dataplane.CIDRouted {
			t.Fatalf("client %d: backend %q outcome %v; want %s, routed", i, res.BackendName(), res.CID.Outcome, want)
		}
	}
}
