package e2e

// QUIC through `xlb run`, with real quic-go clients in the bed's client
// namespace and xlb-testserver's QUIC mode on the backends, whose
// connection IDs carry their server IDs (QUIC-LB, docs/config.md's
// [[backend_service.quic_lb]]).

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/sys/unix"

	"xlb/internal/nsx"
	"xlb/internal/syncbuf"
	"xlb/quiclb"
	"xlb/scripts/testbed"
)

// The QUIC ports of VIP4. A DSR frame keeps its destination port, so the
// backends' QUIC servers listen on the same ones.
const (
	quicPortPlain = 4431 // service quic: servers write their IDs in the clear (config rotation 0)
	quicPortEnc   = 4432 // service quic: servers encrypt them (config rotation 1)
	quicPortBase  = 4433 // service quic-base, without quic_lb: the servers of 4431
	// Service quic again, servers as on 4431, for the hand-made packets
	// alone: no earlier flow of another check shares a 5-tuple with them.
	quicPortFallback = 4434
)

// quicLBKey is the AES-128 key of the encrypted configuration.
const quicLBKey = "4c6f6f6b20617420746865206b657921"

// quicConns is how many connections each migration check makes.
const quicConns = 100

// quicServerID is backend bI's server ID: 000I.
func quicServerID(be string) string {
	i, _ := strconv.Atoi(strings.TrimPrefix(be, "b"))
	return fmt.Sprintf("%04x", i)
}

// quicConfig is one UDP service "quic" with QUIC-LB (rotation 0 in the
// clear, and rotation 1 encrypted when keyFile is set) over the named
// backends with their server IDs, on VIP4's quicPortPlain (and
// quicPortEnc); with base, quic on quicPortFallback too, and the service
// "quic-base" without QUIC-LB over the same backends on quicPortBase. TCP
// health checks of the bed's HTTP servers. Affinity CLIENT_IP_PORT_PROTO,
// so that UDP flows are tracked (T1) and xlb_service_new_connections_total
// shows which packets made an entry.
func quicConfig(b *testbed.Bed, drain time.Duration, keyFile string, base bool, backends ...string) string {
	var eps, baseEps []string
	for _, n := range backends {
		eps = append(eps, fmt.Sprintf("{ name = %q, ip = %q, server_id = %q }", n, b.Backend(n).Addr4, quicServerID(n)))
		baseEps = append(baseEps, fmt.Sprintf("{ name = %q, ip = %q }", n+"-base", b.Backend(n).Addr4))
	}
	rule := func(name string, port int, svc string) string {
		return fmt.Sprintf("\n[[forwarding_rule]]\nname = %q\nip_address = %q\nip_protocol = \"UDP\"\nports = [\"%d\"]\nbackend_service = %q\n",
			name, testbed.VIP4, port, svc)
	}
	text := bedHead(b.LB.Iface, adminSocket(b.LB.NS)) + tcpCheck + fmt.Sprintf(`
[[backend_service]]
name = "quic"
protocol = "UDP"
health_checks = ["hc"]
session_affinity = "CLIENT_IP_PORT_PROTO"
connection_draining_timeout_sec = %d
  [[backend_service.quic_lb]]
  config_rotation = 0
  server_id_length = 2
  nonce_length = 6
`, int(drain/time.Second))
	if keyFile != "" {
		text += fmt.Sprintf("  [[backend_service.quic_lb]]\n  config_rotation = 1\n  server_id_length = 2\n  nonce_length = 6\n  key_file = %q\n", keyFile)
	}
	text += fmt.Sprintf("  [[backend_service.backend]]\n  group = \"primary\"\n  endpoints = [ %s ]\n", strings.Join(eps, ", "))
	if base {
		text += fmt.Sprintf("\n[[backend_service]]\nname = \"quic-base\"\nprotocol = \"UDP\"\nhealth_checks = [\"hc\"]\n"+
			"session_affinity = \"CLIENT_IP_PORT_PROTO\"\n"+
			"  [[backend_service.backend]]\n  group = \"primary\"\n  endpoints = [ %s ]\n", strings.Join(baseEps, ", "))
	}
	text += rule("quic-plain", quicPortPlain, "quic")
	if keyFile != "" {
		text += rule("quic-enc", quicPortEnc, "quic")
	}
	if base {
		text += rule("quic-fallback", quicPortFallback, "quic")
	}
	if base {
		text += rule("quic-base", quicPortBase, "quic-base")
	}
	return text
}

