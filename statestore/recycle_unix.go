//go:build unix

package statestore

import (
	"fmt"
	"os"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// fileIdentity returns the inode and link count of the file fi describes;
// ok is false when the file system gives none (an in-memory one): the
// recycler then keeps nothing.
func fileIdentity(fi os.FileInfo) (ino, links uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return st.Ino, uint64(st.Nlink), true
}

// truncateFile cuts f to n bytes (a reused file may be longer).
func truncateFile(f vfs.File, n int64) error {
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return fmt.Errorf("statestore: no descriptor to cut a reused file")
	}
	return syscall.Ftruncate(int(fd), n)
}
