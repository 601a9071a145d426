package flowsync

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"sync"
	"time"

	"go.uber.org/zap"

	"xlb/conntrack"
	"xlb/dataplane"
)

// The table pull (TCP, on Listen): a frame is a 4-byte length, then one
// message (wire.go). The puller sends a pull request; the peer answers
// with the backends it drains (pull backends frames, none when it drains
// none), pull records frames and a pull end, each bound to the request's
// nonce, then closes.
const (
	// maxConcurrentPulls bounds the pulls served at once; a puller turned
	// away tries its next peer.
	maxConcurrentPulls = 2
	// pullFrameLimit is the size of a response frame (fewer seals than
	// datagram-sized ones); maxFrameLen bounds what a reader accepts.
	pullFrameLimit = 32 << 10
	maxFrameLen    = 64 << 10
	// pullRequestTimeout bounds the wait for a request, pullIdleTimeout
	// any wait for the next write or read of a pull in progress: a peer
	// that stops answering is given up (and the puller tries the next).
	pullRequestTimeout = 5 * time.Second
	pullIdleTimeout    = 3 * time.Second
	pullDialTimeout    = 2 * time.Second
)

var errNoPeers = errors.New("flowsync: no peers to pull from")

// refusedError is a pull message refused for a reason.
type refusedError struct{ r reason }

func (e refusedError) Error() string { return "flowsync: pull refused: " + e.r.String() }

// PullResult is what Pull did.
type PullResult struct {
	// Peer is the peer the pull completed from ("" if none did).
	Peer string
	// Records were received, Stored of them stored (every attempt,
	// a failed one's included: what it stored stays).
	Records, Stored int
	Took            time.Duration
	// Err says why no peer completed (each peer's error), or nil.
	Err error
}

// Pull fetches the whole table from a peer, trying them in turn, within
// the configured pull timeout, merging records as they arrive. It may run
// before or while Run runs.
func (s *Syncer) Pull(ctx context.Context) PullResult {
	st := s.state.Load()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, st.pullTO)
	defer cancel()
	var res PullResult
	if len(st.peers) == 0 {
		res.Err = errNoPeers
		return res
	}
	var errs []error
	for _, p := range st.peers {
		n, stored, err := s.pullFrom(ctx, st, p.addr)
		res.Records += n
		res.Stored += stored
		if err == nil {
			res.Peer = p.addr.String()
			res.Took = time.Since(start)
			return res
		}
		errs = append(errs, fmt.Errorf("%s: %w", p.addr, err))
		if ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("flowsync: pull timeout (%s) reached", st.pullTO))
			break
		}
	}
	res.Err = errors.Join(errs...)
	res.Took = time.Since(start)
	return res
}

