package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"

	"xlb/quiclb"
)

var testQUICKey, _ = hex.DecodeString("8f95f09245765f80256934e50c66207f")

// TestQUICConnectionIDsCarryServerID: every ID the generator makes has
// the configuration's length and config rotation, decodes (as the data
// plane decodes it) to the server ID, and is new; encrypted, the server ID
// is not in the clear. In the clear, in one AES pass (server ID + nonce of
// 16 octets) and in the four-pass construction (made to fail by encoding
// with another key: the decoded server IDs then differ).
func TestQUICConnectionIDsCarryServerID(t *testing.T) {
	sid := []byte{0x0a, 0x0b}
	for _, tc := range []struct {
		rotation uint8
		nonce    int
		key      []byte
	}{{0, 6, nil}, {3, 14, testQUICKey}, {6, 6, testQUICKey}} {
		c, err := quiclb.New(tc.rotation, len(sid), tc.nonce, tc.key)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(c.String(), func(t *testing.T) {
			g := cidGenerator{cfg: c, serverID: sid}
			if g.ConnectionIDLen() != 1+len(sid)+tc.nonce {
				t.Fatalf("ConnectionIDLen %d, want %d", g.ConnectionIDLen(), 1+len(sid)+tc.nonce)
			}
			seen := map[string]bool{}
			var s quiclb.Scratch
			clear := 0
			for range 1000 {
				id, err := g.GenerateConnectionID()
				if err != nil {
					t.Fatal(err)
				}
				b := id.Bytes()
				if len(b) != g.ConnectionIDLen() || quiclb.RotationOf(b[0]) != tc.rotation {
					t.Fatalf("ID %x: %d octets, rotation %d; want %d, %d", b, len(b), quiclb.RotationOf(b[0]), g.ConnectionIDLen(), tc.rotation)
				}
				got, err := c.ServerID(b, &s)
				if err != nil || !bytes.Equal(got, sid) {
					t.Fatalf("ID %x decodes to server ID %x (%v), want %x", b, got, err, sid)
				}
				if seen[string(b)] {
					t.Fatalf("ID %x made twice", b)
				}
				seen[string(b)] = true
				if bytes.Equal(b[1:1+len(sid)], sid) {
					clear++
				}
			}
			if want := 1000; tc.key == nil && clear != want || tc.key != nil && clear > 5 {
				t.Errorf("server ID in the clear in %d of 1000 IDs (encrypted: %v)", clear, tc.key != nil)
			}
			if tc.key == nil {
				return
			}
			other, err := quiclb.New(tc.rotation, len(sid), tc.nonce, bytes.Repeat([]byte{1}, quiclb.KeyLen))
			if err != nil {
				t.Fatal(err)
			}
			id, _ := cidGenerator{cfg: other, serverID: sid}.GenerateConnectionID()
			if got, _ := c.ServerID(id.Bytes(), &s); bytes.Equal(got, sid) {
				t.Errorf("an ID made with another key decodes to the server ID too: the key plays no part")
			}
		})
	}
}

// recordingConn is a client's socket that notes the destination
// connection IDs of the short-header packets it sends (the IDs the server
// issued) and where the packets it receives come from.
type recordingConn struct {
	net.PacketConn
	cidLen int
	mu     sync.Mutex
	dcids  map[string]bool
	from   map[string]bool
	sent   int
}

func newRecordingConn(t *testing.T, cidLen int) *recordingConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &recordingConn{PacketConn: c, cidLen: cidLen, dcids: map[string]bool{}, from: map[string]bool{}}
}

func (c *recordingConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	c.mu.Lock()
	c.sent++
	if dcid, ok := shortHeaderDCID(p, c.cidLen); ok {
		c.dcids[string(dcid)] = true
	}
	c.mu.Unlock()
	return c.PacketConn.WriteTo(p, addr)
}

