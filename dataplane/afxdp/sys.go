package afxdp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// x/sys has no typed getsockopt/setsockopt for the AF_XDP structs; these
// pass them by pointer and length, as the kernel reads them.

func setsockoptUmemReg(fd int, reg *unix.XDPUmemReg) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(reg)), unsafe.Sizeof(*reg), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// getsockopt reads a SOL_XDP option into p (size bytes) and returns how many
// bytes the kernel wrote; older kernels write shorter versions of a struct.
func getsockopt(fd, opt int, p unsafe.Pointer, size uintptr) (uintptr, error) {
	n := uint32(size)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt),
		uintptr(p), uintptr(unsafe.Pointer(&n)), 0)
	if errno != 0 {
		return 0, errno
	}
	return uintptr(n), nil
}

func getMmapOffsets(fd int) (unix.XDPMmapOffsets, uintptr, error) {
	var off unix.XDPMmapOffsets
	n, err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off))
	return off, n, err
}

func getStatistics(fd int) (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	_, err := getsockopt(fd, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st))
	return st, err
}

// sendtoKick is sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0): the TX wakeup.
// A raw syscall, so the hot path builds no Sockaddr and allocates nothing.
func sendtoKick(fd int) unix.Errno {
	_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return errno
}
