package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// DefaultListen is [admin].listen's default, where a client looks when it
// is told no other address.
const DefaultListen = "127.0.0.1:9110"

// DefaultSocket is [admin].socket's default, where a client of the
// state-changing commands looks when it is told no other path.
const DefaultSocket = "/run/xlb/admin.sock"

// callTimeout bounds one request of Call.
const callTimeout = 5 * time.Second

// DialAddr is the address a client on this host dials to reach a
// listener on listen (host:port): an unspecified host (none, 0.0.0.0, ::)
// listens on every interface, so it is reached on this host's loopback.
func DialAddr(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port), nil
}

// Call sends one request to the TCP listener at addr and returns the body
// of a 200 answer; any other answer is an error with the listener's words.
func Call(method, addr, path string) ([]byte, error) {
	return call(&http.Client{Timeout: callTimeout}, method, "http://"+addr+path,
		func(err error) error { return fmt.Errorf("admin listener %s: %w (is xlb running?)", addr, err) })
}

// CallSocket is Call through the Unix socket at sock: the only way to the
// state-changing endpoints.
func CallSocket(method, sock, path string) ([]byte, error) {
	c := &http.Client{Timeout: callTimeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	return call(c, method, "http://xlb"+path, func(err error) error {
		switch {
		case errors.Is(err, fs.ErrPermission):
			return fmt.Errorf("admin socket %s: permission denied: state-changing commands are root's", sock)
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ECONNREFUSED):
			return fmt.Errorf("admin socket %s: %w (is xlb running? the path is [admin] socket of its configuration)", sock, err)
		}
		return fmt.Errorf("admin socket %s: %w", sock, err)
	})
}

func call(c *http.Client, method, url string, dialErr func(error) error) ([]byte, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, dialErr(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, dialErr(err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s", strings.TrimSpace(string(body)))
	}
	return body, nil
}

// FetchReport reads the listener's /status at addr.
func FetchReport(addr string) (*Report, error) {
	body, err := Call(http.MethodGet, addr, "/status")
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s/status: %w", addr, err)
	}
	return &r, nil
}

// FetchFleet reads /status of every instance's listener (host:port each,
// an unspecified host meaning this host), by the address as given.
func FetchFleet(addrs []string) (map[string]*Report, error) {
	reports := map[string]*Report{}
	for _, a := range addrs {
		dial, err := DialAddr(a)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", a, err)
		}
		if reports[a], err = FetchReport(dial); err != nil {
			return nil, err
		}
	}
	return reports, nil
}