// shortHeaderDCID finds the short-header packet of a datagram and returns
// its destination connection ID. The client's first 1-RTT packet is
// coalesced behind its Handshake packet (RFC 9000, section 12.2), so the
// long-header packets before it, as quiclb.DCID reads them, are stepped
// over by their Length field. Only QUIC version 1's long-header types are
// known.
func shortHeaderDCID(p []byte, cidLen int) ([]byte, bool) {
	for len(p) > 0 {
		dcid, kind := quiclb.DCID(p)
		switch {
		case kind == quiclb.Short:
			return dcid[:min(cidLen, len(dcid))], len(dcid) >= cidLen
		case kind == quiclb.NotQUIC || binary.BigEndian.Uint32(p[1:5]) != 1:
			return nil, false
		}
		i := 6 + len(dcid) // first octet, version, DCID length, DCID
		if i >= len(p) {
			return nil, false
		}
		i += 1 + int(p[i]) // SCID length, SCID
		switch p[0] >> 4 & 3 {
		case 0: // Initial: a token before the Length
			tl, n, err := quicvarint.Parse(p[min(i, len(p)):])
			if err != nil {
				return nil, false
			}
			i += n + int(tl)
		case 3: // Retry: no Length, and a client never sends one
			return nil, false
		}
		length, n, err := quicvarint.Parse(p[min(i, len(p)):])
		if err != nil || uint64(len(p)-i-n) < length {
			return nil, false
		}
		p = p[i+n+int(length):]
	}
	return nil, false
}

func (c *recordingConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(p)
	if err == nil {
		c.mu.Lock()
		c.from[addr.String()] = true
		c.mu.Unlock()
	}
	return n, addr, err
}

func (c *recordingConn) seen() (dcids, from []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.dcids {
		dcids = append(dcids, k)
	}
	for k := range c.from {
		from = append(from, k)
	}
	return dcids, from
}

func (c *recordingConn) packets() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent
}

// quicAsk sends req on a new stream of conn and returns the answer.
func quicAsk(ctx context.Context, conn *quic.Conn, req string) (string, error) {
	st, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return "", err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(d)
	}
	if _, err := st.Write([]byte(req)); err != nil {
		return "", err
	}
	if err := st.Close(); err != nil {
		return "", err
	}
	ans, err := io.ReadAll(st)
	return string(ans), err
}

// TestQUICRoundTrip: a quic-go client on loopback reaches the QUIC mode
// bound to the wildcard address through 127.0.0.2 and is answered from
// 127.0.0.2 (as a backend answers from the VIP); every connection ID it
// sends to carries the server's ID, encrypted; it migrates to another
// socket (AddPath, Probe, Switch), moves to another of the server's IDs
// as QUIC wants, and is answered there too.
func TestQUICRoundTrip(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "quic-lb.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(testQUICKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseServe([]string{"--name", "b4", "--listen-tcp", "", "--listen-udp", "",
		"--listen-quic", "0.0.0.0:0", "--quic-server-id", "0004", "--quic-rotation", "2", "--quic-key-file", keyFile})
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfg)
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), s.quicAddrs()[0].Port())
	lb := cfg.quic.lb

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tlsConf := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{QUICALPN}}
	first := newRecordingConn(t, lb.CIDLen())
	tr := &quic.Transport{Conn: first}
	defer tr.Close()
	conn, err := tr.Dial(ctx, net.UDPAddrFromAddrPort(dst), tlsConf, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	if ans, err := quicAsk(ctx, conn, "hello"); err != nil || ans != "b4: hello" {
		t.Fatalf("first request: %q, %v", ans, err)
	}

	second := newRecordingConn(t, lb.CIDLen())
	tr2 := &quic.Transport{Conn: second}
	defer tr2.Close()
	path, err := conn.AddPath(tr2)
	if err != nil {
		t.Fatal(err)
	}
	if err := path.Probe(ctx); err != nil {
		t.Fatalf("probing the new path: %v", err)
	}
	if err := path.Switch(); err != nil {
		t.Fatal(err)
	}
	sentBefore := second.packets()
	if ans, err := quicAsk(ctx, conn, "again"); err != nil || ans != "b4: again" {
		t.Fatalf("request after the migration: %q, %v", ans, err)
	}
	// The request went by the new socket. (The old one may still send an
	// acknowledgement it owed.)
	if n := second.packets(); n <= sentBefore {
		t.Errorf("the new socket sent nothing for the request after the switch")
	}

	var sc quiclb.Scratch
	used := map[string]bool{}
	for i, rc := range []*recordingConn{first, second} {
		dcids, from := rc.seen()
		if len(dcids) == 0 {
			t.Errorf("socket %d sent no short-header packet", i)
		}
		for _, id := range dcids {
			sid, err := lb.ServerID([]byte(id), &sc)
			if quiclb.RotationOf(id[0]) != 2 || err != nil || !bytes.Equal(sid, []byte{0, 4}) {
				t.Errorf("socket %d sent to connection ID %x: rotation %d, server ID %x (%v); want 2, 0004", i, id, quiclb.RotationOf(id[0]), sid, err)
			}
			if bytes.Equal([]byte(id)[1:3], []byte{0, 4}) {
				t.Errorf("connection ID %x has the server ID in the clear", id)
			}
			if i == 1 && used[id] {
				t.Errorf("the migrated path kept connection ID %x of the first", id)
			}
			used[id] = true
		}
		if len(from) != 1 || from[0] != dst.String() {
			t.Errorf("socket %d heard from %v, want %s only", i, from, dst)
		}
	}
}

