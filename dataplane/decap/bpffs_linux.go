package decap

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// requireBPFFS fails unless dir is on a bpffs, where pins can live.
func requireBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("decap: pin directory %s: %w", dir, err)
	}
	if st.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("decap: %s is not a bpf filesystem (mount -t bpf bpf %s)", dir, dir)
	}
	return nil
}
