package statestore

import (
	"fmt"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// guardFS keeps write errors away from Pebble. Pebble does not survive every
// write error it sees: a failed WAL close or create during memtable rotation
// panics after DB.mu was released, and the deferred unlock then aborts the
// Go runtime ("sync: unlock of unlocked mutex"), which no recover can catch;
// a failed flush is retried forever while commits stall. So the first error
// of a write, sync or file creation is recorded as the store's fatal error
// and the goroutine that met it is parked instead of returning to Pebble,
// exactly as if the process had died at that instant, which the store is
// built to survive (see "Fatal errors" in the package documentation).
//
// Lock, MkdirAll, Remove and Preallocate errors pass through: Pebble handles
// them (a locked or missing directory fails Open, a failed delete of an
// obsolete file is logged and retried), as do all read errors.
type guardFS struct {
	vfs.FS
	fatal *fatalState
	rec   *recycler // keeps the tables Pebble deletes; nil: they are deleted
}

// Remove deletes name, or moves it to the recycler's pool if it is a table
// the recycler keeps (recycle.go).
func (g guardFS) Remove(name string) error {
	if g.rec.keep(name) {
		return nil
	}
	return g.FS.Remove(name)
}

// fail records err as fatal and parks the calling goroutine for good.
func (g guardFS) fail(op, name string, err error) {
	g.fatal.set(fmt.Errorf("%s %s: %w", op, name, err))
	g.fatal.park()
}

func (g guardFS) file(f vfs.File, name string) vfs.File {
	return guardFile{File: f, fs: g, name: name}
}

func (g guardFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.Create(name, category)
	if err != nil {
		g.fail("create", name, err)
	}
	return g.file(f, name), nil
}

func (g guardFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := g.FS.OpenReadWrite(name, category, opts...)
	if err != nil {
		return nil, err // e.g. not found: Pebble decides
	}
	return g.file(f, name), nil
}

func (g guardFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.ReuseForWrite(oldname, newname, category)
	if err != nil {
		g.fail("reuse", oldname, err)
	}
	return g.file(f, newname), nil
}

// OpenDir returns a directory handle whose Sync (making a create or rename
// durable) is guarded; opening it is a read.
func (g guardFS) OpenDir(name string) (vfs.File, error) {
	f, err := g.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return g.file(f, name), nil
}

func (g guardFS) Link(oldname, newname string) error {
	if err := g.FS.Link(oldname, newname); err != nil {
		g.fail("link", oldname, err)
	}
	return nil
}

func (g guardFS) Rename(oldname, newname string) error {
	if err := g.FS.Rename(oldname, newname); err != nil {
		g.fail("rename", oldname, err)
	}
	return nil
}

func (g guardFS) MkdirAll(dir string, perm os.FileMode) error { return g.FS.MkdirAll(dir, perm) }
func (g guardFS) Lock(name string) (io.Closer, error)         { return g.FS.Lock(name) }
func (g guardFS) Unwrap() vfs.FS                              { return g.FS }

// guardFile guards the writes of one file. Pebble opens files for reading
// with Open, which guardFS does not wrap.
type guardFile struct {
	vfs.File
	fs   guardFS
	name string
}

func (f guardFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	if err != nil {
		f.fs.fail("write", f.name, err)
	}
	return n, nil
}

func (f guardFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	if err != nil {
		f.fs.fail("write", f.name, err)
	}
	return n, nil
}

func (f guardFile) Sync() error {
	if err := f.File.Sync(); err != nil {
		f.fs.fail("sync", f.name, err)
	}
	return nil
}

func (f guardFile) SyncData() error {
	if err := f.File.SyncData(); err != nil {
		f.fs.fail("sync", f.name, err)
	}
	return nil
}

func (f guardFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	if err != nil {
		f.fs.fail("sync", f.name, err)
	}
	return full, nil
}

func (f guardFile) Close() error {
	if err := f.File.Close(); err != nil {
		f.fs.fail("close", f.name, err)
	}
	return nil
}
