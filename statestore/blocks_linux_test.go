package statestore

import (
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// fadvDontNeed is POSIX_FADV_DONTNEED (linux/fadvise.h): drop the file's
// cached pages.
const fadvDontNeed = 4

// fadvise gives the kernel advice about f's whole file (benchmarks evict
// run files from the page cache with it); a file without a descriptor or
// an error is ignored.
func fadvise(f vfs.File, advice int) {
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return
	}
	_, _, _ = syscall.Syscall6(syscall.SYS_FADVISE64, fd, 0, 0, uintptr(advice), 0, 0)
}
