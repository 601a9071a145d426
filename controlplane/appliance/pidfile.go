package appliance

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A pid file is how a reload finds a running appliance: its process
// writes one at start (WritePidFile) and removes it at a clean exit; a
// reload reads it (ReadPidFile) and signals the process (SignalReload),
// whose SIGHUP leads to ReloadFile.

// WritePidFile writes this process's id to path; remove deletes the file.
func WritePidFile(path string) (remove func(), err error) {
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, err
	}
	return func() { os.Remove(path) }, nil
}

// ReadPidFile returns the process id that WritePidFile wrote to path.
func ReadPidFile(path string) (int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s holds no process id", path)
	}
	return pid, nil
}

// SignalReload sends SIGHUP to pid after checking, where /proc exists,
// that its command line has "run" (`xlb run`), so that a stale pid file
// does not signal an unrelated process.
func SignalReload(pid int) error {
	if err := isRun(pid); err != nil {
		return err
	}
	p, err := os.FindProcess(pid)
	if err == nil {
		err = p.Signal(syscall.SIGHUP)
	}
	if err != nil {
		return fmt.Errorf("signalling %d: %w", pid, err)
	}
	return nil
}

func isRun(pid int) error {
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

// RunningFile is the configuration file the `xlb run` of pid was started
// with (its -c FILE, made absolute against its working directory) and
// the path this process reaches that file by (through /proc/PID/root,
// so it holds across mount namespaces, a unit's PrivateTmp). ok is false
// where /proc does not say: no /proc, no permission to read the
// process's working directory, or no -c on its command line.
func RunningFile(pid int) (file, here string, ok bool) {
	proc := "/proc/" + strconv.Itoa(pid)
	raw, err := os.ReadFile(proc + "/cmdline")
	if err != nil {
		return "", "", false
	}
	file = runFileArg(strings.Split(string(bytes.TrimRight(raw, "\x00")), "\x00"))
	if file == "" {
		return "", "", false
	}
	if !filepath.IsAbs(file) {
		cwd, err := os.Readlink(proc + "/cwd")
		if err != nil {
			return "", "", false
		}
		file = filepath.Join(cwd, file)
	}
	return file, proc + "/root" + file, true
}

// runFileArg is the -c FILE of an `xlb run` command line (argv[0] the
// program): -c FILE, -c=FILE, --c FILE or --c=FILE after "run"; "" when
// it has none.
func runFileArg(argv []string) string {
	run := false
	for i, a := range argv {
		if !run {
			run = i > 0 && a == "run"
			continue
		}
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if name != "c" {
			continue
		}
		if !hasValue {
			if i+1 >= len(argv) {
				return ""
			}
			value = argv[i+1]
		}
		return value
	}
	return ""
}