// cidCounts sums xlb's QUIC-LB counters over the queues:
// xlb_quic_cid_routed_total under "routed", xlb_quic_cid_fallback_total
// under each reason.
func cidCounts(t *testing.T, b *testbed.Bed) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for series, v := range metrics(t, b) {
		switch {
		case strings.HasPrefix(series, "xlb_quic_cid_routed_total{"):
			out["routed"] += v
		case strings.HasPrefix(series, "xlb_quic_cid_fallback_total{"):
			_, reason, ok := strings.Cut(series, `reason="`)
			if !ok {
				t.Fatalf("/metrics: %s has no reason", series)
			}
			out[strings.TrimSuffix(reason, `"}`)] += v
		}
	}
	if _, ok := out["unknown_server_id"]; !ok {
		t.Fatal("/metrics has no xlb_quic_cid_fallback_total{reason=\"unknown_server_id\"}")
	}
	return out
}

// cidDelta is what each counter of cidCounts rose by from before to after.
func cidDelta(before, after map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		d[k] = v - before[k]
	}
	return d
}

// writeSecret writes a key file as xlb wants it: one line, mode 0600.
func writeSecret(t *testing.T, dir, name, hexKey string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	must(t, os.WriteFile(p, []byte(hexKey+"\n"), 0o600))
	return p
}

// startQUICServer runs, in backend be's namespace, an xlb-testserver in
// QUIC mode only (its server ID 000I, the flags args), next to the bed's
// own server, and waits until its sockets are bound. It is stopped when
// the test ends; a failed test gets its log.
func startQUICServer(t *testing.T, b *testbed.Bed, be string, args ...string) {
	t.Helper()
	pidfile := filepath.Join(t.TempDir(), be+".pid")
	log := &syncbuf.Buffer{}
	argv := append([]string{"netns", "exec", b.Backend(be).NS, serverBin, "serve", "--name", be,
		"--listen-tcp", "", "--listen-udp", "", "--pidfile", pidfile, "--quic-server-id", quicServerID(be)}, args...)
	cmd := exec.Command("ip", argv...)
	cmd.Stdout, cmd.Stderr = log, log
	must(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("QUIC server %s %v:\n%s", be, args, log.String())
		}
	})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if raw, _ := os.ReadFile(pidfile); len(raw) > 0 {
			return
		}
		select {
		case <-exited:
			t.Fatalf("QUIC server %s exited:\n%s", be, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("QUIC server %s: no pid file within 15 s:\n%s", be, log.String())
		}
	}
}

// udpIn opens a UDP socket of namespace ns on an ephemeral port.
func udpIn(ns string) (*net.UDPConn, error) {
	var c *net.UDPConn
	err := nsx.Do(ns, func() error {
		var err error
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
		return err
	})
	return c, err
}

// quicClient is a quic-go connection from a namespace: one transport
// (UDP socket) per path it has used.
type quicClient struct {
	ns    string
	conn  *quic.Conn
	trs   []*quic.Transport
	socks []*net.UDPConn
}

var quicTLS = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"xlb-test"}}

// dialQUIC connects from ns to dst.
func dialQUIC(ctx context.Context, ns string, dst netip.AddrPort) (*quicClient, error) {
	c := &quicClient{ns: ns}
	tr, err := c.transport()
	if err != nil {
		return nil, err
	}
	c.conn, err = tr.Dial(ctx, net.UDPAddrFromAddrPort(dst), quicTLS, &quic.Config{MaxIdleTimeout: time.Minute})
	if err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *quicClient) transport() (*quic.Transport, error) {
	sock, err := udpIn(c.ns)
	if err != nil {
		return nil, err
	}
	tr := &quic.Transport{Conn: sock}
	c.socks, c.trs = append(c.socks, sock), append(c.trs, tr)
	return tr, nil
}

// port is the client's UDP port now: its latest path's.
func (c *quicClient) port() int { return c.socks[len(c.socks)-1].LocalAddr().(*net.UDPAddr).Port }

// ask sends req on a new stream and returns the backend that answered
// "NAME: req".
func (c *quicClient) ask(ctx context.Context, req string) (string, error) {
	st, err := c.conn.OpenStreamSync(ctx)
	if err != nil {
		return "", err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(d)
	}
	// A stream's reads heed its deadline only: cancel it with ctx.
	defer context.AfterFunc(ctx, func() { st.CancelRead(0); st.CancelWrite(0) })()
	if _, err := st.Write([]byte(req)); err != nil {
		return "", err
	}
	if err := st.Close(); err != nil {
		return "", err
	}
	var ans bytes.Buffer
	if _, err := ans.ReadFrom(st); err != nil {
		return "", err
	}
	name, rest, ok := strings.Cut(ans.String(), ": ")
	if !ok || rest != req {
		return "", fmt.Errorf("answer %q to %q", ans.String(), req)
	}
	return name, nil
}

