package statestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Lock takes the directory lock of the store in dir, the one Open takes,
// so that nothing opens the store until unlock is called: for removing a
// store, which must not happen under a running process. When a process
// (this one included) has the store open it returns an error matching
// ErrLocked. A dir without a store needs no lock: unlock is then a no-op.
func Lock(dir string) (unlock func() error, err error) {
	dbDir := filepath.Join(dir, "db")
	if _, err := os.Stat(dbDir); errors.Is(err, fs.ErrNotExist) {
		return func() error { return nil }, nil
	} else if err != nil {
		return nil, fmt.Errorf("statestore: %w", err)
	}
	lock, err := pebble.LockDirectory(dbDir, vfs.Default)
	if err != nil {
		if isLockError(err) {
			return nil, fmt.Errorf("%w: %s: %w", ErrLocked, dbDir, err)
		}
		return nil, fmt.Errorf("statestore: lock %s: %w", dbDir, err)
	}
	return lock.Close, nil
}

// Remove deletes root and everything in it, the store in dir (inside root)
// included, unless a process has that store open: then it removes nothing
// and returns an error matching ErrLocked. It holds the store's lock while
// it removes, so no Open starts on the store in between. A missing root is
// not an error.
//
// A plain os.RemoveAll would not ask: a running job would keep writing a
// store whose files are gone, and the caller's rebuilt store and the
// running one would both take themselves for the partition's.
func Remove(root, dir string) error {
	unlock, err := Lock(dir)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.RemoveAll(root); err != nil {
		return fmt.Errorf("statestore: remove %s: %w", root, err)
	}
	return nil
}
