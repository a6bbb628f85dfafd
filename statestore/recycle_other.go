//go:build !unix

package statestore

import (
	"errors"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// fileIdentity: no inodes here, so the recycler keeps nothing.
func fileIdentity(os.FileInfo) (ino, links uint64, ok bool) { return 0, 0, false }

// truncateFile is never reached: nothing is reused without inodes.
func truncateFile(vfs.File, int64) error {
	return errors.New("statestore: reused files need a unix system")
}