// migrate moves the connection to a new UDP socket, a new client port,
// as quic-go's API does it: a new transport, a path on it, probed
// (PATH_CHALLENGE, PATH_RESPONSE), then switched to.
func (c *quicClient) migrate(ctx context.Context) error {
	tr, err := c.transport()
	if err != nil {
		return err
	}
	path, err := c.conn.AddPath(tr)
	if err != nil {
		return fmt.Errorf("AddPath: %w", err)
	}
	if err := path.Probe(ctx); err != nil {
		return fmt.Errorf("probing the path from port %d: %w", c.port(), err)
	}
	return path.Switch()
}

func (c *quicClient) close() {
	if c.conn != nil {
		_ = c.conn.CloseWithError(0, "")
	}
	for _, tr := range c.trs {
		_ = tr.Close()
	}
	for _, s := range c.socks {
		_ = s.Close()
	}
}

// migration is what one connection of a migration check saw.
type migration struct {
	before, after string // the backends that answered
	err           error  // where it stopped, if it did
}

// migrateMany opens n connections from b's client to dst, at most par
// at a time; each asks once, migrates to a new client port (the probe
// given probe at most), and asks again. Every socket stays open until all
// are done, so that no two connections share a client port (a 5-tuple).
func migrateMany(b *testbed.Bed, dst netip.AddrPort, n, par int, probe time.Duration) []migration {
	out := make([]migration, n)
	clients := make([]*quicClient, n)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.close()
			}
		}
	}()
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			m := &out[i]
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := dialQUIC(ctx, b.Clients[0].NS, dst)
			if err != nil {
				m.err = fmt.Errorf("dial: %w", err)
				return
			}
			clients[i] = c
			if m.before, err = c.ask(ctx, fmt.Sprintf("connection %d, first", i)); err != nil {
				m.err = fmt.Errorf("first request: %w", err)
				return
			}
			pctx, pcancel := context.WithTimeout(ctx, probe)
			err = c.migrate(pctx)
			pcancel()
			if err != nil {
				m.err = fmt.Errorf("migration: %w", err)
				return
			}
			if m.after, err = c.ask(ctx, fmt.Sprintf("connection %d, after migrating to port %d", i, c.port())); err != nil {
				m.err = fmt.Errorf("request after the migration: %w", err)
			}
		})
	}
	wg.Wait()
	return out
}

// tally counts the connections that kept their backend, and the first
// answers per backend.
func tally(ms []migration) (kept int, first map[string]int, failed []string) {
	first = map[string]int{}
	for i, m := range ms {
		if m.before != "" {
			first[m.before]++
		}
		switch {
		case m.err == nil && m.after == m.before:
			kept++
		case m.err == nil:
			failed = append(failed, fmt.Sprintf("connection %d: answered by %s, by %s after migrating", i, m.before, m.after))
		default:
			failed = append(failed, fmt.Sprintf("connection %d (first answered by %q): %v", i, m.before, m.err))
		}
	}
	return kept, first, failed
}

