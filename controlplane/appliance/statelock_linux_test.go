package appliance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"xlb/internal/safedir"
)

// TestStateLock_SecondRefused: while one locker holds a state_dir, a
// second (another open of the file, as another process's would be) is
// refused with the one line that names the directory and the holder's
// pid; once the first lets go, the next takes it.
func TestStateLock_SecondRefused(t *testing.T) {
	dir := t.TempDir()
	first, err := lockStateDir(dir, os.Geteuid(), os.Getegid())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, lockFile))
	if err != nil || string(b) != strconv.Itoa(os.Getpid())+"\n" {
		t.Fatalf("the lock file holds %q (%v), want this process's pid", b, err)
	}
	second, err := lockStateDir(dir, os.Geteuid(), os.Getegid())
	want := fmt.Sprintf("dataplane.state_dir %s is in use by xlb pid %d: give each instance its own state_dir", dir, os.Getpid())
	if _, ok := errors.AsType[errStateDirInUse](err); !ok || second != nil || err.Error() != want {
		t.Fatalf("second lock: %v (%v), want %q", second, err, want)
	}
	first.release()
	third, err := lockStateDir(dir, os.Geteuid(), os.Getegid())
	if err != nil {
		t.Fatalf("lock after the first let go: %v", err)
	}
	third.release()
	(*stateLock)(nil).release() // nothing to let go: no panic
}

// TestStateLock_NoPidYet: a holder that has not written its pid yet (or
// an empty file) is "another xlb".
func TestStateLock_NoPidYet(t *testing.T) {
	dir := t.TempDir()
	first, err := lockStateDir(dir, os.Geteuid(), os.Getegid())
	if err != nil {
		t.Fatal(err)
	}
	defer first.release()
	stateMust(t, first.f.Truncate(0))
	_, err = lockStateDir(dir, os.Geteuid(), os.Getegid())
	if want := "dataplane.state_dir " + dir + " is in use by another xlb: give each instance its own state_dir"; err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
}

// TestStateLock_LinkRefused: a lock file that is a link (planted to make
// xlb create or truncate a file elsewhere) is refused as unsafe, and the
// file it points at is left as it was.
func TestStateLock_LinkRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "target")
	stateMust(t, os.WriteFile(target, []byte("root's own"), 0o600))
	stateMust(t, os.Symlink(target, filepath.Join(dir, lockFile)))
	if l, err := lockStateDir(dir, os.Geteuid(), os.Getegid()); !errors.Is(err, safedir.ErrUnsafe) || l != nil {
		t.Fatalf("a lock file that is a link: %v, want refused as unsafe", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "root's own" {
		t.Errorf("the link's target was written: %q", b)
	}
}

// TestOpenTable_StateDirInUse: a second stack on a state_dir whose table
// a first one has open gets no table, and the refusal line; the first's
// table file is untouched by it. The first keeps the lock in its keeper
// until the teardown lets it go (TestStateLock_SecondRefused takes it
// again after).
func TestOpenTable_StateDirInUse(t *testing.T) {
	dir := stateMkdir(t, filepath.Join(t.TempDir(), "sd"), 0o700)
	s1, _ := stateStack(dir)
	ct1, _, k1, err := s1.openTable()
	if err != nil || k1 == nil || k1.lock == nil {
		t.Fatalf("first openTable: %v (keeper %v)", err, k1 != nil)
	}
	before, err := os.Stat(filepath.Join(dir, tableFile))
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := stateStack(dir)
	ct2, _, k2, err := s2.openTable()
	want := fmt.Sprintf("dataplane.state_dir %s is in use by xlb pid %d: give each instance its own state_dir", dir, os.Getpid())
	if _, ok := errors.AsType[errStateDirInUse](err); !ok || ct2 != nil || k2 != nil || err.Error() != want {
		t.Fatalf("second openTable: table %v keeper %v, %v; want %q", ct2 != nil, k2 != nil, err, want)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("the refusal is not one line: %q", err)
	}
	after, err := os.Stat(filepath.Join(dir, tableFile))
	if err != nil || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the first's table file changed: %v", err)
	}
	_ = ct1 // the table file keeps its own flock for the table's life
	k1.lock.release()
}
