package flowsync

import (
	"bufio"
	"net"
	"net/netip"
	"reflect"
	"testing"
	"time"
)

func sampleDraining() []DrainingBackend {
	return []DrainingBackend{
		{Service: "web", Name: "b2", IP: netip.MustParseAddr("10.0.1.2"), Group: "pool", DrainLeft: 599_123 * time.Millisecond},
		{Service: "dns", Name: "", IP: netip.MustParseAddr("2001:db8::7"), Group: "backup", Failover: true, DrainLeft: time.Millisecond},
	}
}

// TestWire_DrainingRoundTrip: a pull backends body decodes to what was
// encoded, IPv4 and IPv6, strings and flags.
func TestWire_DrainingRoundTrip(t *testing.T) {
	in := sampleDraining()
	body := []byte{0, byte(len(in))}
	for i := range in {
		var ok bool
		if body, ok = putDraining(body, &in[i]); !ok {
			t.Fatalf("put %+v", in[i])
		}
	}
	if want := 2 + drainingLen(&in[0]) + drainingLen(&in[1]); len(body) != want {
		t.Errorf("encoded %d bytes, drainingLen says %d", len(body), want)
	}
	out, ok := decodeDraining(body, nil)
	if !ok || !reflect.DeepEqual(out, in) {
		t.Fatalf("decoded %+v (%v), want %+v", out, ok, in)
	}
}

// TestWire_DrainingMalformed: a truncated body, a count that does not
// match, a bad address length or unknown flags decode to nothing.
func TestWire_DrainingMalformed(t *testing.T) {
	in := sampleDraining()[:1]
	good, _ := putDraining([]byte{0, 1}, &in[0])
	cases := map[string][]byte{
		"empty":           {},
		"count zero":      {0, 0},
		"count too large": append([]byte{0, 2}, good[2:]...),
		"trailing byte":   append(append([]byte(nil), good...), 0),
	}
	for l := 1; l < len(good); l++ {
		cases["truncated "+string(rune('a'+l%26))+string(rune('0'+l/26))] = good[:l]
	}
	badIP := append([]byte(nil), good...)
	badIP[2+2+3+2+2] = 5 // the address length: "web", "b2"
	cases["address length 5"] = badIP
	badFlags := append([]byte(nil), good...)
	badFlags[len(badFlags)-5] = 2
	cases["unknown flag"] = badFlags
	for name, b := range cases {
		if out, ok := decodeDraining(b, nil); ok || len(out) != 0 {
			t.Errorf("%s: decoded %+v (%v)", name, out, ok)
		}
	}
}

// TestPull_DrainingFrames: the backends frames reach AdoptDraining before
// any record is merged; a garbage one fails the pull (malformed) and
// nothing is adopted.
func TestPull_DrainingFrames(t *testing.T) {
	snap := testSnapshot(1, 2, 0, 1, 300)
	newJoiner := func(srv netip.AddrPort) (*node, *[][]DrainingBackend) {
		j := newNode(t, snap, 1024, keyA)
		var got [][]DrainingBackend
		j.s.adopt = func(bs []DrainingBackend) { got = append(got, append([]DrainingBackend(nil), bs...)) }
		c := testConfig(keyA)
		c.Peers = []netip.AddrPort{srv}
		j.s.Reconfigure(c)
		return j, &got
	}

	// A real server whose snapshot drains a backend.
	a := newNode(t, snap, 1024, keyA)
	drained := *snap
	drained.Backends = append(drained.Backends[:0:0], snap.Backends...)
	b := *drained.Backends[1]
	b.Removed, b.DrainUntil = true, a.clk.now()+600_000
	drained.Backends[1] = &b
	a.eng.snap.Store(&drained)
	fillFlows(t, a.eng.tbl, &drained, a.clk.now(), 50)
	j, got := newJoiner(a.s.addr())
	a.peerWith(j)
	a.run(t)
	res := j.s.Pull(t.Context())
	if res.Err != nil || res.Records != 50 {
		t.Fatalf("pull: %+v", res)
	}
	svc := drained.Service(b.Service)
	want := []DrainingBackend{{Service: svc.Name, Name: b.Name, IP: b.IP, Group: b.Group, Failover: b.Failover, DrainLeft: 600 * time.Second}}
	if len(*got) != 1 || !reflect.DeepEqual((*got)[0], want) {
		t.Errorf("adopted %+v, want once %+v", *got, want)
	}

	// A server that answers with a garbage backends frame.
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	j2, got2 := newJoiner(ln.Addr().(*net.TCPAddr).AddrPort())
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		msg, err := readFrame(bufio.NewReader(c), make([]byte, maxFrameLen))
		if err != nil {
			return
		}
		h, _ := parseHeader(msg)
		kr, _ := newKeyring([][32]byte{keyA}, 99)
		var sc scratch
		nonce, ok := kr.open(&sc, &h, msg, nil)
		if !ok {
			return
		}
		e := newEncoder(pullFrameLimit)
		good, _ := putDraining([]byte{0, 2}, &want[0]) // says two, holds one
		e.putBody(good)
		rh := header{kind: kindPullBackends, keyID: kr.sealID(), sender: 99, seq: 1, wall: time.Now().UnixMilli()}
		writeFrame(c, e.seal(kr.seal, &rh, nonce))
		c.Read(make([]byte, 1))
	}()
	res = j2.s.Pull(t.Context())
	if res.Err == nil || len(*got2) != 0 || j2.s.m.refused[reasonMalformed].Load() != 1 {
		t.Errorf("garbage backends frame: %+v, adopted %+v, malformed %d", res, *got2, j2.s.m.refused[reasonMalformed].Load())
	}
}