// TestQUICLB_MigrationKeepsBackend: 100 quic-go connections to a service
// with QUIC-LB each ask which backend holds them, move to a new client
// port in the middle of the connection (a new socket: the 5-tuple
// changes) and ask again: all 100 keep their backend, with the servers'
// IDs in the clear and encrypted, and the migrated paths make no tracking
// entry (the ID carries them). The same through a service without
// QUIC-LB (the baseline) keeps only the connections Maglev happens to send
// back to their backend, about a third. Packets with connection IDs xlb
// cannot route (config rotation 0b111, a rotation the service lacks, a
// server ID no endpoint has) still reach a backend, by the usual path.
func TestQUICLB_MigrationKeepsBackend(t *testing.T) {
	t.Parallel()
	b := upBed(t, testbed.Options{Prefix: "e2eq", Failover: -1})
	dir := t.TempDir()
	key := writeSecret(t, dir, "quic-lb.key", quicLBKey)
	backends := []string{"b1", "b2", "b3"}
	for _, be := range backends {
		// Stateless reset keys of their own (the default): a reset's token
		// names the server that sent it (Fallback below).
		startQUICServer(t, b, be, "--listen-quic", fmt.Sprintf("0.0.0.0:%d,0.0.0.0:%d,0.0.0.0:%d", quicPortPlain, quicPortBase, quicPortFallback), "--quic-rotation", "0")
		startQUICServer(t, b, be, "--listen-quic", fmt.Sprintf("0.0.0.0:%d", quicPortEnc), "--quic-rotation", "1", "--quic-key-file", key)
	}
	cfg := filepath.Join(dir, "xlb.toml")
	must(t, os.WriteFile(cfg, []byte(quicConfig(b, 10*time.Second, key, true, backends...)), 0o644))
	startXLB(t, b, cfg)
	waitStatus(t, b, "b1-b3 healthy", allHealthy)

	newConns := func(svc string) float64 {
		return metric(t, metrics(t, b), fmt.Sprintf("xlb_service_new_connections_total{service=%q}", svc))
	}
	for _, tc := range []struct {
		name string
		port uint16
	}{{"Plaintext", quicPortPlain}, {"Encrypted", quicPortEnc}} {
		t.Run(tc.name, func(t *testing.T) {
			before, cidBefore := newConns("quic"), cidCounts(t, b)
			start := time.Now()
			kept, first, failed := tally(migrateMany(b, netip.AddrPortFrom(testbed.VIP4, tc.port), quicConns, 20, 10*time.Second))
			t.Logf("%d of %d connections kept their backend across the migration (first answers %v) in %v",
				kept, quicConns, first, time.Since(start).Round(time.Millisecond))
			if kept != quicConns {
				t.Errorf("%d of %d connections lost or changed their backend:\n%s", quicConns-kept, quicConns, strings.Join(failed, "\n"))
			}
			for _, be := range backends {
				if first[be] == 0 {
					t.Errorf("no connection started on %s (%v): the check did not cover every backend", be, first)
				}
			}
			// One tracking entry per connection: its Initial's 5-tuple
			// (the client chose that ID). Everything after the handshake,
			// the migrated path included, went by the server's ID.
			if d := newConns("quic") - before; d != quicConns {
				t.Errorf("xlb_service_new_connections_total{service=\"quic\"} grew by %v over %d connections, want %d: the migrated paths were tracked",
					d, quicConns, quicConns)
			}
			// xlb's own count: every packet after the Initials routed by
			// its ID (two requests at least per connection), no fallback
			// but the Initials'.
			d := cidDelta(cidBefore, cidCounts(t, b))
			t.Logf("xlb_quic_cid_*_total rose by %v", d)
			for reason, v := range d {
				switch {
				case reason == "routed" && v < 2*quicConns, reason == "client_chosen" && v < quicConns:
					t.Errorf("xlb_quic_cid %s rose by %v over %d connections", reason, v, quicConns)
				case reason != "routed" && reason != "client_chosen" && v != 0:
					t.Errorf("xlb_quic_cid_fallback_total{reason=%q} rose by %v: xlb could not route IDs the servers issued", reason, v)
				}
			}
		})
	}

	t.Run("Baseline", func(t *testing.T) {
		before := newConns("quic-base")
		// A probe the wrong backend got is never answered: 2 s ends it (a
		// slow probe that would have passed only lowers the figure), all
		// connections at once.
		kept, first, failed := tally(migrateMany(b, netip.AddrPortFrom(testbed.VIP4, quicPortBase), quicConns, quicConns, 2*time.Second))
		d := newConns("quic-base") - before
		t.Logf("baseline without quic_lb: %d of %d connections kept their backend across the migration (first answers %v), %v new tracked flows",
			kept, quicConns, first, d)
		// Here a migrated path is a new flow, chosen by its 5-tuple.
		if d <= quicConns {
			t.Errorf("xlb_service_new_connections_total{service=\"quic-base\"} grew by %v over %d migrated connections; want more than %d", d, quicConns, quicConns)
		}
		if len(failed) > 0 {
			t.Logf("for example: %s", failed[0])
		}
		// About a third, by Maglev over three backends; 80 of 100 is more
		// than ten standard deviations away.
		if kept > 80 {
			t.Errorf("%d of %d kept their backend without quic_lb: the baseline shows nothing", kept, quicConns)
		}
	})

	t.Run("Fallback", func(t *testing.T) { checkQUICFallback(t, b, backends) })
}

