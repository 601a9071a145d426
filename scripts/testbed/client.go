package testbed

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"

	"xlb/internal/nsx"
)

// Dial opens a connection from namespace ns to dst ("tcp" or "udp"; a UDP
// socket is connected, so it hears only dst).
func Dial(ns, network string, dst netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	var conn net.Conn
	err := nsx.Do(ns, func() error {
		var err error
		conn, err = net.DialTimeout(network, dst.String(), timeout)
		return err
	})
	return conn, err
}

// Reply is one HTTP answer of a backend.
type Reply struct {
	Status  int
	Backend string // X-Backend
	Header  http.Header
	Body    string
}

// HTTPConn is a kept-alive HTTP/1.1 connection from a namespace, for
// tests that need many requests on one TCP connection.
type HTTPConn struct {
	net.Conn
	r    *bufio.Reader
	host string
}

// DialHTTP opens a TCP connection from ns to dst.
func DialHTTP(ns string, dst netip.AddrPort, timeout time.Duration) (*HTTPConn, error) {
	conn, err := Dial(ns, "tcp", dst, timeout)
	if err != nil {
		return nil, err
	}
	return &HTTPConn{Conn: conn, r: bufio.NewReader(conn), host: dst.String()}, nil
}

// Get asks for path and reads the whole answer, within timeout.
func (c *HTTPConn) Get(path string, timeout time.Duration) (Reply, error) {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return Reply{}, err
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+c.host+path, nil)
	if err != nil {
		return Reply{}, err
	}
	if err := req.Write(c); err != nil {
		return Reply{}, err
	}
	resp, err := http.ReadResponse(c.r, req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Reply{}, err
	}
	return Reply{Status: resp.StatusCode, Backend: resp.Header.Get("X-Backend"), Header: resp.Header, Body: string(body)}, nil
}

// HTTPGet asks for path over a new TCP connection from ns to dst.
func HTTPGet(ns string, dst netip.AddrPort, path string, timeout time.Duration) (Reply, error) {
	c, err := DialHTTP(ns, dst, timeout)
	if err != nil {
		return Reply{}, err
	}
	defer c.Close()
	return c.Get(path, timeout)
}

// UDPEcho sends payload from a new port in ns to dst and returns the name
// of the backend that echoed it ("b1: payload").
func UDPEcho(ns string, dst netip.AddrPort, payload string, timeout time.Duration) (string, error) {
	conn, err := Dial(ns, "udp", dst, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	if _, err := conn.Write([]byte(payload)); err != nil {
		return "", err
	}
	buf := make([]byte, 2048)
	n, err := conn.Read(buf)
	if err != nil {
		return "", err
	}
	name, rest, ok := bytes.Cut(buf[:n], []byte(": "))
	if !ok || string(rest) != payload || len(name) == 0 {
		return "", fmt.Errorf("udp %s: unexpected echo %q", dst, buf[:n])
	}
	return string(name), nil
}
