package healthcheck

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"
)

// tcpProber is a TCP check of one backend: the connection opens, and with a
// response prefix, the first bytes the backend sends start with it.
type tcpProber struct {
	addr     string
	response string
	timeout  time.Duration
}

func (p *tcpProber) probe(ctx context.Context) outcome {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return outcome{reason: failure(ctx, err, p.timeout)}
	}
	defer conn.Close()
	if p.response == "" {
		return outcome{pass: true, reason: "TCP connected"}
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	buf := make([]byte, len(p.response))
	n, err := io.ReadFull(conn, buf)
	if n == len(buf) && string(buf) == p.response {
		return outcome{pass: true, reason: "TCP connected, response matches"}
	}
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return outcome{reason: "TCP connected, reading: " + failure(ctx, err, p.timeout)}
	}
	return outcome{reason: fmt.Sprintf("TCP connected, but the backend sent %q, not %q", clip(string(buf[:n])), clip(p.response))}
}
