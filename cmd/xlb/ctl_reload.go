package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"xlb/config"
)

// cmdReload is `xlb reload -c FILE (--pid PID | --pidfile FILE)`: the file
// is validated here first, so an invalid one is reported to the operator
// and nothing is sent; then the running xlb gets SIGHUP and reloads the
// file it was started with. The process is named by a pid file that `xlb
// run --pidfile` writes (or a pid), and must be an `xlb run`: a stale pid
// file naming another process is refused.
func cmdReload(args []string, stdout io.Writer) error {
	fs := newFlags("reload")
	path := fs.String("c", "", "configuration file to validate (the one xlb run was started with)")
	pid := fs.Int("pid", 0, "process id of xlb run")
	pidfile := fs.String("pidfile", "", "file that xlb run --pidfile wrote")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("xlb reload: -c FILE is required (%w)", errUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("xlb reload: unexpected argument %q (%w)", fs.Arg(0), errUsage)
	}
	if (*pid == 0) == (*pidfile == "") {
		return fmt.Errorf("xlb reload: give one of --pid PID or --pidfile FILE (%w)", errUsage)
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return fmt.Errorf("%w\nxlb reload: nothing sent", err)
	}
	if err := cfg.ValidateForRun(); err != nil {
		return fmt.Errorf("%w\nxlb reload: nothing sent", err)
	}
	if *pidfile != "" {
		raw, err := os.ReadFile(*pidfile)
		if err != nil {
			return fmt.Errorf("xlb reload: %w", err)
		}
		*pid, err = strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || *pid <= 0 {
			return fmt.Errorf("xlb reload: %s holds no process id", *pidfile)
		}
	}
	if *pid <= 0 {
		return fmt.Errorf("xlb reload: --pid %d: want a process id (%w)", *pid, errUsage)
	}
	if err := isXLBRun(*pid); err != nil {
		return fmt.Errorf("xlb reload: %w", err)
	}
	if err := sighup(*pid); err != nil {
		return fmt.Errorf("xlb reload: signalling %d: %w", *pid, err)
	}
	fmt.Fprintf(stdout, "sent SIGHUP to xlb run (pid %d); the outcome is in its log and in /status last_reload\n", *pid)
	return nil
}

// isXLBRun checks, where /proc exists, that pid's command line is `... run
// ...`, so that a stale pid file does not signal an unrelated process.
func isXLBRun(pid int) error {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if os.IsNotExist(err) {
		if _, serr := os.Stat("/proc/self"); serr == nil {
			return fmt.Errorf("no process %d (stale pid file?)", pid)
		}
		return nil // no /proc here: trust the pid
	}
	if err != nil {
		return err
	}
	argv := bytes.Split(bytes.TrimRight(raw, "\x00"), []byte{0})
	for _, a := range argv[1:] {
		if string(a) == "run" {
			return nil
		}
	}
	return fmt.Errorf("process %d is not xlb run (%q)", pid, strings.Join(strings.Split(string(bytes.TrimRight(raw, "\x00")), "\x00"), " "))
}
