package statestore

import (
	"fmt"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Recycled tables: the sstables Pebble deletes (a merge's inputs, an
// expired generation, a compaction's inputs) are kept, up to recycleBytes,
// and the next run files the store writes overwrite them in place instead
// of growing new files.
//
// Why: a write into a page the page cache does not hold yet must first get
// a free page from the kernel, and on a virtual machine whose free memory
// is handed back to the host (free page reporting, as on the machines these
// figures come from) that page costs a host fault: dd of 400 MB into a new
// file took 0.54 s of system CPU, the same write just after deleting a file
// 0.07 s, the same write over the cached pages of an existing file 0.02 s.
// A 100M-key store grows the page cache by gigabytes and returns the pages
// of its dead files only seconds later, once the host has them again: in
// the sweep's 100M point the writes of runs took 0.75 s of 4.25 s of CPU
// (528 MiB written per 6M records). Overwriting a dead file keeps its pages
// and spares the kernel both the free and the new page; the store's disk
// use grows by at most recycleBytes (the files wait in ingestDir, which
// Open empties).
//
// A dead file may still be read: a run's blocks (runBlocks) keep their own
// descriptors of its files after Pebble let go of them, so that a Reader
// holding the run reads it to the end. Such a file is pinned (by inode)
// while a descriptor is open and is not reused before the last one closes.
type recycler struct {
	fs  vfs.FS
	max int64 // bytes of dead files kept at most

	mu     sync.Mutex
	dir    string // where dead files wait; "" until start (keep deletes)
	files  []deadFile
	bytes  int64
	seq    uint64
	pinned map[uint64]int // open descriptors by inode
	stats  RecycleStats
}

// deadFile is one recycled table waiting in the pool.
type deadFile struct {
	path string
	ino  uint64
	size int64
}

// RecycleStats counts what the recycler did with dead tables.
type RecycleStats struct {
	Kept, Reused, Removed uint64 // files
	ReusedBytes           uint64 // the sizes of the files reused
	PoolBytes             int64  // bytes waiting now
}

// RecycleBytes bounds the dead tables a store keeps for reuse: a few
// merges' inputs at 100M keys (a flush of a full index writes ~20 MiB). A
// store holds less when less dies at once (a small window's whole store
// may be smaller); DiskUsage counts them.
const RecycleBytes = 256 << 20

// recycler returns the store's recycler: nil for a read-only store or
// with recycleBytes < 0.
func (o *Options) recycler() *recycler {
	max := o.recycleBytes
	if max == 0 {
		max = RecycleBytes
	}
	if o.ReadOnly || max < 0 {
		return nil
	}
	return &recycler{fs: o.FS, max: max, pinned: make(map[uint64]int)}
}

// start makes dir (already empty) the pool; until then, and for a nil r,
// keep keeps nothing.
func (r *recycler) start(dir string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dir, r.files, r.bytes = dir, nil, 0
}

// keep moves the table at path, which Pebble is deleting, into the pool
// and reports whether it did; false leaves the deletion to the caller. The
// oldest dead files leave the pool when it holds more than max bytes.
func (r *recycler) keep(path string) bool {
	if r == nil || !strings.HasSuffix(path, ".sst") {
		return false
	}
	fi, err := r.fs.Stat(path)
	if err != nil {
		return false
	}
	// A table with another link is still someone's: the run files the
	// store wrote are linked into Pebble's directory by its ingest and
	// deleted through this file system too.
	ino, links, ok := fileIdentity(fi)
	if !ok || links != 1 || fi.Size() > r.max {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dir == "" {
		return false
	}
	r.seq++
	dst := r.fs.PathJoin(r.dir, fmt.Sprintf("dead-%06d.sst", r.seq))
	if err := r.fs.Rename(path, dst); err != nil {
		return false
	}
	r.files = append(r.files, deadFile{path: dst, ino: ino, size: fi.Size()})
	r.bytes += fi.Size()
	r.stats.Kept++
	for r.bytes > r.max {
		old := r.files[0]
		r.files = r.files[1:]
		r.bytes -= old.size
		_ = r.fs.Remove(old.path)
		r.stats.Removed++
	}
	return true
}

// create opens path for writing a new table, over a dead file if one is
// free: reused then says the file must be cut to its length when written
// (runWritable does).
func (r *recycler) create(path string) (f vfs.File, reused bool, err error) {
	if d, ok := r.take(); ok {
		if f, err := r.fs.ReuseForWrite(d.path, path, vfs.WriteCategoryUnspecified); err == nil {
			return f, true, nil
		}
		_ = r.fs.Remove(d.path)
	}
	f, err = r.fs.Create(path, vfs.WriteCategoryUnspecified)
	return f, false, err
}

// take removes the newest dead file no descriptor holds from the pool.
func (r *recycler) take() (deadFile, bool) {
	if r == nil {
		return deadFile{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.files) - 1; i >= 0; i-- {
		d := r.files[i]
		if r.pinned[d.ino] > 0 {
			continue
		}
		r.files = append(r.files[:i], r.files[i+1:]...)
		r.bytes -= d.size
		r.stats.Reused++
		r.stats.ReusedBytes += uint64(d.size)
		return d, true
	}
	return deadFile{}, false
}

// pin records an open descriptor of the file fi describes; its inode is
// returned for unpin (0 when fi has none: nothing is pinned).
func (r *recycler) pin(fi vfs.FileInfo) uint64 {
	if r == nil {
		return 0
	}
	ino, _, ok := fileIdentity(fi)
	if !ok || ino == 0 {
		return 0
	}
	r.mu.Lock()
	r.pinned[ino]++
	r.mu.Unlock()
	return ino
}

// unpin releases a pin taken by pin.
func (r *recycler) unpin(ino uint64) {
	if r == nil || ino == 0 {
		return
	}
	r.mu.Lock()
	if r.pinned[ino]--; r.pinned[ino] <= 0 {
		delete(r.pinned, ino)
	}
	r.mu.Unlock()
}

// Stats returns the counters.
func (r *recycler) Stats() RecycleStats {
	if r == nil {
		return RecycleStats{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.PoolBytes = r.bytes
	return s
}
