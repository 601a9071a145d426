//go:build linux

package safedir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"xlb/internal/nettest"
)

// other is a uid that is neither root nor the test's.
const other = 65534

// base is a fresh directory whose ancestors are safe for the test's uid:
// t.TempDir() is 0700 under /tmp (sticky).
func base(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	if err := Check(d, os.Geteuid()); err != nil {
		t.Skipf("the test's temporary directory is itself not safe here: %v", err)
	}
	return d
}

func mkdir(t *testing.T, p string, mode os.FileMode) string {
	t.Helper()
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

func wantUnsafe(t *testing.T, what string, err error, says string) {
	t.Helper()
	if !errors.Is(err, ErrUnsafe) {
		t.Errorf("%s: %v, want an error wrapping ErrUnsafe", what, err)
		return
	}
	if !strings.Contains(err.Error(), says) {
		t.Errorf("%s: %q does not say %q", what, err, says)
	}
}

// TestCheck_Directory: a directory that is not a link, owned by the
// process's uid and writable by no one else is safe; one writable by
// group or others, a link to a safe one, a file, or a directory under a
// parent others may write (not sticky) is refused, saying why; a sticky
// parent others may write (as /tmp) is fine.
func TestCheck_Directory(t *testing.T) {
	uid := os.Geteuid()
	b := base(t)
	good := mkdir(t, filepath.Join(b, "good"), 0o700)
	if err := Check(good, uid); err != nil {
		t.Errorf("a 0700 directory of the process's own: %v", err)
	}
	wantUnsafe(t, "0770", Check(mkdir(t, filepath.Join(b, "g"), 0o770), uid), "writable by group or others")
	wantUnsafe(t, "0703", Check(mkdir(t, filepath.Join(b, "o"), 0o703), uid), "writable by group or others")
	wantUnsafe(t, "1777", Check(mkdir(t, filepath.Join(b, "sticky"), 0o777|os.ModeSticky), uid), "writable by group or others")
	link := filepath.Join(b, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	wantUnsafe(t, "a link to a safe directory", Check(link, uid), "symbolic link")
	file := filepath.Join(b, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantUnsafe(t, "a file", Check(file, uid), "not a directory")
	if err := Check(filepath.Join(b, "missing"), uid); !errors.Is(err, os.ErrNotExist) || errors.Is(err, ErrUnsafe) {
		t.Errorf("a missing directory: %v, want not-exist", err)
	}

	open := mkdir(t, filepath.Join(b, "open"), 0o777)
	under := mkdir(t, filepath.Join(open, "state"), 0o700)
	wantUnsafe(t, "under a 0777 parent", Check(under, uid), open+", above it, is writable by group or others")
	sticky := mkdir(t, filepath.Join(b, "tmp"), 0o777|os.ModeSticky)
	if err := Check(mkdir(t, filepath.Join(sticky, "state"), 0o700), uid); err != nil {
		t.Errorf("under a sticky 1777 parent: %v", err)
	}
	// An ancestor that is a link leads to where the chain is checked too.
	via := filepath.Join(b, "via")
	if err := os.Symlink(open, via); err != nil {
		t.Fatal(err)
	}
	wantUnsafe(t, "through a link into a 0777 directory", Check(filepath.Join(via, "state"), uid), open+", above it")
	via2 := filepath.Join(b, "via2")
	if err := os.Symlink(b, via2); err != nil {
		t.Fatal(err)
	}
	if err := Check(filepath.Join(via2, "good"), uid); err != nil {
		t.Errorf("through a link into a safe directory: %v", err)
	}
}

// TestCheck_Owner: a directory, or a directory above it, owned by a uid
// that is neither root nor the process's is refused, naming the owner.
func TestCheck_Owner(t *testing.T) {
	nettest.RequireRoot(t) // chown
	b := base(t)
	d := mkdir(t, filepath.Join(b, "foreign"), 0o700)
	if err := os.Chown(d, other, other); err != nil {
		t.Fatal(err)
	}
	wantUnsafe(t, "owned by 65534", Check(d, 0), "owned by uid 65534, not root or uid 0")
	// The same directory is safe for that uid.
	if err := Check(d, other); err != nil {
		t.Errorf("a directory of uid %d, checked for that uid: %v", other, err)
	}
	in := mkdir(t, filepath.Join(d, "state"), 0o700)
	wantUnsafe(t, "under a parent owned by 65534", Check(in, 0), d+" is owned by uid 65534")
}

// TestOpen_Refuses: Open returns a safe regular file and refuses a link
// (dangling or not, even with O_CREATE: nothing is created through it), a
// FIFO (never opened: opening would block), a group- or other-writable
// file and one of another owner, leaving each as it was.
func TestOpen_Refuses(t *testing.T) {
	uid := os.Geteuid()
	b := base(t)
	good := filepath.Join(b, "good")
	if err := os.WriteFile(good, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Open(good, os.O_RDWR, uid)
	if err != nil {
		t.Fatalf("a safe file: %v", err)
	}
	f.Close()
	f, err = Open(filepath.Join(b, "new"), os.O_RDWR|os.O_CREATE, uid)
	if err != nil {
		t.Fatalf("a new file: %v", err)
	}
	f.Close()

	target := filepath.Join(b, "target")
	if err := os.WriteFile(target, []byte("root's"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(b, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	_, err = Open(link, os.O_RDWR|os.O_CREATE, uid)
	wantUnsafe(t, "a link", err, "symbolic link")
	dangling := filepath.Join(b, "dangling")
	if err := os.Symlink(filepath.Join(b, "nothing"), dangling); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dangling, os.O_RDWR|os.O_CREATE, uid)
	wantUnsafe(t, "a dangling link", err, "symbolic link")
	if _, err := os.Lstat(filepath.Join(b, "nothing")); !os.IsNotExist(err) {
		t.Errorf("a file was created through a dangling link: %v", err)
	}
	if got, _ := os.ReadFile(target); string(got) != "root's" {
		t.Errorf("the link's target changed: %q", got)
	}
	fifo := filepath.Join(b, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Open(fifo, os.O_RDONLY, uid)
	wantUnsafe(t, "a FIFO", err, "not a regular file")
	wide := filepath.Join(b, "wide")
	if err := os.WriteFile(wide, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(wide, 0o620); err != nil {
		t.Fatal(err)
	}
	_, err = Open(wide, os.O_RDONLY, uid)
	wantUnsafe(t, "a group-writable file", err, "writable by group or others")
	if os.Geteuid() == 0 {
		foreign := filepath.Join(b, "foreign")
		if err := os.WriteFile(foreign, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(foreign, other, other); err != nil {
			t.Fatal(err)
		}
		_, err = Open(foreign, os.O_RDONLY, uid)
		wantUnsafe(t, "a file of uid 65534", err, "owned by uid 65534")
	}
}

// TestWriteFile_NoLinkFollowed: links planted as the file and as its
// temporary (name.new), pointing at a file outside, leave that file as it
// was; the result is a regular 0600 file of the process's own with the
// new content and no name.new is left.
func TestWriteFile_NoLinkFollowed(t *testing.T) {
	b := base(t)
	dir := mkdir(t, filepath.Join(b, "state"), 0o700)
	outside := filepath.Join(b, "outside")
	if err := os.WriteFile(outside, []byte("root's"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"f.json", "f.json.new"} {
		if err := os.Symlink(outside, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteFile(dir, "f.json", []byte("new")); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	if got, _ := os.ReadFile(outside); string(got) != "root's" {
		t.Errorf("the file a link pointed at was written: %q", got)
	}
	fi, err := os.Lstat(filepath.Join(dir, "f.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || int(fi.Sys().(*syscall.Stat_t).Uid) != os.Geteuid() {
		t.Errorf("f.json is %s of uid %d, want a regular 0600 file of uid %d", fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, os.Geteuid())
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "f.json")); string(got) != "new" {
		t.Errorf("f.json holds %q", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "f.json.new")); !os.IsNotExist(err) {
		t.Errorf("f.json.new left behind: %v", err)
	}
}

// TestMemoryFS: /dev/shm is tmpfs; /proc is not a memory file system.
func TestMemoryFS(t *testing.T) {
	if mem, magic, err := MemoryFS("/dev/shm"); err != nil || !mem {
		t.Errorf("/dev/shm: memory %v (magic %#x), %v", mem, magic, err)
	}
	if mem, _, err := MemoryFS("/proc"); err != nil || mem {
		t.Errorf("/proc: memory %v, %v", mem, err)
	}
}

// TestMkdirAll: a missing directory is made 0700 with its missing
// parents under a safe directory; under one others may write (not
// sticky) nothing is made and the error says where; an existing unsafe
// directory is refused as Check refuses it.
func TestMkdirAll(t *testing.T) {
	uid := os.Geteuid()
	b := base(t)
	dir := filepath.Join(b, "run", "xlb")
	if err := MkdirAll(dir, uid); err != nil {
		t.Fatalf("MkdirAll: %v", err)
	}
	for _, p := range []string{filepath.Join(b, "run"), dir} {
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want a 0700 directory", p, fi.Mode(), err)
		}
	}
	if err := MkdirAll(dir, uid); err != nil {
		t.Errorf("MkdirAll of an existing safe directory: %v", err)
	}
	open := mkdir(t, filepath.Join(b, "open"), 0o777)
	err := MkdirAll(filepath.Join(open, "a", "b"), uid)
	wantUnsafe(t, "under a 0777 directory", err, open+", above it, is writable by group or others")
	if _, err := os.Lstat(filepath.Join(open, "a")); !os.IsNotExist(err) {
		t.Errorf("a directory was made under the 0777 one: %v", err)
	}
	wantUnsafe(t, "an existing 0777 directory", MkdirAll(open, uid), "writable by group or others")
}