// TestParseServeQUIC: the QUIC flags, and what they refuse.
func TestParseServeQUIC(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k")
	reset := filepath.Join(dir, "r")
	bad := filepath.Join(dir, "bad")
	for f, v := range map[string]string{key: hex.EncodeToString(testQUICKey) + "\n", reset: strings.Repeat("ab", 32), bad: "xyz"} {
		if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := parseServe([]string{"--name", "b1", "--listen-tcp", "", "--listen-udp", "", "--listen-quic", "0.0.0.0:443",
		"--quic-server-id", "00ff01", "--quic-rotation", "5", "--quic-nonce-len", "13", "--quic-key-file", key, "--quic-reset-key-file", reset})
	if err != nil {
		t.Fatal(err)
	}
	q := cfg.quic
	if len(q.addrs) != 1 || q.lb.Rotation() != 5 || q.lb.ServerIDLen() != 3 || q.lb.NonceLen() != 13 || !q.lb.Encrypted() ||
		!bytes.Equal(q.serverID, []byte{0, 0xff, 1}) || q.resetKey[0] != 0xab {
		t.Errorf("parsed %+v, %v", q, q.lb)
	}
	if cfg, err := parseServe([]string{"--name", "b1", "--listen-quic", "0.0.0.0:443", "--quic-server-id", "01"}); err != nil || cfg.quic.lb.Encrypted() || cfg.quic.resetKey == nil {
		t.Errorf("in the clear, a random reset key: %+v, %v", cfg.quic, err)
	}
	for _, args := range [][]string{
		{"--quic-server-id", "01"},
		{"--listen-quic", "0.0.0.0:443"},
		{"--listen-quic", "0.0.0.0:443", "--quic-server-id", "zz"},
		{"--listen-quic", "0.0.0.0:443", "--quic-server-id", "01", "--quic-rotation", "7"},
		{"--listen-quic", "0.0.0.0:443", "--quic-server-id", "01", "--quic-nonce-len", "3"},
		{"--listen-quic", "0.0.0.0:443", "--quic-server-id", "01", "--quic-nonce-len", "19"},
		{"--listen-quic", "0.0.0.0:443", "--quic-server-id", "01", "--quic-key-file", bad},
		{"--listen-quic", "0.0.0.0:443", "--quic-server-id", "01", "--quic-key-file", reset},
		{"--listen-quic", "0.0.0.0:443", "--quic-server-id", "01", "--quic-reset-key-file", key},
		{"--listen-quic", "0.0.0.0:443", "--quic-server-id", "01", "--quic-key-file", filepath.Join(dir, "none")},
	} {
		if _, err := parseServe(append([]string{"--name", "b1"}, args...)); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
}
