package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"go.uber.org/zap"

	"xlb/quiclb"
)

// QUICALPN is the application protocol of the QUIC mode: on each stream
// the client sends a request and closes its side; the server answers
// "NAME: request" and closes its side, as the UDP echo does.
const QUICALPN = "xlb-test"

// maxQUICRequest bounds what a stream's request may hold.
const maxQUICRequest = 4096

// quicConfig is the QUIC mode's part of the serve flags.
type quicConfig struct {
	addrs []netip.AddrPort
	// lb writes the server ID into every connection ID (QUIC-LB).
	lb       *quiclb.Config
	serverID []byte
	// resetKey derives the stateless reset tokens; nil: a random key of
	// this process's own, so that the token a server sends for a
	// connection ID names the server. Servers behind one balancer share
	// one key, so that any of them can reset a connection it does not
	// have (one another server issued).
	resetKey *quic.StatelessResetKey
}

// parseQUIC checks the QUIC flags; none at all is no QUIC mode.
func parseQUIC(listen, serverID string, rotation, nonceLen int, keyFile, resetKeyFile string) (quicConfig, error) {
	var q quicConfig
	var err error
	if q.addrs, err = parseAddrs("--listen-quic", listen); err != nil {
		return q, err
	}
	if len(q.addrs) == 0 {
		if serverID != "" || keyFile != "" || resetKeyFile != "" {
			return q, fmt.Errorf("serve: --quic-server-id and the QUIC key files need --listen-quic (%w)", errUsage)
		}
		return q, nil
	}
	if q.serverID, err = hex.DecodeString(serverID); err != nil || len(q.serverID) == 0 {
		return q, fmt.Errorf("serve: --quic-server-id: want the server ID in hex, got %q (%w)", serverID, errUsage)
	}
	if rotation < 0 || rotation > quiclb.MaxRotation {
		return q, fmt.Errorf("serve: --quic-rotation %d: want 0 to %d (%w)", rotation, quiclb.MaxRotation, errUsage)
	}
	var key []byte
	if keyFile != "" {
		if key, err = readHexKey(keyFile, quiclb.KeyLen); err != nil {
			return q, err
		}
	}
	if q.lb, err = quiclb.New(uint8(rotation), len(q.serverID), nonceLen, key); err != nil {
		return q, fmt.Errorf("serve: QUIC-LB: %v (%w)", err, errUsage)
	}
	if resetKeyFile != "" {
		raw, err := readHexKey(resetKeyFile, len(quic.StatelessResetKey{}))
		if err != nil {
			return q, err
		}
		q.resetKey = (*quic.StatelessResetKey)(raw)
	} else {
		q.resetKey = new(quic.StatelessResetKey)
		if _, err := rand.Read(q.resetKey[:]); err != nil {
			return q, err
		}
	}
	return q, nil
}

// readHexKey reads a file of one line of 2n hex digits: xlb's key_file
// format.
func readHexKey(name string, n int) ([]byte, error) {
	raw, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil || len(key) != n {
		return nil, fmt.Errorf("serve: %s does not hold one line of %d hex digits", name, 2*n)
	}
	return key, nil
}

// cidGenerator makes the server's connection IDs as the QUIC-LB draft
// says: the configuration's first octet, then the server ID and a random
// nonce, in the clear or encrypted (quiclb.Config.Encode). quic-go asks
// it for every ID the server issues: the one of the handshake and those
// of NEW_CONNECTION_ID frames, which a client moves to when it migrates.
type cidGenerator struct {
	cfg      *quiclb.Config
	serverID []byte
}

func (g cidGenerator) GenerateConnectionID() (quic.ConnectionID, error) {
	nonce := make([]byte, g.cfg.NonceLen())
	if _, err := rand.Read(nonce); err != nil {
		return quic.ConnectionID{}, err
	}
	var buf [1 + quiclb.MaxBlockLen]byte
	id, err := g.cfg.Encode(buf[:0], g.serverID, nonce, nil)
	if err != nil {
		return quic.ConnectionID{}, err
	}
	return quic.ConnectionIDFromBytes(id), nil
}

func (g cidGenerator) ConnectionIDLen() int { return g.cfg.CIDLen() }

// quicServer is one UDP socket of the QUIC mode with its transport.
type quicServer struct {
	conn *net.UDPConn
	tr   *quic.Transport
	ln   *quic.Listener
}

// listenQUIC binds ap. A *net.UDPConn lets quic-go read each datagram's
// destination and answer from it, so that a server on the wildcard
// address answers from the VIP it was sent to (DSR), as the UDP echo does.
func listenQUIC(ap netip.AddrPort, q quicConfig, tlsConf *tls.Config) (*quicServer, error) {
	conn, err := net.ListenUDP(network("udp", ap), net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return nil, err
	}
	s := &quicServer{conn: conn, tr: &quic.Transport{
		Conn:                  conn,
		ConnectionIDGenerator: cidGenerator{cfg: q.lb, serverID: q.serverID},
		StatelessResetKey:     q.resetKey,
	}}
	s.ln, err = s.tr.Listen(tlsConf, &quic.Config{MaxIdleTimeout: time.Minute})
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *quicServer) addr() netip.AddrPort { return s.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

func (s *quicServer) close() {
	if s.ln != nil {
		_ = s.ln.Close()
	}
	_ = s.tr.Close()
	_ = s.conn.Close()
}

// serve accepts connections until the listener is closed.
func (s *quicServer) serve(ctx context.Context, name string, log *zap.Logger, verbose bool) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := s.ln.Accept(ctx)
		if err != nil {
			if errors.Is(err, quic.ErrServerClosed) || errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		if verbose {
			log.Debug("quic connection", zap.Stringer("from", conn.RemoteAddr()), zap.Stringer("to", conn.LocalAddr()))
		}
		wg.Go(func() {
			for {
				st, err := conn.AcceptStream(ctx)
				if err != nil {
					return
				}
				wg.Go(func() { answerStream(st, name, log, verbose) })
			}
		})
	}
}

// answerStream answers one request: "NAME: request".
func answerStream(st *quic.Stream, name string, log *zap.Logger, verbose bool) {
	_ = st.SetDeadline(time.Now().Add(30 * time.Second))
	req, err := io.ReadAll(io.LimitReader(st, maxQUICRequest))
	if err != nil {
		st.CancelRead(0)
		st.CancelWrite(0)
		return
	}
	_, _ = st.Write(append([]byte(name+": "), req...))
	_ = st.Close()
	if verbose {
		log.Debug("quic stream", zap.Int64("stream", int64(st.StreamID())), zap.Int("bytes", len(req)))
	}
}

// selfSigned is the QUIC mode's TLS configuration: a certificate made at
// start for QUICALPN (clients of the test bed do not verify it).
func selfSigned(name string) (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{QUICALPN},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{QUICALPN},
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// quicLBString says how the QUIC mode writes its connection IDs, for the
// log; "" without QUIC.
func quicLBString(q quicConfig) string {
	if q.lb == nil {
		return ""
	}
	return fmt.Sprintf("server ID %x, %s", q.serverID, q.lb)
}
