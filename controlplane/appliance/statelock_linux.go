package appliance

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"xlb/internal/safedir"
)

// lockFile is the file of state_dir whose flock(2) says that an xlb uses
// the directory; it holds that process's id, for the refusal to name.
// Two processes mapping one table file would each take the other's
// entries for damage, and each save the other's refs as their own.
const lockFile = "xlb.lock"

// errStateDirInUse is a state_dir another process holds the lock of: xlb
// does not start. Pid is 0 when the file did not name one.
type errStateDirInUse struct {
	dir string
	pid int
}

func (e errStateDirInUse) Error() string {
	who := "another xlb"
	if e.pid > 0 {
		who = "xlb pid " + strconv.Itoa(e.pid)
	}
	return fmt.Sprintf("dataplane.state_dir %s is in use by %s: give each instance its own state_dir", e.dir, who)
}

// stateLock is a state_dir's lock, held while its file is open.
type stateLock struct{ f *os.File }

// lockStateDir takes the lock of dir, a directory safedir has checked,
// for this process and writes its pid there. The lock is released when
// the returned lock is, or when the process ends, however it ends (the
// kernel drops a dead process's flocks): nothing stale is ever left to
// clean up. The file is opened as safedir.Open does, never through a
// link, and is owner's (so a process that switched to owner keeps using
// it at its next start). It returns errStateDirInUse when another process
// holds the lock, an error wrapping safedir.ErrUnsafe when the file is
// not safe to use.
func lockStateDir(dir string, owner, group int) (*stateLock, error) {
	path := filepath.Join(dir, lockFile)
	f, err := safedir.Open(path, os.O_RDWR|os.O_CREATE, owner)
	if err != nil {
		return nil, err
	}
	fd := int(f.Fd())
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errStateDirInUse{dir: dir, pid: lockHolder(f)}
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err == nil && owner != os.Geteuid() {
		err = f.Chown(owner, group)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return &stateLock{f: f}, nil
}

// lockHolder is the pid the lock's holder wrote, 0 when there is none
// (yet: it writes just after it takes the lock).
func lockHolder(f *os.File) int {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 32))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// release lets another process take the lock; nil does nothing. The file
// stays: removing it would let one process lock a new file at the path
// while another still holds the old one.
func (l *stateLock) release() {
	if l != nil {
		l.f.Close()
	}
}
