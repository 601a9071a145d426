package core

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/sim"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/quiclb"
)

// The QUIC-LB cases: short-header packets of quicTuples client tuples,
// each routed by the server ID in its connection ID, next to plain UDP of
// a service without QUIC-LB, on one engine in the same run.
const quicTuples = 4096

// quicCase is one of them: the service and port the packets go to, and
// the configuration (nil: plain UDP, no QUIC) that makes their IDs.
type quicCase struct {
	name   string
	port   uint16
	config func(k *quicKeys) *quiclb.Config
}

// quicKeys are the configurations the bed's servers use.
type quicKeys struct{ plain, aes1, aes4 *quiclb.Config }

var quicCases = []quicCase{
	{"plain-udp", 53, nil},
	{"plaintext-cid", 443, func(k *quicKeys) *quiclb.Config { return k.plain }},
	{"aes-1-pass-cid", 443, func(k *quicKeys) *quiclb.Config { return k.aes1 }},
	{"aes-4-pass-cid", 444, func(k *quicKeys) *quiclb.Config { return k.aes4 }},
}

// quicVIP is the VIP of the QUIC bed.
var quicVIP = netip.MustParseAddr("203.0.113.10")

// quicTOML is the QUIC bed's configuration: dns (UDP 53, no QUIC-LB), h3
// (UDP 443: rotation 1 in the clear, rotation 2 encrypted, server ID and
// nonce of 16 octets: one AES pass) and h3b (UDP 444: rotation 1
// encrypted, 2 + 8 octets: the four-pass construction), four backends
// each, L2_DSR.
func quicTOML(keyFile string) string {
	var b strings.Builder
	b.WriteString("[[health_check]]\nname = \"hc\"\ntype = \"TCP\"\nport = 80\n")
	for i, s := range []struct {
		name, port, quic string
	}{
		{"dns", "53", ""},
		{"h3", "443", "  [[backend_service.quic_lb]]\n  config_rotation = 1\n  server_id_length = 2\n  nonce_length = 6\n" +
			"  [[backend_service.quic_lb]]\n  config_rotation = 2\n  server_id_length = 2\n  nonce_length = 14\n  key_file = " + fmt.Sprintf("%q", keyFile) + "\n"},
		{"h3b", "444", "  [[backend_service.quic_lb]]\n  config_rotation = 1\n  server_id_length = 2\n  nonce_length = 8\n  key_file = " + fmt.Sprintf("%q", keyFile) + "\n"},
	} {
		fmt.Fprintf(&b, "\n[[backend_service]]\nname = %q\nprotocol = \"UDP\"\nhealth_checks = [\"hc\"]\n%s", s.name, s.quic)
		fmt.Fprintf(&b, "  [[backend_service.backend]]\n  group = %q\n  endpoints = [\n", s.name)
		for j := 1; j <= 4; j++ {
			sid := ""
			if s.quic != "" {
				sid = fmt.Sprintf(", server_id = \"%04x\"", j)
			}
			fmt.Fprintf(&b, "    { name = \"%s-%d\", ip = \"10.10.%d.%d\"%s },\n", s.name, j, 20+i, j, sid)
		}
		b.WriteString("  ]\n")
		fmt.Fprintf(&b, "\n[[forwarding_rule]]\nname = %q\nip_address = %q\nip_protocol = \"UDP\"\nports = [%q]\nbackend_service = %q\n",
			s.name, quicVIP, s.port, s.name)
	}
	return b.String()
}

