package appliance

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"

	"xlb/config"
)

// Identity is who `xlb run` runs as once started: the user of
// dataplane.user, or, without it, the one that started it.
type Identity struct {
	UID, GID int
	// Name is the user's name, "" for a uid the user database lacks.
	Name string
	// Configured says dataplane.user names it; Cfg is its text there.
	Configured bool
	Cfg        string
}

// RunAs resolves dataplane.user in the user database (/etc/passwd or NSS):
// its uid and primary group. A decimal uid the database lacks is taken as
// it is, with the group of the same number. Without dataplane.user it is
// this process's effective uid and gid: what `xlb run` stays, started by
// the same user. What reads it: the appliance, to switch to it and to
// check who owns state_dir and the socket's directory; the CLI, to check
// who answers on the socket.
func RunAs(cfg *config.Config) (Identity, error) {
	name := cfg.Dataplane.User
	if name == "" {
		return Identity{UID: os.Geteuid(), GID: os.Getegid()}, nil
	}
	u, err := lookupUser(name)
	if err != nil {
		return Identity{}, fmt.Errorf("dataplane.user %q (%s): %w", name, cfg.Path, err)
	}
	u.Cfg = name
	return u, nil
}

// RunAsUID is RunAs's uid.
func RunAsUID(cfg *config.Config) (int, error) {
	id, err := RunAs(cfg)
	return id.UID, err
}

func lookupUser(name string) (Identity, error) {
	num, numErr := strconv.ParseUint(name, 10, 32)
	var u *user.User
	var err error
	if numErr == nil {
		u, err = user.LookupId(name)
		var unknown user.UnknownUserIdError
		if errors.As(err, &unknown) {
			return Identity{UID: int(num), GID: int(num), Configured: true}, nil
		}
	} else {
		u, err = user.Lookup(name)
	}
	if err != nil {
		return Identity{}, err
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return Identity{}, fmt.Errorf("uid %q is not a number", u.Uid)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return Identity{}, fmt.Errorf("primary group %q is not a number", u.Gid)
	}
	return Identity{UID: uid, GID: gid, Name: u.Username, Configured: true}, nil
}
