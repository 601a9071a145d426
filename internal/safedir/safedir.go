//go:build linux

// Package safedir is where xlb checks a directory it keeps files in that
// root trusts (dataplane.state_dir, the admin socket's directory), and
// creates, replaces and opens files there without following links.
//
// A directory is safe for a process of uid when no one but root and uid
// can change what is in it or what its path leads to: the directory is not
// a symbolic link, root or uid owns it, and neither group nor others may
// write it; each directory above it (and, where the path goes through a
// symbolic link, each directory above its target) is owned by root or uid
// and is not writable by group or others unless it is sticky (as /tmp is:
// there only an entry's owner may rename or remove it). A file in it is
// safe when it is a regular file, not a link, owned by root or uid and
// not writable by group or others.
package safedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrUnsafe is what every refusal of Check and Open wraps.
var ErrUnsafe = errors.New("not safe for xlb's files")

// Check reports why dir is not safe for a process of uid (see the package
// doc), nil when it is. It reads dir and its ancestors only; a missing
// directory is an error of its own (fs.ErrNotExist), not ErrUnsafe.
func Check(dir string, uid int) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symbolic link", ErrUnsafe, abs)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafe, abs)
	}
	if err := owned(abs, fi, uid); err != nil {
		return err
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: %s is writable by group or others (mode %s): chmod go-w it", ErrUnsafe, abs, fi.Mode())
	}
	parent := filepath.Dir(abs)
	if parent == abs {
		return nil
	}
	return chain(parent, uid)
}

// MkdirAll makes dir (0700, as any missing directory above it) once the
// nearest directory above it that exists has been checked as Check checks
// an ancestor, so that nothing is made where another user could move it;
// then it checks dir (Check).
func MkdirAll(dir string, uid int) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	p := abs
	for {
		_, err := os.Lstat(p)
		if err == nil {
			break
		}
		up := filepath.Dir(p)
		if !errors.Is(err, fs.ErrNotExist) || up == p {
			return err
		}
		p = up
	}
	if p != abs {
		if err := chain(p, uid); err != nil {
			return err
		}
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return err
		}
	}
	return Check(abs, uid)
}

// chain checks p and the directories above it (ancestors), and where a
// link among them leads elsewhere, the path it leads to as well: the
// links checked are owned, so only root or uid could have made them.
func chain(p string, uid int) error {
	if err := ancestors(p, uid); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return err
	}
	if real != p {
		return ancestors(real, uid)
	}
	return nil
}

// ancestors checks p and every directory above it as a directory above a
// safe one.
func ancestors(p string, uid int) error {
	for {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if err := owned(p, fi, uid); err != nil {
			return err
		}
		// A link's own mode means nothing; who owns it and the
		// directory it is in are what decide where it leads.
		if fi.Mode()&fs.ModeSymlink == 0 && fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
			return fmt.Errorf("%w: %s, above it, is writable by group or others and not sticky (mode %s)", ErrUnsafe, p, fi.Mode())
		}
		up := filepath.Dir(p)
		if up == p {
			return nil
		}
		p = up
	}
}

func owned(p string, fi fs.FileInfo, uid int) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: %s: no owner", ErrUnsafe, p)
	}
	if st.Uid != 0 && int(st.Uid) != uid {
		return fmt.Errorf("%w: %s is owned by uid %d, not root or uid %d (whom xlb runs as)", ErrUnsafe, p, st.Uid, uid)
	}
	return nil
}

// Open opens the file at path with flag (os.O_RDONLY, os.O_RDWR, with or
// without os.O_CREATE) without following a link there, and returns it
// only when it is safe for uid: a regular file, owned by root or uid, not
// writable by group or others. A link, a file of another kind or owner,
// or one others may write is an error wrapping ErrUnsafe (the file is not
// changed: a FIFO or device is never opened, so opening has no effect on
// it).
func Open(path string, flag, uid int) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil {
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			return nil, fmt.Errorf("%w: %s is a symbolic link", ErrUnsafe, path)
		case !fi.Mode().IsRegular():
			return nil, fmt.Errorf("%w: %s is not a regular file (%s)", ErrUnsafe, path, fi.Mode().Type())
		}
	}
	f, err := os.OpenFile(path, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o600)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symbolic link", ErrUnsafe, path)
		}
		return nil, err
	}
	// What was opened, not what Lstat saw: the two can differ.
	fi, err := f.Stat()
	if err == nil {
		err = fileSafe(path, fi, uid)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func fileSafe(path string, fi fs.FileInfo, uid int) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file (%s)", ErrUnsafe, path, fi.Mode().Type())
	}
	if err := owned(path, fi, uid); err != nil {
		return err
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: %s is writable by group or others (mode %s)", ErrUnsafe, path, fi.Mode())
	}
	return nil
}

// CreateNew creates the file at path afresh, 0600, for reading and
// writing: whatever is there (a stale file, a link planted there) is
// unlinked first, which never follows a link, and the file is created
// with O_EXCL and O_NOFOLLOW, so that it is this call's own.
func CreateNew(path string) (*os.File, error) {
	if err := unix.Unlink(path); err != nil && !errors.Is(err, unix.ENOENT) {
		return nil, &os.PathError{Op: "unlink", Path: path, Err: err}
	}
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
}

// WriteFile replaces dir/name with data, so that a reader sees the old
// content or the new, whole, even after a crash of the host: data goes
// into dir/name.new (CreateNew), is synced, renamed over dir/name (rename
// replaces a link there, never follows it), and dir is synced so that the
// rename lasts. On error dir/name is as it was and no name.new is left.
func WriteFile(dir, name string, data []byte) error {
	path := filepath.Join(dir, name)
	tmp := path + ".new"
	f, err := CreateNew(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return SyncDir(dir)
}

// SyncDir makes the entries of dir (a rename into it) durable.
func SyncDir(dir string) error {
	d, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// MemoryFS reports whether dir is on a memory file system (tmpfs, ramfs),
// and the file system's magic number either way.
func MemoryFS(dir string) (bool, int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, 0, err
	}
	magic := int64(st.Type)
	return magic == unix.TMPFS_MAGIC || magic == unix.RAMFS_MAGIC, magic, nil
}