// checkQUICFallback sends hand-made short-header packets to the VIP's
// quicPortFallback, each kind of connection ID from 20 client ports. No
// server has such a connection; the one a packet reaches answers with a
// stateless reset whose token (made of the ID and the server's own reset
// key) names it: the token each server gives for the ID is learnt first by
// sending it to the server's own address. A server ID that names b2 goes
// to b2 every time; the others all reach some backend, by the 5-tuple
// (Maglev): more than one backend, each a new tracked flow.
func checkQUICFallback(t *testing.T, b *testbed.Bed, backends []string) {
	plain, err := quiclb.New(0, 2, 6, nil)
	must(t, err)
	k, _ := hex.DecodeString(quicLBKey)
	enc, err := quiclb.New(1, 2, 6, k)
	must(t, err)
	random := func(n int) []byte {
		p := make([]byte, n)
		_, _ = rand.Read(p)
		return p
	}
	encode := func(c *quiclb.Config, sid string) []byte {
		s, _ := hex.DecodeString(sid)
		id, err := c.Encode(nil, s, random(c.NonceLen()), nil)
		must(t, err)
		return id
	}
	withRotation := func(r byte) []byte {
		id := random(plain.CIDLen())
		id[0] = r<<5 | byte(len(id)-1)
		return id
	}
	const tries = 20
	kinds := []struct {
		name   string
		cid    []byte
		routed string // the backend it must reach; "": any
		reason string // what xlb counts it as
	}{
		{"routed to b2", encode(plain, "0002"), "b2", "routed"},
		{"encrypted, routed to b3", encode(enc, "0003"), "b3", "routed"},
		{"unroutable", withRotation(quiclb.Unroutable), "", "unroutable"},
		{"unknown config rotation", withRotation(5), "", "unknown_config"},
		{"unknown server ID", encode(plain, "00ff"), "", "unknown_server_id"},
		{"unknown server ID, encrypted", encode(enc, "00ff"), "", "unknown_server_id"},
	}
	sent := map[string]int{} // packets sent to the VIP, by reason
	var socks []*net.UDPConn
	defer func() {
		for _, c := range socks {
			c.Close()
		}
	}()
	beforeMetrics, cidBefore := metrics(t, b), cidCounts(t, b)
	fallbacks := 0
	for _, kind := range kinds {
		// A short header (fixed bit set, long-header bit clear), the ID,
		// and enough that a server may answer with a reset (quic-go
		// answers nothing shorter than 43 octets).
		pkt := append(append([]byte{0x40 | random(1)[0]&0x3f}, kind.cid...), random(64)...)
		tokens := map[string]string{}
		for _, be := range backends {
			tok, err := resetToken(b.Clients[0].NS, netip.AddrPortFrom(b.Backend(be).Addr4, quicPortFallback), pkt, &socks, new(int))
			if err != nil {
				t.Fatalf("%s straight to %s: %v", kind.name, be, err)
			}
			tokens[tok] = be
		}
		if len(tokens) != len(backends) {
			t.Fatalf("%s: the servers' reset tokens are not distinct: %v", kind.name, tokens)
		}
		got := map[string]int{}
		n := 0
		for range tries {
			tok, err := resetToken(b.Clients[0].NS, netip.AddrPortFrom(testbed.VIP4, quicPortFallback), pkt, &socks, &n)
			if err != nil {
				t.Fatalf("%s to the VIP: %v", kind.name, err)
			}
			be, ok := tokens[tok]
			if !ok {
				be = "unknown token " + tok
			}
			got[be]++
		}
		sent[kind.reason] += n
		t.Logf("%s (connection ID %x) from %d ports: answered by %v", kind.name, kind.cid, tries, got)
		switch {
		case kind.routed != "" && got[kind.routed] != tries:
			t.Errorf("%s: answered by %v, want %s every time", kind.name, got, kind.routed)
		case kind.routed == "":
			fallbacks += tries
			n := 0
			for _, be := range backends {
				n += got[be]
			}
			if n != tries || len(got) < 2 {
				t.Errorf("%s: answered by %v; want every packet at a backend, by the 5-tuple (more than one backend)", kind.name, got)
			}
		}
	}
	// The routed packets made no tracking entry; each fallback one did.
	after := metrics(t, b)
	series := `xlb_service_new_connections_total{service="quic"}`
	if d := metric(t, after, series) - metric(t, beforeMetrics, series); d != float64(fallbacks) {
		t.Errorf("%s grew by %v; want %d, one per packet that fell back", series, d, fallbacks)
	}
	// xlb counted each packet under its reason, and nothing else.
	d := cidDelta(cidBefore, cidCounts(t, b))
	t.Logf("xlb_quic_cid_*_total rose by %v; packets sent to the VIP by reason %v", d, sent)
	for reason, v := range d {
		if v != float64(sent[reason]) {
			t.Errorf("xlb_quic_cid %s rose by %v; %d such packets were sent", reason, v, sent[reason])
		}
	}
}

