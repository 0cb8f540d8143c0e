package kernel

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// getsockoptMeminfo reads SO_MEMINFO: the socket's memory counters
// (SK_MEMINFO_SNDBUF, SK_MEMINFO_WMEM_QUEUED, ...).
func getsockoptMeminfo(fd int, mi *[unix.SK_MEMINFO_VARS]uint32) error {
	l := uint32(unsafe.Sizeof(*mi))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&mi[0])), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}
