package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"xlb/config"
	"xlb/controlplane/admin"
	"xlb/controlplane/appliance"
)

// adminFlags parses --admin ADDR and -c FILE and returns the admin
// listener to talk to: --admin, else the file's [admin].listen, else the
// default; an unspecified host means this host's loopback.
func adminFlags(name string, args []string, more ...func(*flag.FlagSet)) (addr string, rest []string, err error) {
	fs := newFlags(name)
	for _, m := range more {
		m(fs)
	}
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

// socketFlags parses --socket PATH and -c FILE and returns the client of
// the admin socket to send a state-changing command through: --socket,
// else the file's [admin].socket, else the default. The TCP listener
// refuses such commands, so --admin is an error that says where they go.
func socketFlags(name string, args []string, more ...func(*flag.FlagSet)) (sc admin.SocketClient, rest []string, err error) {
	fs := newFlags(name)
	for _, m := range more {
		m(fs)
	}
	flagSock := fs.String("socket", "", "admin socket path")
	path := fs.String("c", "", "configuration file (its [admin].socket)")
	flagAddr := fs.String("admin", "", hiddenFlag+"refused: state changes go through --socket")
	if err := parseFlags(fs, args); err != nil {
		return sc, nil, err
	}
	if *flagAddr != "" {
		return sc, nil, fmt.Errorf("xlb %s: --admin: state-changing commands go through the admin socket (--socket PATH or -c FILE), not the TCP listener (%w)", name, errUsage)
	}
	var cfg *config.Config
	if *path != "" {
		if cfg, err = config.Load(*path); err != nil {
			return sc, nil, err
		}
	}
	return socketClient(*flagSock, cfg), fs.Args(), nil
}

// socketClient is the client of the admin socket at sock, else cfg's
// [admin].socket (cfg may be nil), else the default. It trusts root and
// this process's user at the other end, and the user xlb runs as.
func socketClient(sock string, cfg *config.Config) admin.SocketClient {
	sc := admin.SocketClient{Path: sock}
	if sc.Path == "" {
		sc.Path = admin.DefaultSocket
		if cfg != nil {
			sc.Path = cfg.Admin.Socket
		}
	}
	sc.Trusted = runAsTrusted(cfg)
	return sc
}

// runAsTrusted is the uid xlb runs as by cfg (dataplane.user), when it is
// not root's: a socket it listens on is its own. None without the key:
// xlb then stays the user that started it.
func runAsTrusted(cfg *config.Config) []uint32 {
	if cfg == nil || cfg.Dataplane.User == "" {
		return nil
	}
	uid, err := appliance.RunAsUID(cfg)
	if err != nil || uid == 0 {
		return nil
	}
	return []uint32{uint32(uid)}
}

// cmdDrain is `xlb drain|undrain [--socket PATH] [-c FILE] NAME`, or with
// --node the whole instance's routes (its VIPs withdrawn, forwarding on),
// through the admin socket (root only).
func cmdDrain(name string, args []string, stdout io.Writer) error {
	var node *bool
	sc, rest, err := socketFlags(name, args, func(fs *flag.FlagSet) {
		node = fs.Bool("node", false, "withdraw (drain) or announce again (undrain) this instance's VIP routes")
	})
	if err != nil {
		return err
	}
	if *node {
		if len(rest) != 0 {
			return fmt.Errorf("xlb %s --node: takes no backend NAME (%w)", name, errUsage)
		}
		body, err := sc.Call(http.MethodPost, "/"+name+"-node")
		if err != nil {
			return fmt.Errorf("xlb %s --node: %w", name, err)
		}
		_, err = stdout.Write(body)
		return err
	}
	if len(rest) != 1 {
		return fmt.Errorf("xlb %s: want one backend NAME (an endpoint's name or address) (%w)", name, errUsage)
	}
	body, err := sc.Call(http.MethodPost, "/"+name+"?backend="+url.QueryEscape(rest[0]))
	if err != nil {
		return fmt.Errorf("xlb %s %s: %w", name, rest[0], err)
	}
	_, err = stdout.Write(body)
	return err
}

// cmdStatus is `xlb status [--admin ADDR] [-c FILE]`: /status as tables;
// with --fleet ADDR,... the fingerprints of every instance side by side
// (exit 1 when they disagree).
func cmdStatus(args []string, stdout io.Writer) error {
	var fleet *string
	addr, rest, err := adminFlags("status", args, func(fs *flag.FlagSet) {
		fleet = fs.String("fleet", "", "compare the instances at these admin listeners (host:port,...)")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("xlb status: unexpected argument %q (%w)", rest[0], errUsage)
	}
	if *fleet != "" {
		return fleetStatus(strings.Split(*fleet, ","), stdout)
	}
	r, err := admin.FetchReport(addr)
	if err != nil {
		return fmt.Errorf("xlb status: %w", err)
	}
	return admin.WriteTables(stdout, r)
}

// errDisagree: the fleet's instances disagree (exit 1, the table says where).
var errDisagree = errors.New("xlb status --fleet: the instances disagree")

func fleetStatus(addrs []string, stdout io.Writer) error {
	reports, err := admin.FetchFleet(addrs)
	if err != nil {
		return fmt.Errorf("xlb status --fleet: %w", err)
	}
	agree, err := admin.WriteFleet(stdout, addrs, reports)
	if err == nil && !agree {
		err = errDisagree
	}
	return err
}

// cmdReload is `xlb reload -c FILE [--socket PATH] [--allow-empty]
// [--dry-run]`, or with `--pid PID | --pidfile FILE` by SIGHUP: the file
// is validated here first, so an invalid one is reported to the operator
// and nothing is sent. Through the admin socket (the file's [admin]
// socket, or --socket) the running xlb reloads the file it was started
// with at once, refusing when FILE is another file, and answers what it
// changed, one line each, then "reloaded"; --dry-run has it answer what
// a reload would change and apply nothing; --allow-empty lets a file
// without any forwarding rule apply (refused otherwise: every VIP would
// stop). By SIGHUP the process is named by a pid file that `xlb run
// --pidfile` writes (or a pid), must be an `xlb run`, and the outcome is
// in its log and /status.
func cmdReload(args []string, stdout io.Writer) error {
	fs := newFlags("reload")
	path := fs.String("c", "", "configuration file: the one xlb run was started with (validated here; the running xlb refuses another)")
	sock := fs.String("socket", "", "admin socket path (default: [admin] socket of -c FILE, whose default is "+admin.DefaultSocket+")")
	allowEmpty := fs.Bool("allow-empty", false, "apply a file without any forwarding rule (every VIP stops)")
	dryRun := fs.Bool("dry-run", false, "print what a reload would change and apply nothing")
	pid := fs.Int("pid", 0, "process id of xlb run: reload by SIGHUP instead of the socket")
	pidfile := fs.String("pidfile", "", "file that xlb run --pidfile wrote: reload by SIGHUP instead of the socket")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("xlb reload: -c FILE is required (%w)", errUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("xlb reload: unexpected argument %q (%w)", fs.Arg(0), errUsage)
	}
	bySignal := *pid != 0 || *pidfile != ""
	switch {
	case *pid != 0 && *pidfile != "":
		return fmt.Errorf("xlb reload: give one of --pid PID or --pidfile FILE (%w)", errUsage)
	case bySignal && (*sock != "" || *allowEmpty || *dryRun):
		return fmt.Errorf("xlb reload: --socket, --allow-empty and --dry-run go through the admin socket, not SIGHUP (--pid, --pidfile) (%w)", errUsage)
	}
	cfg, err := config.Load(*path)
	if err == nil {
		err = cfg.ValidateForRun()
	}
	if err != nil {
		return fmt.Errorf("%w\nxlb reload: nothing sent", err)
	}
	if !bySignal {
		return reloadThroughSocket(socketClient(*sock, cfg), *path, *allowEmpty, *dryRun, stdout)
	}
	if *pidfile != "" {
		if *pid, err = appliance.ReadPidFile(*pidfile); err != nil {
			return fmt.Errorf("xlb reload: %w", err)
		}
	}
	if *pid <= 0 {
		return fmt.Errorf("xlb reload: --pid %d: want a process id (%w)", *pid, errUsage)
	}
	if err := checkRunningFile(*pid, *path); err != nil {
		return err
	}
	if err := appliance.SignalReload(*pid); err != nil {
		return fmt.Errorf("xlb reload: %w", err)
	}
	fmt.Fprintf(stdout, "sent SIGHUP to xlb run (pid %d): it reloads the file it was started with; the outcome is in its log and in /status last_reload\n", *pid)
	return nil
}

// checkRunningFile refuses a reload by SIGHUP of pid when its -c FILE, as
// /proc shows it, is not the file at path: SIGHUP reloads the file xlb
// runs, not path. Where /proc does not say, nothing is checked.
func checkRunningFile(pid int, path string) error {
	running, here, ok := appliance.RunningFile(pid)
	if !ok {
		return nil
	}
	ri, err := os.Stat(here)
	if err != nil {
		return nil // not reachable from here: the daemon's own reload says
	}
	ai, err := os.Stat(path)
	if err == nil && os.SameFile(ri, ai) {
		return nil
	}
	asked, _ := filepath.Abs(path)
	return fmt.Errorf("xlb reload: xlb run (pid %d) runs %s; reload -c reloads only that file (asked: %s): write the changes into %s, or start xlb run with -c %s\nxlb reload: nothing sent",
		pid, running, asked, running, asked)
}

// reloadThroughSocket asks the running xlb to reload (or, dry, to say
// what a reload would change) the file at path, which it refuses unless
// that is the file it runs; it prints the answer: the changes, then
// "reloaded" or "dry run: nothing applied".
func reloadThroughSocket(sc admin.SocketClient, path string, allowEmpty, dry bool, stdout io.Writer) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("xlb reload: -c %s: %w", path, err)
	}
	q := url.Values{"path": {abs}}
	if allowEmpty {
		q.Set("allow_empty", "1")
	}
	endpoint, name := "/reload", "xlb reload"
	if dry {
		endpoint, name = "/reload-dry-run", "xlb reload --dry-run"
	}
	body, err := sc.Call(http.MethodPost, endpoint+"?"+q.Encode())
	var se *admin.StatusError
	if dry && errors.As(err, &se) && se.Code == http.StatusNotFound {
		return fmt.Errorf("%s: the running xlb has no dry run (it is older than this xlb reload): nothing applied", name)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if _, err := stdout.Write(body); err != nil {
		return err
	}
	if string(body) == admin.ReloadedLine+"\n" {
		// An xlb older than this client: it reloaded the file it runs,
		// whatever -c named, and lists no changes.
		fmt.Fprintln(stdout, "(the running xlb is older than this xlb reload: it reloaded the file it was started with and lists no changes)")
	}
	return nil
}
