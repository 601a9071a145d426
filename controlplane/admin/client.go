package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// DefaultListen is [admin].listen's default, where a client looks when it
// is told no other address.
const DefaultListen = "127.0.0.1:9110"

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

// Call sends one request to the listener at addr and returns the body of
// a 200 answer; any other answer is an error with the listener's words.
func Call(method, addr, path string) ([]byte, error) {
	req, err := http.NewRequest(method, "http://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: callTimeout}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin listener %s: %w (is xlb running?)", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("admin listener %s: %w", addr, err)
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
