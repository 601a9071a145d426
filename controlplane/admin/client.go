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
	"os"
	"slices"
	"strconv"
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
// state-changing endpoints. It trusts no other user than root and this
// process's (SocketClient's defaults).
func CallSocket(method, sock, path string) ([]byte, error) {
	return SocketClient{Path: sock}.Call(method, path)
}

// ErrUntrustedPeer: the process listening on the admin socket runs as a
// user the client does not trust (a squatter on the path); nothing was sent.
var ErrUntrustedPeer = errors.New("admin socket served by an untrusted user")

// SocketClient talks to the admin socket at Path, once it has checked who
// listens there: a socket file in a directory others can write to may be
// anyone's, and a request handed to a squatter (a reload, a drain) would
// be answered with whatever it likes.
type SocketClient struct {
	Path string
	// Trusted are the uids accepted at the other end besides root and the
	// caller's own: the user xlb runs as, where it is not root.
	Trusted []uint32
}

// trusts: root, the caller's own uid (a server of its own user can do
// nothing it could not), and Trusted.
func (c SocketClient) trusts(uid uint32) bool {
	return uid == 0 || int(uid) == os.Geteuid() || slices.Contains(c.Trusted, uid)
}

// Dial connects to the socket and returns the connection only if its
// listener's uid (SO_PEERCRED, fixed when it called listen(2)) is trusted;
// otherwise the connection is closed before a byte is written and the
// error wraps ErrUntrustedPeer.
func (c SocketClient) Dial(ctx context.Context) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", c.Path)
	if err != nil {
		return nil, err
	}
	p := peerCred(conn)
	if p.known && c.trusts(p.uid) {
		return conn, nil
	}
	conn.Close()
	return nil, &untrustedPeerError{path: c.Path, uid: p.uid, known: p.known, want: c.trustedList()}
}

func (c SocketClient) trustedList() string {
	var uids []string
	if me := os.Geteuid(); me != 0 {
		uids = append(uids, strconv.Itoa(me))
	}
	for _, u := range c.Trusted {
		uids = append(uids, strconv.FormatUint(uint64(u), 10))
	}
	if len(uids) == 0 {
		return "root"
	}
	return "root or uid " + strings.Join(uids, ", ")
}

// untrustedPeerError names the socket and the uid found.
type untrustedPeerError struct {
	path  string
	uid   uint32
	known bool // false: SO_PEERCRED could not be read
	want  string
}

func (e *untrustedPeerError) Error() string {
	if !e.known {
		return fmt.Sprintf("admin socket %s: the listener's uid cannot be read (SO_PEERCRED): refused, nothing sent", e.path)
	}
	return fmt.Sprintf("admin socket %s is served by uid %d, not by %s: refused, nothing sent (another user's process on that path?)", e.path, e.uid, e.want)
}

func (e *untrustedPeerError) Unwrap() error { return ErrUntrustedPeer }

// HTTPClient is an HTTP client whose every connection is Dial's; timeout
// 0 means none (a capture streams for as long as it was asked to).
func (c SocketClient) HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return c.Dial(ctx) },
	}}
}

// Call sends one request through the socket and returns the body of a 200
// answer, as Call does.
func (c SocketClient) Call(method, path string) ([]byte, error) {
	return call(c.HTTPClient(callTimeout), method, "http://xlb"+path, c.DialError)
}

// DialError says what went wrong reaching the socket, naming it; a
// refused listener's error as it is, the HTTP client's wrapping left out.
func (c SocketClient) DialError(err error) error {
	sock := c.Path
	var untrusted *untrustedPeerError
	switch {
	case errors.As(err, &untrusted):
		return untrusted
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("admin socket %s: permission denied: state-changing commands are root's", sock)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("admin socket %s: %w (is xlb running? the path is [admin] socket of its configuration)", sock, err)
	}
	return fmt.Errorf("admin socket %s: %w", sock, err)
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
		return nil, &StatusError{Code: resp.StatusCode, Text: strings.TrimSpace(string(body))}
	}
	return body, nil
}

// StatusError is an answer other than 200: its status, and the
// listener's words, which are the error's text.
type StatusError struct {
	Code int
	Text string
}

func (e *StatusError) Error() string { return e.Text }

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
