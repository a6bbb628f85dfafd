package statestore

import (
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Advice for fadvise (linux/fadvise.h).
const (
	fadvRandom   = 1 // POSIX_FADV_RANDOM: no read-ahead
	fadvDontNeed = 4 // POSIX_FADV_DONTNEED: drop the file's cached pages
)

// fadvise gives the kernel advice about f's whole file; a file without a
// descriptor (an in-memory file system) or an error is ignored: advice
// changes costs, never results.
func fadvise(f vfs.File, advice int) {
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return
	}
	_, _, _ = syscall.Syscall6(syscall.SYS_FADVISE64, fd, 0, 0, uintptr(advice), 0, 0)
}
