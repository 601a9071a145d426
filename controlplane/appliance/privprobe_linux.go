//go:build xlb_privprobe

package appliance

import (
	"errors"
	"os"
	"path/filepath"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A test build only (tag xlb_privprobe): once privileges are dropped, the
// running process itself tries to read the file XLB_PRIVPROBE_READ names
// and to create a file in the directory XLB_PRIVPROBE_DIR names, and logs
// what the kernel answered ("ok" or the errno's name), so that a test sees
// what its credentials allow rather than what /proc says they are.
func init() {
	afterDrop = func(log *zap.Logger) {
		read, dir := os.Getenv("XLB_PRIVPROBE_READ"), os.Getenv("XLB_PRIVPROBE_DIR")
		res := func(err error) string {
			var errno unix.Errno
			switch {
			case err == nil:
				return "ok"
			case errors.As(err, &errno):
				return unix.ErrnoName(errno)
			}
			return err.Error()
		}
		_, rerr := os.ReadFile(read)
		f, cerr := os.OpenFile(filepath.Join(dir, "probe"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if cerr == nil {
			f.Close()
		}
		log.Info("privilege probe", zap.String("read", res(rerr)), zap.String("create", res(cerr)))
	}
}
