package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"xlb/internal/nettest"
	"xlb/internal/syncbuf"
)

// TestRun_NotifiesSystemd runs the built xlb as systemd would start a
// Type=notify unit with WatchdogSec (this machine's PID 1 is not systemd,
// so NOTIFY_SOCKET is a socket of the test's), in a namespace "xsn<pid>-N"
// on a veth pair of its own: STATUS= while it starts, READY=1 once
// attached with its worker running and the first health round done (the
// one backend's check has a verdict: unhealthy, nothing listens), the
// watchdog pinged while the worker goes round, RELOADING=1 then READY=1
// around a SIGHUP and around `xlb reload` (not its dry run), STOPPING=1 on
// SIGTERM and exit 0.
func TestRun_NotifiesSystemd(t *testing.T) {
	nettest.RequireRoot(t)
	if xlbBin == "" {
		t.Skip("no go command to build the binary with")
	}
	ns := nettest.NewNS(t, nettest.UniqueName("xsn"))
	ns.AddVeth(t, nettest.Veth{Name: "xsn-b", PeerName: "xsn-p",
		MAC:      net.HardwareAddr{0x02, 0x7e, 0, 0, 1, 0x0b},
		PeerMAC:  net.HardwareAddr{0x02, 0x7e, 0, 0, 1, 0x0c},
		RxQueues: 1, TxQueues: 1, PeerRxQueues: 1, PeerTxQueues: 1, NoIPv6: true})
	if err := ns.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "xlb.toml")
	text := strings.Replace(readFile(t, "testdata/notify.toml"), `socket = "ADMIN_SOCKET"`, `socket = "`+filepath.Join(dir, "admin.sock")+`"`, 1)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	// A path, not an abstract name: those belong to a network namespace.
	sockPath := filepath.Join(dir, "notify")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()

	cmd := exec.Command(xlbBin, "run", "-c", cfg, "--log-format", "console")
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sockPath, "WATCHDOG_USEC=4000000")
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := ns.Do(cmd.Start); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("xlb stderr:\n%s", stderr.String())
		}
	}()

	// The notifications as they come; an exit of xlb ends the wait at
	// once (30 s bounds only a hang).
	msgs := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := sock.Read(buf)
			if err != nil {
				return // closed at the end of the test
			}
			msgs <- string(buf[:n])
		}
	}()
	var seen []string
	next := func() string {
		t.Helper()
		select {
		case m := <-msgs:
			seen = append(seen, m)
			return m
		case <-exited:
			// What it sent before it exited is in the socket's buffer:
			// the reader hands it over at once.
			select {
			case m := <-msgs:
				seen = append(seen, m)
				return m
			case <-time.After(5 * time.Second):
			}
			t.Fatalf("xlb exited (%v) after %q", waitErr, seen)
		case <-time.After(30 * time.Second):
			t.Fatalf("no notification in 30 s after %q", seen)
		}
		return ""
	}
	// until reads notifications up to the first that starts with prefix.
	until := func(prefix string) string {
		t.Helper()
		for {
			if m := next(); strings.HasPrefix(m, prefix) {
				return m
			}
		}
	}
	if m := next(); !strings.HasPrefix(m, "STATUS=starting") {
		t.Fatalf("first notification %q, want STATUS=starting", m)
	}
	ready := until("READY=1")
	if want := "READY=1\nSTATUS=forwarding: xsn-b native XDP, 1 queues; 1 services; 0/1 backends healthy; conntrack 0%"; ready != want {
		t.Errorf("ready: %q\nwant %q", ready, want)
	}
	// Before READY=1 only STATUS= lines: nothing said it was ready early.
	for _, m := range seen[:len(seen)-1] {
		if !strings.HasPrefix(m, "STATUS=") {
			t.Errorf("before READY=1: %q", m)
		}
	}
	until("WATCHDOG=1") // 2 s after READY=1: the idle worker went round

	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	until("RELOADING=1\nMONOTONIC_USEC=")
	if m := until("READY=1"); !strings.Contains(m, "reloads 1 ok, 0 failed") {
		t.Errorf("after the reload: %q, want the reload counted in STATUS=", m)
	}
	// Through the admin socket: a dry run tells systemd nothing (had it
	// bracketed, the next READY=1 would count one reload), a reload is
	// bracketed as SIGHUP's is.
	for _, args := range [][]string{{"reload", "-c", cfg, "--dry-run"}, {"reload", "-c", cfg}} {
		if out, err := exec.Command(xlbBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("xlb %v: %v\n%s", args, err, out)
		}
	}
	until("RELOADING=1\nMONOTONIC_USEC=")
	if m := until("READY=1"); !strings.Contains(m, "reloads 2 ok, 0 failed") {
		t.Errorf("after xlb reload: %q, want the second reload counted in STATUS=", m)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if m := until("STOPPING=1"); m != "STOPPING=1\nSTATUS=stopping" {
		t.Errorf("stopping: %q", m)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("xlb run: %v, want exit 0 after SIGTERM", waitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("xlb run still running 30 s after SIGTERM")
	}
	if strings.Contains(stderr.String(), `{"level"`) {
		t.Errorf("--log-format console wrote JSON:\n%s", stderr.String())
	}
}