// resetToken sends pkt to dst from a new socket of ns and returns the
// token of the stateless reset that answers it (its last 16 octets, hex),
// sending again up to three times if nothing comes within a second (each
// send counted in *sent). The socket is added to *socks, for the caller
// to close: while it is open, no other socket has its port.
func resetToken(ns string, dst netip.AddrPort, pkt []byte, socks *[]*net.UDPConn, sent *int) (string, error) {
	c, err := udpIn(ns)
	if err != nil {
		return "", err
	}
	*socks = append(*socks, c)
	buf := make([]byte, 2048)
	for range 3 {
		if _, err := c.WriteToUDPAddrPort(pkt, dst); err != nil {
			return "", err
		}
		*sent++
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			return "", err
		}
		if from != dst || n < 17 || buf[0]&0xc0 != 0x40 {
			return "", fmt.Errorf("%d octets from %s (first %#x): no stateless reset from %s", n, from, buf[0], dst)
		}
		return hex.EncodeToString(buf[n-16 : n]), nil
	}
	return "", fmt.Errorf("no answer from %s to three packets", dst)
}

// quicStatus is the part of /status the drain test reads.
type quicStatus struct {
	NowMs    int64 `json:"now_ms"`
	Services []struct {
		Name     string `json:"name"`
		Backends []struct {
			Name             string `json:"name"`
			Removed          bool   `json:"removed"`
			Draining         bool   `json:"draining"`
			DrainUntilMs     int64  `json:"drain_until_ms"`
			ForwardedPackets uint64 `json:"forwarded_packets"`
		} `json:"backends"`
	} `json:"services"`
}

// quicBackend is backend name of service quic in s: whether /status lists
// it, whether it drains, until when, and its forwarded frames.
func quicBackend(t *testing.T, b *testbed.Bed, name string) (s quicStatus, listed, draining bool, until int64, fwd uint64) {
	t.Helper()
	body := admin(t, b, "/status")
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("/status: %v\n%s", err, body)
	}
	for _, svc := range s.Services {
		for _, be := range svc.Backends {
			if svc.Name == "quic" && be.Name == name {
				return s, true, be.Draining, be.DrainUntilMs, be.ForwardedPackets
			}
		}
	}
	return s, false, false, 0, 0
}

// quicDrain is connection_draining_timeout_sec of the drain test: far
// longer than its checks during the drain take (about a second), which it
// checks by xlb's clock.
const quicDrain = 10 * time.Second