// pullFrom pulls from one peer: records received and stored, and why it
// did not complete.
func (s *Syncer) pullFrom(ctx context.Context, st *state, addr netip.AddrPort) (n, stored int, err error) {
	d := net.Dialer{Timeout: pullDialTimeout}
	if a := s.listen.Addr(); a.IsValid() && !a.IsUnspecified() {
		// From the listen address: the peer knows this instance by it.
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, 0))
	}
	c, err := d.DialContext(ctx, "tcp", addr.String())
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	defer context.AfterFunc(ctx, func() { c.Close() })()

	var nonce [nonceLen]byte
	rand.Read(nonce[:])
	enc := newEncoder(headerLen + nonceLen + tagLen)
	enc.putBody(nonce[:])
	h := header{kind: kindPullRequest, keyID: st.keys.sealID(), sender: s.id, seq: s.seq.Add(1), wall: s.wall()}
	c.SetWriteDeadline(time.Now().Add(pullIdleTimeout))
	if err := writeFrame(c, enc.seal(st.keys.seal, &h, nil)); err != nil {
		return 0, 0, err
	}

	br := bufio.NewReaderSize(c, 64<<10)
	buf := make([]byte, maxFrameLen)
	recs := make([]Record, 0, maxFrameLen/minRecordLen+1)
	var sender, last uint64
	var draining []DrainingBackend
	adopted := false // the backends frames are over
	for first := true; ; first = false {
		c.SetReadDeadline(time.Now().Add(pullIdleTimeout))
		msg, err := readFrame(br, buf)
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return n, stored, err
		}
		h, r := parseHeader(msg)
		if r == reasonNone && !first && h.sender != sender {
			r = reasonMalformed
		}
		if r == reasonNone && h.seq <= last {
			r = reasonRepeat
		}
		if r != reasonNone {
			s.m.refused[r].Add(1)
			return n, stored, refusedError{r}
		}
		sender, last = h.sender, h.seq
		body, ok := st.keys.open(&enc.sc, &h, msg, nonce[:])
		if !ok {
			s.m.refused[reasonKey].Add(1)
			return n, stored, refusedError{reasonKey}
		}
		if h.kind != kindPullBackends && !adopted {
			adopted = true
			s.adoptDraining(draining)
		}
		switch h.kind {
		case kindPullBackends:
			var ok bool
			if !adopted {
				draining, ok = decodeDraining(body, draining)
			}
			if !ok || len(draining) > maxPullBackends {
				s.m.refused[reasonMalformed].Add(1)
				return n, stored, refusedError{reasonMalformed}
			}
		case kindPullRecords:
			got, ok := decodeRecords(body, recs)
			if !ok {
				s.m.refused[reasonMalformed].Add(1)
				return n, stored, refusedError{reasonMalformed}
			}
			n += len(got)
			s.m.pullRecordsIn.Add(uint64(len(got)))
			stored += s.apply(got, s.now())
		case kindPullEnd:
			if len(body) != 8 {
				s.m.refused[reasonMalformed].Add(1)
				return n, stored, refusedError{reasonMalformed}
			}
			if want := binary.BigEndian.Uint64(body); want != uint64(n) {
				return n, stored, fmt.Errorf("flowsync: pull ended after %d records, the peer sent %d", n, want)
			}
			return n, stored, nil
		default:
			s.m.refused[reasonMalformed].Add(1)
			return n, stored, refusedError{reasonMalformed}
		}
	}
}

// adoptDraining hands what the pull's backends frames carried to
// Options.AdoptDraining; the snapshot it publishes is the one the records
// are translated with (apply rebuilds the fleet map for it).
func (s *Syncer) adoptDraining(bs []DrainingBackend) {
	if len(bs) == 0 || s.adopt == nil {
		return
	}
	s.adopt(bs)
	s.log.Info("flow sync: the pulled peer's draining backends handed over", zap.Int("backends", len(bs)))
}

// serveLoop accepts pulls until the listener is closed.
func (s *Syncer) serveLoop(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := s.tcp.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of descriptors, say: do not spin
			continue
		}
		select {
		case s.pulls <- struct{}{}:
		default:
			c.Close() // busy: the puller tries its next peer
			continue
		}
		wg.Go(func() {
			defer func() { <-s.pulls }()
			s.serve(ctx, c)
		})
	}
}

// serve answers one pull: check the request, stream the table.
func (s *Syncer) serve(ctx context.Context, c *net.TCPConn) {
	defer c.Close()
	defer context.AfterFunc(ctx, func() { c.Close() })()
	st := s.state.Load()
	if ra, ok := c.RemoteAddr().(*net.TCPAddr); !ok || !st.hasIP(ra.AddrPort().Addr()) {
		s.m.refused[reasonPeer].Add(1)
		return
	}
	c.SetReadDeadline(time.Now().Add(pullRequestTimeout))
	var rb [headerLen + nonceLen + tagLen]byte
	msg, err := readFrame(c, rb[:])
	if err != nil {
		if errors.Is(err, errFrameLen) {
			s.m.refused[reasonMalformed].Add(1)
		}
		return
	}
	h, r := parseHeader(msg)
	if r == reasonNone && (h.kind != kindPullRequest || len(msg) != len(rb)) {
		r = reasonMalformed
	}
	if r != reasonNone {
		s.m.refused[r].Add(1)
		return
	}
	var sc scratch
	body, ok := st.keys.open(&sc, &h, msg, nil)
	if !ok {
		s.m.refused[reasonKey].Add(1)
		return
	}
	if d := s.wall() - h.wall; d > maxClockSkewMs || d < -maxClockSkewMs {
		s.m.refused[reasonStale].Add(1)
		return
	}
	var nonce [nonceLen]byte
	copy(nonce[:], body)

	p := pullStream{s: s, st: st, c: c, w: bufio.NewWriterSize(c, 64<<10), enc: newEncoder(pullFrameLimit),
		nonce: nonce, snap: s.eng.Load(), now: s.now()}
	tbl := s.eng.table()
	if p.snap != nil {
		p.backends()
		tbl.RangeBuckets(0, tbl.Buckets(), p.now, p.entry)
	}
	p.frame(kindPullRecords)
	if p.err != nil {
		return
	}
	var cnt [8]byte
	binary.BigEndian.PutUint64(cnt[:], p.count)
	p.enc.putBody(cnt[:])
	p.frame(kindPullEnd)
	if p.err == nil {
		p.err = p.w.Flush()
	}
	if p.err == nil {
		s.m.pullsServed.Add(1)
	}
}

