package admin_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"xlb/controlplane/admin"
	"xlb/internal/nettest"
)

// startSocket starts a server whose socket is sock, with the socket's
// directory owner given (nil: the process's uid).
func startSocket(t *testing.T, sock string, owner *int) error {
	t.Helper()
	s, err := admin.New(admin.Options{Listen: "127.0.0.1:0", Socket: sock, SocketOwner: owner}, &fakeSources{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start()
	t.Cleanup(func() { s.Close(t.Context()) })
	return err
}

// TestSocketDirectoryRefused: the socket's directory must be root's or
// the user's xlb runs as, and not writable by group or others, nor a
// link: whoever can write it could put their own socket at the path. A
// refused one fails Start with one line naming it and why, and no socket
// is made; a private one (0700, or 0755) is used.
func TestSocketDirectoryRefused(t *testing.T) {
	base := t.TempDir()
	private := filepath.Join(base, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	mkdir := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(private, link); err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		dir, why string
	}{
		{mkdir("world", 0o777), "writable by group or others"},
		{mkdir("sticky", 0o1777), "writable by group or others"},
		{mkdir("group", 0o770), "writable by group or others"},
		{link, "symbolic link"},
	}
	for _, c := range refused {
		sock := filepath.Join(c.dir, "admin.sock")
		err := startSocket(t, sock, nil)
		if err == nil || !strings.Contains(err.Error(), c.dir) || !strings.Contains(err.Error(), c.why) || strings.Contains(err.Error(), "\n") {
			t.Errorf("socket in %s: %v, want one line naming it and %q", c.dir, err, c.why)
		}
		if _, err := os.Lstat(filepath.Join(private, "admin.sock")); err == nil {
			t.Errorf("socket in %s: a socket was made", c.dir)
		}
		if _, err := os.Lstat(sock); err == nil {
			t.Errorf("socket in %s: a socket was made", c.dir)
		}
	}
	for _, mode := range []os.FileMode{0o700, 0o755} {
		d := mkdir("ok"+mode.String(), mode)
		if err := startSocket(t, filepath.Join(d, "admin.sock"), nil); err != nil {
			t.Errorf("socket in a %v directory of ours: %v", mode, err)
		}
	}
}

// TestSocketDirectoryOwner: a directory another user owns is refused,
// unless that user is the one xlb runs as (Options.SocketOwner).
func TestSocketDirectoryOwner(t *testing.T) {
	nettest.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, nettest.Nobody, nettest.Nobody); err != nil {
		t.Fatal(err)
	}
	err := startSocket(t, filepath.Join(dir, "admin.sock"), nil)
	if err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("socket in a directory of uid 65534: %v, want refused naming the owner", err)
	}
	owner := nettest.Nobody
	if err := startSocket(t, filepath.Join(dir, "admin.sock"), &owner); err != nil {
		t.Errorf("socket in the directory of the user xlb runs as: %v", err)
	}
}
