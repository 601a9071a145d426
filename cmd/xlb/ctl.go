package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"xlb/config"
	"xlb/controlplane/admin"
)

// defaultAdmin is [admin].listen's default, where drain, undrain and
// status look when given neither --admin nor -c.
const defaultAdmin = "127.0.0.1:9110"

// ctlTimeout bounds one request to the admin listener.
const ctlTimeout = 5 * time.Second

// adminFlags parses --admin ADDR and -c FILE and returns the admin
// listener to talk to: --admin, else the file's [admin].listen, else the
// default. An unspecified host (0.0.0.0, ::, none) means this host's
// loopback.
func adminFlags(name string, args []string) (addr string, rest []string, err error) {
	fs := newFlags(name)
	flagAddr := fs.String("admin", "", "admin listener host:port")
	path := fs.String("c", "", "configuration file (its [admin].listen)")
	if err := parseFlags(fs, args); err != nil {
		return "", nil, err
	}
	addr = defaultAdmin
	switch {
	case *flagAddr != "":
		addr = *flagAddr
	case *path != "":
		cfg, err := config.Load(*path)
		if err != nil {
			return "", nil, err
		}
		addr = cfg.Admin.Listen
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, fmt.Errorf("xlb %s: --admin %q: %v (%w)", name, addr, err, errUsage)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port), fs.Args(), nil
}

// adminCall sends one request to the admin listener and returns the body
// of a 200 answer; any other answer is an error with the listener's words.
func adminCall(method, addr, path string) ([]byte, error) {
	req, err := http.NewRequest(method, "http://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: ctlTimeout}).Do(req)
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

// cmdDrain is `xlb drain|undrain [--admin ADDR] [-c FILE] NAME`.
func cmdDrain(name string, args []string, stdout io.Writer) error {
	addr, rest, err := adminFlags(name, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("xlb %s: want one backend NAME (an endpoint's name or address) (%w)", name, errUsage)
	}
	body, err := adminCall(http.MethodPost, addr, "/"+name+"?backend="+url.QueryEscape(rest[0]))
	if err != nil {
		return fmt.Errorf("xlb %s %s: %w", name, rest[0], err)
	}
	_, err = stdout.Write(body)
	return err
}

// cmdStatus is `xlb status [--admin ADDR] [-c FILE]`: /status as tables.
func cmdStatus(args []string, stdout io.Writer) error {
	addr, rest, err := adminFlags("status", args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("xlb status: unexpected argument %q (%w)", rest[0], errUsage)
	}
	body, err := adminCall(http.MethodGet, addr, "/status")
	if err != nil {
		return fmt.Errorf("xlb status: %w", err)
	}
	var r admin.Report
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("xlb status: %s/status: %w", addr, err)
	}
	return printStatus(stdout, &r)
}
