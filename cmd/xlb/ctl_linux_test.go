package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"xlb/internal/nettest"
)

// squatter listens on a socket path as another user and answers every
// request as a running xlb would, recording what each connection sent.
type squatter struct {
	mu    sync.Mutex
	conns []int // bytes each finished connection sent
	done  chan struct{}
}

func squat(t *testing.T, path string, uid int) *squatter {
	t.Helper()
	ln := nettest.ListenUnixAs(t, path, uid)
	sq := &squatter{done: make(chan struct{}, 64)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go sq.serve(c)
		}
	}()
	return sq
}

func (sq *squatter) serve(c net.Conn) {
	defer c.Close()
	// Only against a hang: a client closes, or sends, at once.
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	var got bytes.Buffer
	buf := make([]byte, 4096)
	answered := false
	for {
		n, err := c.Read(buf)
		got.Write(buf[:n])
		if !answered && bytes.Contains(got.Bytes(), []byte("\r\n\r\n")) {
			answered = true
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nreloaded\n")
		}
		if err != nil {
			break
		}
	}
	sq.mu.Lock()
	sq.conns = append(sq.conns, got.Len())
	sq.mu.Unlock()
	sq.done <- struct{}{}
}

// TestCtlRefusesSquattedSocket: with the admin socket's path in a
// directory anyone may write to and another user's process listening
// there, answering as xlb would, every command that uses the socket
// refuses with one line naming the socket and the uid found, exits 1, and
// sends nothing: the squatter sees connections, never a request byte.
func TestCtlRefusesSquattedSocket(t *testing.T) {
	nettest.RequireRoot(t)
	dir := nettest.SharedDir(t)
	sock := filepath.Join(dir, "admin.sock")
	sq := squat(t, sock, nettest.Nobody)
	cfg := filepath.Join(t.TempDir(), "xlb.toml")
	if err := os.WriteFile(cfg, []byte(ctlConfig+"\n[dataplane]\ninterface = \"eth0\"\n[admin]\nsocket = \""+sock+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmds := [][]string{
		{"reload", "-c", cfg, "--socket", sock},
		{"reload", "-c", cfg},
		{"drain", "--socket", sock, "b1"},
		{"undrain", "-c", cfg, "b1"},
		{"drain", "--socket", sock, "--node"},
		{"undrain", "--socket", sock, "--node"},
		{"capture", "--socket", sock, "-w", filepath.Join(t.TempDir(), "c.pcapng")},
	}
	for _, args := range cmds {
		o := xlb(args...)
		o.wantCode(t, 1)
		if o.stdout != "" || !strings.Contains(o.stderr, sock) || !strings.Contains(o.stderr, "uid 65534") ||
			strings.Count(strings.TrimSpace(o.stderr), "\n") != 0 {
			t.Errorf("xlb %s: stdout %q, stderr %q: want one line naming %s and uid 65534", strings.Join(args, " "), o.stdout, o.stderr, sock)
		}
	}
	for range cmds {
		select {
		case <-sq.done:
		case <-time.After(time.Minute): // only against a hang
			t.Fatal("the squatter's connections did not end")
		}
	}
	sq.mu.Lock()
	defer sq.mu.Unlock()
	for i, n := range sq.conns {
		if n != 0 {
			t.Errorf("connection %d: the squatter received %d bytes, want none", i, n)
		}
	}
}