// pullStream is one pull being served.
type pullStream struct {
	s     *Syncer
	st    *state
	c     *net.TCPConn
	w     *bufio.Writer
	enc   *encoder
	nonce [nonceLen]byte
	snap  *dataplane.Snapshot
	now   int64
	count uint64
	err   error
}

// backends sends the snapshot's removed backends still draining, as
// pull backends frames, before any record that may name them.
func (p *pullStream) backends() {
	body := make([]byte, 2, pullFrameLimit)
	count, sent := 0, 0
	flush := func() {
		if count == 0 || p.err != nil {
			return
		}
		binary.BigEndian.PutUint16(body, uint16(count))
		p.enc.putBody(body)
		p.frame(kindPullBackends)
		body, count = body[:2], 0
	}
	for _, b := range p.snap.Backends {
		if b == nil || !b.Removed || p.now >= b.DrainUntil || sent == maxPullBackends {
			continue
		}
		svc := p.snap.Service(b.Service)
		if svc == nil {
			continue
		}
		d := DrainingBackend{Service: svc.Name, Name: b.Name, IP: b.IP, Group: b.Group, Failover: b.Failover,
			DrainLeft: time.Duration(b.DrainUntil-p.now) * time.Millisecond}
		l := drainingLen(&d)
		if headerLen+l+2+tagLen > pullFrameLimit {
			continue // never fits a frame
		}
		if headerLen+len(body)+l+tagLen > pullFrameLimit || count == math.MaxUint16 {
			flush()
		}
		var ok bool
		if body, ok = putDraining(body, &d); ok {
			count++
			sent++
		}
	}
	flush()
}

// entry sends a live established entry, own or a peer's.
func (p *pullStream) entry(k conntrack.Key, e conntrack.Entry) bool {
	if e.HalfOpen {
		return true
	}
	b := p.snap.Backend(dataplane.BackendRef(e.Backend))
	if b == nil {
		return true
	}
	r := Record{Key: k, FleetID: b.FleetID, Side: e.Side, AgeMs: ageMs(p.now - e.LastUse)}
	if !p.enc.room() {
		if p.frame(kindPullRecords); p.err != nil {
			return false
		}
	}
	if p.enc.add(&r) {
		p.count++
		p.s.m.pullRecords.Add(1)
	}
	return true
}

// frame seals what the encoder holds as one frame of kind (records frames
// only when not empty) and writes it.
func (p *pullStream) frame(kind uint8) {
	if p.err != nil || (kind == kindPullRecords && p.enc.count == 0) {
		return
	}
	h := header{kind: kind, keyID: p.st.keys.sealID(), sender: p.s.id, seq: p.s.seq.Add(1), wall: p.s.wall()}
	msg := p.enc.seal(p.st.keys.seal, &h, p.nonce[:])
	p.c.SetWriteDeadline(time.Now().Add(pullIdleTimeout))
	p.err = writeFrame(p.w, msg)
	p.enc.reset()
}

var errFrameLen = errors.New("flowsync: frame length out of bounds")

func writeFrame(w io.Writer, msg []byte) error {
	var l [4]byte
	binary.BigEndian.PutUint32(l[:], uint32(len(msg)))
	if _, err := w.Write(l[:]); err != nil {
		return err
	}
	_, err := w.Write(msg)
	return err
}

// readFrame reads one frame into buf (its capacity bounds the length).
func readFrame(r io.Reader, buf []byte) ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n < headerLen+tagLen || int(n) > len(buf) {
		return nil, errFrameLen
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		return nil, err
	}
	return buf[:n], nil
}
