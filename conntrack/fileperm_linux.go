//go:build linux

package conntrack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrUnsafeFile is what Open's Refused wraps for a table file another user
// could have written or that leads elsewhere: a link, a file that is not
// regular, one owned by neither root nor this process's uid, or one group
// or others may write. (internal/safedir holds the same rules for the
// rest of xlb; conntrack depends on no package of this module.)
var ErrUnsafeFile = errors.New("not a file only root or this process's user could have written")

// openTableFile opens (or creates, 0600) the table file at path for
// reading and writing without following a link, and returns it only when
// it is safe (see ErrUnsafeFile). A FIFO or device there is never opened.
func openTableFile(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("%w: %s is a symbolic link", ErrUnsafeFile, path)
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: %s is not a regular file (%s)", ErrUnsafeFile, path, fi.Mode().Type())
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%w: %s is a symbolic link", ErrUnsafeFile, path)
	}
	if err != nil {
		return nil, err
	}
	// What was opened, not what Lstat saw.
	fi, err := f.Stat()
	if err == nil {
		st, _ := fi.Sys().(*syscall.Stat_t)
		switch {
		case !fi.Mode().IsRegular():
			err = fmt.Errorf("%w: %s is not a regular file (%s)", ErrUnsafeFile, path, fi.Mode().Type())
		case st == nil || (st.Uid != 0 && int(st.Uid) != os.Geteuid()):
			err = fmt.Errorf("%w: %s is owned by uid %d, not root or uid %d", ErrUnsafeFile, path, st.Uid, os.Geteuid())
		case fi.Mode().Perm()&0o022 != 0:
			err = fmt.Errorf("%w: %s is writable by group or others (mode %s)", ErrUnsafeFile, path, fi.Mode())
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// createExcl creates the file at path afresh, 0600: whatever is there (a
// stale file, a planted link) is unlinked first, which never follows a
// link, and the file is made with O_EXCL|O_NOFOLLOW, so it is this call's.
func createExcl(path string) (*os.File, error) {
	if err := unix.Unlink(path); err != nil && !errors.Is(err, unix.ENOENT) {
		return nil, &os.PathError{Op: "unlink", Path: path, Err: err}
	}
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
}
