package dataplane_test

// Routing QUIC by connection ID on the hot path: no allocation, and its
// cost next to plain UDP (BenchmarkQUICLB).

import (
	"net/netip"
	"testing"

	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/cptest"
	"xlb/controlplane/sim"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/quiclb"
)

var quicVIP = netip.MustParseAddr("203.0.113.10")

// quicEngine runs cptest.QUICText (rotation 1 in the clear, rotation 2
// encrypted with a nonce of nonce2 octets) and returns the engine and the
// configuration the servers of rotation 2 use.
func quicEngine(tb testing.TB, nonce2 int) (*dataplane.Engine, *controlplane.ControlPlane, *quiclb.Config) {
	tb.Helper()
	ct, err := conntrack.New(conntrack.MinCapacity)
	if err != nil {
		tb.Fatal(err)
	}
	eng := dataplane.NewEngine(ct)
	cp, err := controlplane.New(cptest.Config(tb, cptest.QUICText(tb, nonce2)), eng, controlplane.Options{
		Local: sim.SimLocal(), InitialHealthy: true, InitialWeight: 1000,
	}, benchClock())
	if err != nil {
		tb.Fatal(err)
	}
	_, enc := cptest.QUICConfigs(tb, nonce2)
	return eng, cp, enc
}

// quicPayload is a short-header packet whose connection ID, of
// configuration c, carries server ID sid (hex).
func quicPayload(tb testing.TB, c *quiclb.Config, sid string, n int) []byte {
	return cptest.QUICShort(cptest.QUICCID(tb, c, sid, n))
}

func quicFrame(tb testing.TB, sport uint16, payload []byte) []byte {
	tb.Helper()
	src, _ := benchClient(int(sport), false)
	f, err := craft.Build(&craft.Packet{Src: src, Dst: quicVIP, Proto: packet.ProtoUDP, SrcPort: sport, DstPort: 443, Payload: payload})
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// TestProcessDoesNotAllocate_QUICLB: routing by connection ID allocates
// nothing per frame, in the clear, in one AES pass and in four, nor does
// a fallback.
func TestProcessDoesNotAllocate_QUICLB(t *testing.T) {
	plain, _ := cptest.QUICConfigs(t, 14)
	const sid = "0002"
	for _, nonce2 := range []int{14, 8} {
		eng, _, enc := quicEngine(t, nonce2)
		dc := eng.NewDecider()
		for _, tc := range []struct {
			name    string
			payload []byte
			want    dataplane.CIDOutcome
		}{
			{"plaintext", quicPayload(t, plain, sid, 1), dataplane.CIDRouted},
			{enc.String(), quicPayload(t, enc, sid, 1), dataplane.CIDRouted},
			{"unknown server ID", quicPayload(t, enc, "0009", 1), dataplane.CIDUnknownServerID},
			{"not QUIC", make([]byte, 32), dataplane.CIDNotQUIC},
		} {
			t.Run(tc.name, func(t *testing.T) {
				frame := quicFrame(t, 4000, tc.payload)
				d := allocDecide(t, dc, frame)
				if d.CID.Outcome != tc.want || d.Verdict != dataplane.VerdictForward {
					t.Fatalf("outcome %v verdict %v; want %v, forward", d.CID.Outcome, d.Verdict, tc.want)
				}
				processAllocs(t, dc, frame, benchClock(), dataplane.VerdictForward, 0)
			})
		}
	}
}

// BenchmarkQUICLB is the per-packet cost of QUIC short-header packets of
// 4096 client tuples to one UDP service: routed by a plaintext connection
// ID, by one encrypted in one AES pass and in four passes, next to the
// same service's packets that are not QUIC (the usual UDP path, after the
// first-octet check) and to a UDP service without QUIC-LB (plain-udp).
func BenchmarkQUICLB(b *testing.B) {
	const tuples = 4096
	frames := func(tb testing.TB, payload func(i int) []byte) [][]byte {
		out := make([][]byte, tuples)
		for i := range out {
			out[i] = quicFrame(tb, uint16(1024+i), payload(i))
		}
		return out
	}
	sids := []string{"0001", "0002", "0003"}
	plain, _ := cptest.QUICConfigs(b, 14)
	b.Run("plain-udp", func(b *testing.B) { benchRun(b, benchFixUDP(b)) })
	for _, tc := range []struct {
		name   string
		nonce2 int
		config func(enc *quiclb.Config) *quiclb.Config
	}{
		{"not-quic", 14, nil},
		{"plaintext-cid", 14, func(*quiclb.Config) *quiclb.Config { return plain }},
		{"aes-1-pass-cid", 14, func(enc *quiclb.Config) *quiclb.Config { return enc }},
		{"aes-4-pass-cid", 8, func(enc *quiclb.Config) *quiclb.Config { return enc }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			eng, cp, enc := quicEngine(b, tc.nonce2)
			f := &benchFixture{eng: eng, cp: cp, dc: eng.NewDecider(), svc: benchServiceID(b, eng, "h3")}
			f.frames = frames(b, func(i int) []byte {
				if tc.config == nil {
					return make([]byte, 32)
				}
				return quicPayload(b, tc.config(enc), sids[i%len(sids)], i)
			})
			routed0 := f.dc.Stats().CID[dataplane.CIDRouted].Load()
			benchRun(b, f)
			if tc.config != nil && f.dc.Stats().CID[dataplane.CIDRouted].Load() == routed0 {
				b.Fatal("no packet was routed by connection ID")
			}
		})
	}
}
