package admin

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerCred is the uid, gid and pid of the process at the other end of a
// Unix socket connection, from SO_PEERCRED (its credentials when it
// connected).
func peerCred(c net.Conn) peer {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return peer{}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return peer{}
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return peer{}
	}
	return peer{uid: cred.Uid, gid: cred.Gid, pid: cred.Pid, known: true}
}
