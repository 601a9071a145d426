package admin

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// refusalLogEvery spaces the warnings about refused connections, so that a
// flood of them costs a log line now and then, not one each.
const refusalLogEvery = 10 * time.Second

// limitedListener holds at most cap(slots) connections at once. When all
// are taken, a new connection takes the slot of the one that has waited
// longest for a request (a new connection without a whole header yet, or
// an idle keep-alive one): slow clients holding every slot would
// otherwise get every scrape closed unanswered, for as long as they
// reconnect. Connections whose request is being served are never closed;
// when they hold every slot, the new one is closed as soon as it is
// accepted, rather than left in the kernel's accept queue: a client learns
// at once, and the connections held, not the clients waiting, are what
// cost descriptors.
type limitedListener struct {
	net.Listener
	slots   chan struct{}
	log     *zap.Logger
	refused atomic.Uint64
	evicted atomic.Uint64
	lastLog atomic.Int64 // unix ns of the last warning

	mu      sync.Mutex
	waiting map[*limitedConn]uint64 // connections between requests: when they began to wait (seq)
	seq     uint64
}

func limitListener(ln net.Listener, n int, log *zap.Logger) *limitedListener {
	return &limitedListener{Listener: ln, slots: make(chan struct{}, n), log: log, waiting: map[*limitedConn]uint64{}}
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.slot() {
			return &limitedConn{Conn: c, l: l}, nil
		}
		c.Close()
		n := l.refused.Add(1)
		if l.logNow() {
			l.log.Warn("admin connections over the limit closed: every slot serves a request", zap.Int("max_connections", cap(l.slots)),
				zap.Uint64("refused_total", n), zap.Uint64("evicted_total", l.evicted.Load()))
		}
	}
}

// slot takes a free slot, or frees one of a waiting connection; false
// when every connection held is serving a request. Each eviction removes
// one waiting connection (a closed one may still be listed a moment, its
// slot already back), so the loop ends.
func (l *limitedListener) slot() bool {
	for !l.take() {
		if !l.evictLongestWaiting() {
			return false
		}
	}
	return true
}

func (l *limitedListener) take() bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (l *limitedListener) logNow() bool {
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	return now-last >= int64(refusalLogEvery) && l.lastLog.CompareAndSwap(last, now)
}

// evictLongestWaiting closes the connection that has waited longest for a
// request, which gives its slot back; false when none waits.
func (l *limitedListener) evictLongestWaiting() bool {
	l.mu.Lock()
	var victim *limitedConn
	var oldest uint64
	for c, since := range l.waiting {
		if victim == nil || since < oldest {
			victim, oldest = c, since
		}
	}
	delete(l.waiting, victim)
	l.mu.Unlock()
	if victim == nil {
		return false
	}
	victim.Close()
	n := l.evicted.Add(1)
	if l.logNow() {
		l.log.Warn("admin connections waiting for a request closed to make room for new ones (slow or idle clients at the limit)",
			zap.Int("max_connections", cap(l.slots)), zap.Uint64("evicted_total", n), zap.Uint64("refused_total", l.refused.Load()))
	}
	return true
}

// connState is the http.Server's ConnState hook: it keeps the set of
// connections waiting for a request. net/http reports a connection new
// or idle until a whole request header has arrived on it, so a client
// that sends its header slowly counts as waiting.
func (l *limitedListener) connState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case http.StateNew, http.StateIdle:
		l.seq++
		l.waiting[lc] = l.seq
	default:
		delete(l.waiting, lc)
	}
}

// limitedConn gives its slot back once, when closed.
type limitedConn struct {
	net.Conn
	l    *limitedListener
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.l.slots })
	return err
}