// TestM5_QUICMigratedConnectionsDrain: a reload removes b3. During its
// drain its QUIC connections, routed by their IDs, still reach it, also
// after migrating to a new client port (a 5-tuple xlb never saw), while
// no new connection does; the other backends' connections keep theirs.
// Once xlb reports the drain over, b3's connections reach another
// backend, which has no such connection and answers with a stateless
// reset (the servers share a reset key, as servers behind one balancer
// do; b3, which has the connection, would not reset it): one that stayed
// on its first path ends with quic-go's StatelessResetError; the migrated
// ones receive the reset with the token the other servers give for their
// connection IDs (learnt by sending the ID to each straight), which
// quic-go v0.65.0 only checks on a connection's first path. The other
// backends' connections still answer from their backends.
func TestM5_QUICMigratedConnectionsDrain(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	b := upBed(t, testbed.Options{Prefix: "e2eqd", Failover: -1})
	dir := t.TempDir()
	reset := make([]byte, 32)
	_, _ = rand.Read(reset)
	resetKey := writeSecret(t, dir, "reset.key", hex.EncodeToString(reset))
	for _, be := range []string{"b1", "b2", "b3"} {
		startQUICServer(t, b, be, "--listen-quic", fmt.Sprintf("0.0.0.0:%d", quicPortPlain), "--quic-reset-key-file", resetKey)
	}
	cfg := filepath.Join(dir, "xlb.toml")
	write := func(backends ...string) {
		must(t, os.WriteFile(cfg, []byte(quicConfig(b, quicDrain, "", false, backends...)), 0o644))
	}
	write("b1", "b2", "b3")
	p := startXLB(t, b, cfg)
	waitStatus(t, b, "b1-b3 healthy", allHealthy)
	ns, vip := b.Clients[0].NS, netip.AddrPortFrom(testbed.VIP4, quicPortPlain)

	type held struct {
		c        *quicClient
		backend  string
		migrated bool
	}
	var conns []*held
	per := map[string]int{}
	t.Cleanup(func() {
		for _, h := range conns {
			h.c.close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ask := func(c *quicClient, req string) (string, error) {
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		defer acancel()
		return c.ask(actx, req)
	}
	const need = 4
	for i := 0; i < 80 && (per["b1"] < need || per["b2"] < need || per["b3"] < need); i++ {
		c, err := dialQUIC(ctx, ns, vip)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		be, err := ask(c, "hello")
		if err != nil {
			c.close()
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, &held{c: c, backend: be})
		per[be]++
	}
	if per["b1"] < need || per["b2"] < need || per["b3"] < need {
		t.Fatalf("connections per backend %v, want %d or more on each", per, need)
	}

	// The reload: b3 leaves.
	write("b1", "b2")
	if out, err := exec.Command(xlbBin, "reload", "-c", cfg, "--pid", strconv.Itoa(p.cmd.Process.Pid)).CombinedOutput(); err != nil {
		t.Fatalf("xlb reload: %v\n%s", err, out)
	}
	waitMetric(t, b, "xlb_reload_success_total", 1)
	t.Logf("phase: reloaded %v after the start", time.Since(t0).Round(time.Millisecond))
	_, listed, draining, until, fwdBefore := quicBackend(t, b, "b3")
	cidReload := cidCounts(t, b)
	if !listed || !draining {
		t.Fatalf("after the reload /status lists b3 %v, draining %v; want it draining", listed, draining)
	}

	// During the drain: every b3 connection but its first moves to a new
	// port, and all of them ask.
	stayed := 0
	for i, h := range conns {
		if h.backend == "b3" {
			if stayed++; stayed > 1 {
				mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
				err := h.c.migrate(mctx)
				mcancel()
				if err != nil {
					t.Fatalf("b3's connection %d, draining: %v", i, err)
				}
				h.migrated = true
			}
		}
		if be, err := ask(h.c, fmt.Sprintf("connection %d, draining", i)); err != nil || be != h.backend {
			t.Errorf("connection %d of %s during b3's drain (migrated %v): answered by %q, %v", i, h.backend, h.migrated, be, err)
		}
	}
	fresh := map[string]int{}
	for i := range 15 {
		c, err := dialQUIC(ctx, ns, vip)
		if err != nil {
			t.Fatalf("new connection %d during the drain: %v", i, err)
		}
		be, err := ask(c, "new")
		c.close()
		if err != nil {
			t.Fatalf("new connection %d during the drain: %v", i, err)
		}
		fresh[be]++
	}
	st, _, draining, _, fwdDuring := quicBackend(t, b, "b3")
	cidDrained := cidCounts(t, b)
	t.Logf("during the drain: b3's %d connections answered, %d of them after migrating; b3 forwarded %d frames more; new connections %v",
		per["b3"], per["b3"]-1, fwdDuring-fwdBefore, fresh)
	if !draining || st.NowMs >= until {
		t.Fatalf("b3's drain ended (now %d ms, until %d ms) before the checks of it were done: the machine is slower than a %v drain allows", st.NowMs, until, quicDrain)
	}
	if fwdDuring <= fwdBefore {
		t.Errorf("b3's forwarded_packets %d -> %d during the drain: xlb sent it nothing", fwdBefore, fwdDuring)
	}
	if fresh["b3"] > 0 || fresh["b1"]+fresh["b2"] != 15 {
		t.Errorf("new connections during b3's drain: %v; want none on b3", fresh)
	}
	// Every packet routed by its ID but the new connections' Initials.
	d := cidDelta(cidReload, cidDrained)
	t.Logf("during the drain xlb_quic_cid_*_total rose by %v", d)
	for reason, v := range d {
		if reason != "routed" && reason != "client_chosen" && v != 0 {
			t.Errorf("during the drain xlb_quic_cid_fallback_total{reason=%q} rose by %v", reason, v)
		}
	}

	t.Logf("phase: drain checks done %v after the start", time.Since(t0).Round(time.Millisecond))
	// Until xlb says the drain is over.
	for deadline := time.Now().Add(quicDrain + 30*time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, listed, draining, _, _ := quicBackend(t, b, "b3"); !listed || !draining {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b3 still draining %v after the reload, its drain %v", quicDrain+30*time.Second, quicDrain)
		}
	}
	var socks []*net.UDPConn
	defer func() {
		for _, c := range socks {
			c.Close()
		}
	}()
	t.Logf("phase: drain over %v after the start", time.Since(t0).Round(time.Millisecond))
	ps := openPacketSocket(t, b.Clients[0])
	resets := 0
	for i, h := range conns {
		if h.backend != "b3" {
			if be, err := ask(h.c, fmt.Sprintf("connection %d, after the drain", i)); err != nil || be != h.backend {
				t.Errorf("connection %d of %s after b3's drain: answered by %q, %v", i, h.backend, be, err)
			}
			continue
		}
		if !h.migrated {
			be, err := ask(h.c, fmt.Sprintf("connection %d, after the drain", i))
			var sr *quic.StatelessResetError
			switch {
			case err == nil:
				t.Errorf("b3's connection %d still answered by %s after the drain", i, be)
			case !errors.As(err, &sr) && !errors.As(context.Cause(h.c.conn.Context()), &sr):
				t.Errorf("b3's connection %d after the drain: %v; want a stateless reset from the backend it reached", i, err)
			default:
				resets++
			}
			continue
		}
		// A migrated one: ask, and watch the client's interface for a
		// reset, to the path's port, with the token of an ID the path
		// sent to.
		actx, acancel := context.WithTimeout(ctx, 15*time.Second)
		answered := make(chan error, 1)
		go func() {
			be, err := h.c.ask(actx, fmt.Sprintf("connection %d, after the drain", i))
			if err == nil {
				err = fmt.Errorf("answered by %s", be)
			} else {
				err = nil
			}
			answered <- err
		}()
		found, ids := watchReset(t, ps, h.c.port(), actx, func(id []byte) string {
			// One key everywhere: b1's token for the ID is b2's.
			pkt := append(append([]byte{0x41}, id...), make([]byte, 64)...)
			tok, err := resetToken(ns, netip.AddrPortFrom(b.Backend("b1").Addr4, quicPortPlain), pkt, &socks, new(int))
			if err != nil {
				t.Fatalf("learning the reset token of %x from b1: %v", id, err)
			}
			return tok
		})
		acancel()
		if err := <-answered; err != nil {
			t.Errorf("b3's migrated connection %d after the drain: %v", i, err)
		} else if !found {
			t.Errorf("b3's migrated connection %d after the drain: no stateless reset for its IDs %x within 15 s", i, ids)
		} else {
			resets++
		}
	}
	t.Logf("phase: after-drain checks done %v after the start", time.Since(t0).Round(time.Millisecond))
	// b3's packets fell back: its server ID names a backend past its drain
	// (backend_unavailable), or, once its slot is freed, none.
	d = cidDelta(cidDrained, cidCounts(t, b))
	t.Logf("after the drain xlb_quic_cid_*_total rose by %v", d)
	if n := d["backend_unavailable"] + d["unknown_server_id"]; n < float64(per["b3"]) {
		t.Errorf("after the drain %v of b3's packets fell back (backend_unavailable, unknown_server_id), from %d connections", n, per["b3"])
	}
	t.Logf("after the drain: %d of b3's %d connections reset by the backend they now reach (%d of them migrated)", resets, per["b3"], per["b3"]-1)
}

// watchReset reads the frames of the client's interface (ps) to and from
// UDP port port until one to it ends with the stateless reset token of a
// connection ID a short-header packet from it was sent to (token gives an
// ID's token) or ctx ends. It returns whether one came, and the IDs seen.
func watchReset(t *testing.T, ps *packetSocket, port int, ctx context.Context, token func(id []byte) string) (bool, [][]byte) {
	t.Helper()
	tokens := map[string]string{} // ID -> token
	tails := map[string]bool{}
	var ids [][]byte
	buf := make([]byte, 9216)
	for ctx.Err() == nil {
		n, _, err := unix.Recvfrom(ps.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		must(t, err)
		f := buf[:n]
		if n < 14+20+8 || f[12] != 0x08 || f[13] != 0x00 || f[14+9] != 17 {
			continue // IPv4 UDP only
		}
		udp := f[14+int(f[14]&0xf)*4:]
		if len(udp) < 8+1+9 {
			continue
		}
		src, dst, payload := int(udp[0])<<8|int(udp[1]), int(udp[2])<<8|int(udp[3]), udp[8:]
		switch {
		case src == port && payload[0]&0xc0 == 0x40:
			id := string(payload[1 : 1+9])
			if _, ok := tokens[id]; !ok {
				tokens[id] = token([]byte(id))
				ids = append(ids, []byte(id))
			}
		case dst == port && len(payload) >= 17:
			tails[hex.EncodeToString(payload[len(payload)-16:])] = true
		}
		for _, tok := range tokens {
			if tails[tok] {
				return true, ids
			}
		}
	}
	return false, ids
}
