package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"xlb/config"
	"xlb/controlplane/admin"
)

// adminFlags parses --admin ADDR and -c FILE and returns the admin
// listener to talk to: --admin, else the file's [admin].listen, else the
// default; an unspecified host means this host's loopback.
func adminFlags(name string, args []string) (addr string, rest []string, err error) {
	fs := newFlags(name)
	flagAddr := fs.String("admin", "", "admin listener host:port")
	path := fs.String("c", "", "configuration file (its [admin].listen)")
	if err := parseFlags(fs, args); err != nil {
		return "", nil, err
	}
	addr = admin.DefaultListen
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
	dial, err := admin.DialAddr(addr)
	if err != nil {
		return "", nil, fmt.Errorf("xlb %s: --admin %q: %v (%w)", name, addr, err, errUsage)
	}
	return dial, fs.Args(), nil
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
	body, err := admin.Call(http.MethodPost, addr, "/"+name+"?backend="+url.QueryEscape(rest[0]))
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
	body, err := admin.Call(http.MethodGet, addr, "/status")
	if err != nil {
		return fmt.Errorf("xlb status: %w", err)
	}
	var r admin.Report
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("xlb status: %s/status: %w", addr, err)
	}
	return admin.WriteTables(stdout, &r)
}
