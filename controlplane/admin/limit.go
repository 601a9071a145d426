package admin

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// refusalLogEvery spaces the warnings about refused connections, so that a
// flood of them costs a log line now and then, not one each.
const refusalLogEvery = 10 * time.Second

// limitedListener holds at most cap(slots) connections at once. One over
// the limit is closed as soon as it is accepted, rather than left in the
// kernel's accept queue: a client learns at once, and the connections
// held, not the clients waiting, are what cost descriptors.
type limitedListener struct {
	net.Listener
	slots   chan struct{}
	log     *zap.Logger
	refused atomic.Uint64
	lastLog atomic.Int64 // unix ns of the last warning
}

func limitListener(ln net.Listener, n int, log *zap.Logger) *limitedListener {
	return &limitedListener{Listener: ln, slots: make(chan struct{}, n), log: log}
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, l: l}, nil
		default:
		}
		c.Close()
		n := l.refused.Add(1)
		now := time.Now().UnixNano()
		if last := l.lastLog.Load(); now-last >= int64(refusalLogEvery) && l.lastLog.CompareAndSwap(last, now) {
			l.log.Warn("admin connections over the limit closed", zap.Int("max_connections", cap(l.slots)), zap.Uint64("refused_total", n))
		}
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