// newQUICBed builds the QUIC bed with a fresh random key, and the
// configurations its servers use.
func newQUICBed() (*bed, *quicKeys, error) {
	key := make([]byte, quiclb.KeyLen)
	if _, err := rand.Read(key); err != nil {
		return nil, nil, err
	}
	f, err := os.CreateTemp("", "lbbench-quic-*.key") // mode 0600
	if err != nil {
		return nil, nil, err
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(hex.EncodeToString(key) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, nil, err
	}
	cfg, err := config.Parse("lbbench-core-quic.toml", []byte(quicTOML(f.Name())))
	if err != nil {
		return nil, nil, err
	}
	ct, err := conntrack.New(conntrack.MinCapacity)
	if err != nil {
		return nil, nil, err
	}
	eng := dataplane.NewEngine(ct)
	cp, err := controlplane.New(cfg, eng, controlplane.Options{Local: sim.SimLocal(), InitialHealthy: true, InitialWeight: 1000}, clock())
	if err != nil {
		return nil, nil, err
	}
	var k quicKeys
	for _, c := range []struct {
		dst      **quiclb.Config
		rotation uint8
		nonce    int
		key      []byte
	}{{&k.plain, 1, 6, nil}, {&k.aes1, 2, 14, key}, {&k.aes4, 1, 8, key}} {
		if *c.dst, err = quiclb.New(c.rotation, 2, c.nonce, c.key); err != nil {
			return nil, nil, err
		}
	}
	return &bed{eng: eng, cp: cp, capacity: ct.Capacity()}, &k, nil
}

// quicFrames are the frames of a case: one per client tuple, 64 bytes of
// UDP payload; a QUIC case's carry short headers whose connection IDs
// name the four servers in turn, each with its own nonce.
func quicFrames(qc quicCase, k *quicKeys) ([][]byte, int, error) {
	out := make([][]byte, quicTuples)
	bytes := 0
	nonce := make([]byte, quiclb.MaxBlockLen)
	for i := range out {
		payload := make([]byte, 64)
		if qc.config != nil {
			c := qc.config(k)
			binary.BigEndian.PutUint32(nonce, uint32(i))
			id, err := c.Encode(nil, []byte{0, byte(1 + i%4)}, nonce[:c.NonceLen()], nil)
			if err != nil {
				return nil, 0, err
			}
			payload = craft.QUICPayload(craft.QUICShort, id)
			payload = append(payload, make([]byte, max(0, 64-len(payload)))...)
		}
		src := netip.AddrFrom4([4]byte{100, 64 + byte(i>>16), byte(i >> 8), byte(i)})
		f, err := craft.Build(&craft.Packet{Src: src, Dst: quicVIP, Proto: packet.ProtoUDP,
			SrcPort: uint16(1024 + i%50000), DstPort: qc.port, Payload: payload})
		if err != nil {
			return nil, 0, err
		}
		out[i] = f
		bytes += len(f)
	}
	return out, bytes, nil
}

// measureQUIC measures every QUIC case on one worker, in order, on the
// QUIC bed. A case whose packets were not all routed by connection ID
// (or, for plain UDP, any was) is an error: the figure would not be the
// one it is named after.
func measureQUIC(o *Options) ([]Case, error) {
	b, k, err := newQUICBed()
	if err != nil {
		return nil, fmt.Errorf("QUIC bed: %w", err)
	}
	var out []Case
	for _, qc := range quicCases {
		frames, nbytes, err := quicFrames(qc, k)
		if err != nil {
			return nil, err
		}
		r := &run{bed: b, frames: [][][]byte{frames}, dur: o.Duration}
		s, err := r.measure()
		if err != nil {
			return nil, fmt.Errorf("QUIC case %s: %w", qc.name, err)
		}
		st := r.deciders[0].Stats()
		routed := st.CID[dataplane.CIDRouted].Load()
		var fallback uint64
		for o := dataplane.CIDRouted + 1; int(o) < dataplane.NumCIDOutcomes; o++ {
			fallback += st.CID[o].Load()
		}
		if (qc.config != nil) != (routed > 0) || fallback != 0 {
			return nil, fmt.Errorf("QUIC case %s: %d packets routed by connection ID, %d fell back", qc.name, routed, fallback)
		}
		pk := float64(s.packets)
		out = append(out, Case{
			Engine: true, Mix: "quic-" + qc.name, Flows: quicTuples, Capacity: b.capacity, Workers: 1,
			FrameSize: smallFrame, FrameBytes: float64(nbytes) / float64(len(frames)), Replay: len(frames),
			Packets: s.packets, Seconds: o.Duration.Seconds(),
			Mpps: s.mpps, MppsPerCore: s.mpps, NsPerPkt: s.wallNs, CPUNsPerPkt: s.cpuNs,
			Allocs: s.allocs, AllocsPerPkt: float64(s.allocs) / pk, NewPct: 100 * float64(s.newConn) / pk,
			CIDRouted: routed,
		})
	}
	return out, nil
}
