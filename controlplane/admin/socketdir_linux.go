package admin

import "xlb/internal/safedir"

// checkPrivateDir reports why dir is open to users other than root and
// uid: it, or a directory above it, is a symbolic link, another user's, or
// writable by group or others (safedir.Check, as for state_dir).
func checkPrivateDir(dir string, uid int) error { return safedir.Check(dir, uid) }
