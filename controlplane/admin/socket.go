package admin

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// socketListener is the Unix socket at path, which it removes when asked
// if the file is still its own.
type socketListener struct {
	*net.UnixListener
	path string
	file os.FileInfo // the socket file as made, to recognise it
}

// listenSocket listens on a Unix socket at path with mode 0600. The
// socket is made in a private directory (0700) beside path and renamed
// into place, so no other user can connect in the moment between bind(2),
// which applies the process's umask, and chmod(2). A missing directory is
// made 0700. A socket file already at path is replaced when nothing
// answers on it (left by a process that died); one that answers is
// another xlb's, and an error.
//
// The directory must be owner's (or root's) and not writable by group or
// others (checkPrivateDir): whoever can write it can put a socket of their
// own at path, between two starts of xlb, and have the operator's
// commands sent to it.
func listenSocket(path string, owner int) (_ *socketListener, err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("admin socket directory: %w", err)
	}
	if err := checkPrivateDir(dir, owner); err != nil {
		return nil, fmt.Errorf("refusing the admin socket's directory ([admin] socket %s): %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("admin socket %s: the file exists and is not a socket", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("admin socket %s: another process answers on it (another xlb?)", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("admin socket %s: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("admin socket %s: removing the stale socket: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}

	tmp, err := os.MkdirTemp(dir, ".xlb-")
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	defer os.RemoveAll(tmp)
	made := filepath.Join(tmp, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: made, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	// Renamed away, the file is removed by remove, not by Close.
	ln.SetUnlinkOnClose(false)
	defer func() {
		if err != nil {
			ln.Close()
		}
	}()
	if err := os.Chmod(made, 0o600); err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if err := os.Rename(made, path); err != nil {
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	return &socketListener{UnixListener: ln, path: path, file: fi}, nil
}

// remove deletes the socket file unless another process has put its own
// in its place since.
func (l *socketListener) remove() {
	if fi, err := os.Lstat(l.path); err == nil && os.SameFile(fi, l.file) {
		_ = os.Remove(l.path)
	}
}
