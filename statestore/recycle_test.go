//go:build unix

package statestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

// TestRecycledTablesKeepEveryKey: on disk, a Reader that captured runs
// before their merge reads them to the end while later runs are written
// (none over its files), the tables merges delete are kept and later runs
// written over them (Kept, Reused > 0), and every key committed is found.
func TestRecycledTablesKeepEveryKey(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions(vfs.Default))
	defer mustClose(t, s)
	// fanout runs, flushed while the merger is held, captured by rd.
	release := make(chan struct{})
	s.mg.w.post(func() { <-release })
	first := fillIndexes(t, s, 1, 0, s.merge.fanout)
	if err := s.w.do(func() error { return nil }); err != nil { // the flushes are done
		t.Fatal(err)
	}
	var rd Reader
	if err := s.OpenReader(&rd); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	// Runs written now must not go over the files rd still reads.
	keys := append(first, fillIndexes(t, s, 1, s.merge.fanout, 2)...)
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	for i, h := range first {
		if _, _, found, err := rd.Lookup(h, []uint64{1}); err != nil || !found {
			t.Fatalf("the Reader of the merged runs, key %d: found %t, %v", i, found, err)
		}
	}
	if err := rd.Close(); err != nil {
		t.Fatal(err)
	}
	keys = append(keys, fillIndexes(t, s, 1, s.merge.fanout+2, 3*s.merge.fanout)...)
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	if st := s.rec.Stats(); st.Kept == 0 || st.Reused == 0 {
		t.Fatalf("recycler %+v: want tables kept and reused", st)
	}
	mustFind(t, s, 1, keys, "after recycling")
	// Every table Pebble lists is its own file, none the pool's.
	pool := filepath.Join(dir, ingestDir)
	pooled := map[uint64]bool{}
	ents, _ := os.ReadDir(pool)
	for _, e := range ents {
		if fi, err := os.Stat(filepath.Join(pool, e.Name())); err == nil {
			pooled[fi.Sys().(*syscall.Stat_t).Ino] = true
		}
	}
	tables, _ := filepath.Glob(filepath.Join(dir, "db", "*.sst"))
	for _, p := range tables {
		if fi, err := os.Stat(p); err == nil && pooled[fi.Sys().(*syscall.Stat_t).Ino] {
			t.Fatalf("%s is also in the recycler's pool", p)
		}
	}
}

// TestRecyclerSkipsPinnedFiles: a dead file whose inode a descriptor pins
// is not handed out until the pin is released; the pool keeps at most max
// bytes, dropping the oldest files.
func TestRecyclerSkipsPinnedFiles(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.Default
	r := (&Options{FS: fs, recycleBytes: 3000}).recycler()
	r.start(dir)
	write := func(name string, n int) (string, vfs.FileInfo) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
		fi, err := fs.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return p, fi
	}
	a, afi := write("000001.sst", 1000)
	b, _ := write("000002.sst", 1000)
	ino := r.pin(afi)
	if !r.keep(a) || !r.keep(b) {
		t.Fatal("keep refused a table")
	}
	if r.keep(filepath.Join(dir, "MANIFEST-000001")) {
		t.Fatal("keep took a file that is not a table")
	}
	// b (not pinned) first; then a is pinned and nothing is free.
	if d, ok := r.take(); !ok || d.ino == ino {
		t.Fatalf("take: %+v %t, want the unpinned file", d, ok)
	}
	if d, ok := r.take(); ok {
		t.Fatalf("take handed out %+v while its inode is pinned", d)
	}
	r.unpin(ino)
	if d, ok := r.take(); !ok || d.ino != ino {
		t.Fatalf("take after unpin: %+v %t", d, ok)
	}
	// The pool's bound: three 1000-byte files fit, a fourth drops the oldest.
	for i, name := range []string{"000003.sst", "000004.sst", "000005.sst", "000006.sst"} {
		p, _ := write(name, 1000)
		if !r.keep(p) {
			t.Fatalf("keep %d refused", i)
		}
	}
	if st := r.Stats(); st.PoolBytes != 3000 || st.Removed != 1 {
		t.Fatalf("pool %+v, want 3000 bytes after removing 1", st)
	}
}

// TestReusedTableIsCut: a table written over a longer dead file is cut to
// its own length, and reads back whole.
func TestReusedTableIsCut(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions(vfs.Default))
	defer mustClose(t, s)
	dead := filepath.Join(dir, ingestDir, "000900.sst")
	if err := os.WriteFile(dead, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if !s.rec.keep(dead) {
		t.Fatal("keep refused the table")
	}
	keys := fillIndexes(t, s, 1, 0, 1)
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	if st := s.rec.Stats(); st.Reused == 0 {
		t.Fatalf("recycler %+v: the flush did not reuse the dead file", st)
	}
	mustFind(t, s, 1, keys, "the run written over the dead file")
	tables, _ := filepath.Glob(filepath.Join(dir, "db", "*.sst"))
	for _, p := range tables {
		if fi, err := os.Stat(p); err == nil && fi.Size() >= 1<<20 {
			t.Fatalf("%s: %d bytes, not cut to its table", p, fi.Size())
		}
	}
}

// TestRefreshLetsMergedTablesGo: a Reader that lives across a merge and
// refreshes does not keep the merged runs' tables on disk: once it has
// refreshed, Pebble deletes them (here: the recycler keeps them), although
// the Reader still reads runs older than the merge.
func TestRefreshLetsMergedTablesGo(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, testOptions(vfs.Default))
	defer mustClose(t, s)
	old := fillIndexes(t, s, 2, 0, 1) // a run of generation 2 that is never merged
	release := make(chan struct{})
	s.mg.w.post(func() { <-release })
	fillIndexes(t, s, 1, 0, s.merge.fanout)
	if err := s.w.do(func() error { return nil }); err != nil { // the flushes are done
		t.Fatal(err)
	}
	var rd Reader
	if err := s.OpenReader(&rd); err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	close(release)
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	if err := rd.Refresh(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.rec.Stats().Kept < uint64(s.merge.fanout) {
		if time.Now().After(deadline) {
			t.Fatalf("recycler %+v: the %d merged runs' tables were not deleted after the Reader refreshed", s.rec.Stats(), s.merge.fanout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, h := range old {
		if _, _, found, err := rd.Lookup(h, []uint64{2}); err != nil || !found {
			t.Fatalf("key %d of the older run: found %t, %v", i, found, err)
		}
	}
}

// reuseFaultFS fails, once armed, the reuse of a dead table (reuse) or a
// write into a reused one after failAfter bytes went through (ENOSPC).
type reuseFaultFS struct {
	vfs.FS
	armed     atomic.Bool
	reuse     bool
	failAfter int64
	hits      atomic.Int64
}

type reuseFaultFile struct {
	vfs.File
	fs      *reuseFaultFS
	written int64
}

func (fs *reuseFaultFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if fs.armed.Load() && fs.reuse {
		fs.hits.Add(1)
		return nil, fmt.Errorf("injected: %w", syscall.ENOSPC)
	}
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	if err != nil || !fs.armed.Load() {
		return f, err
	}
	return &reuseFaultFile{File: f, fs: fs}, nil
}

func (f *reuseFaultFile) Write(p []byte) (int, error) {
	if f.written+int64(len(p)) > f.fs.failAfter {
		f.fs.hits.Add(1)
		n := max(0, int(f.fs.failAfter-f.written))
		n, _ = f.File.Write(p[:n])
		f.written += int64(n)
		return n, fmt.Errorf("injected: %w", syscall.ENOSPC)
	}
	n, err := f.File.Write(p)
	f.written += int64(n)
	return n, err
}

// copyDir copies the regular files of src into dst (a process's files as
// they are when it dies: nothing is lost but hard links).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if d.Name() == "LOCK" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRecycledWriteFault: the reuse of a dead table fails (the run file is
// created instead), or a write over a reused table fails with ENOSPC
// after 0 bytes, mid-table or near its end. A failed reuse costs nothing;
// a failed write turns the store fatal with an error naming the run, and
// the directory as the process leaves it reopens with every key committed.
func TestRecycledWriteFault(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reuse     bool
		failAfter int64
	}{{"reuse", true, 0}, {"write-0", false, 0}, {"write-100k", false, 100 << 10}, {"write-180k", false, 180 << 10}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fs := &reuseFaultFS{FS: vfs.Default, reuse: tc.reuse, failAfter: tc.failAfter}
			opts := testOptions(fs)
			s := mustOpen(t, dir, opts)
			keys := fillIndexes(t, s, 1, 0, s.merge.fanout+1) // a merge's inputs die
			if err := s.settle(); err != nil {
				t.Fatal(err)
			}
			// Pebble deletes the merge's inputs (into the pool) on a
			// goroutine of its own, after the merge: wait for one.
			for deadline := time.Now().Add(10 * time.Second); s.rec.Stats().PoolBytes == 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("recycler %+v: no dead table to reuse", s.rec.Stats())
				}
			}
			committed := s.State().Seq
			var doubt []partition.Hash
			fs.armed.Store(true)
			// Two indexes' worth of commits; the second handover waits for
			// the first one's flush, and fails with it.
			for c := uint64(100); c < 102; c++ {
				b := s.NewBatch()
				var hs []partition.Hash
				for j := range s.memKeys {
					hs = append(hs, keyOf(5000+c, j))
					b.Put(1, hs[len(hs)-1], 0)
				}
				if _, err := s.Commit(b, State{Generation: 1}); err != nil {
					doubt = hs // in the log, it may be back after a reopen
					break
				}
				keys = append(keys, hs...)
				committed++
			}
			_ = s.settle()
			if fs.hits.Load() == 0 {
				t.Fatal("no fault injected")
			}
			err := s.Err()
			if tc.reuse {
				if err != nil {
					t.Fatalf("a failed reuse: %v", err)
				}
				mustFind(t, s, 1, keys, "after a failed reuse")
				mustClose(t, s)
				return
			}
			if !errors.Is(err, ErrFatal) || !strings.Contains(err.Error(), "run ") {
				t.Fatalf("Err after a failed write over a reused table: %v, want fatal naming the run", err)
			}
			t.Logf("fatal: %v", err)
			_ = s.Close()
			// The process dies: its files as they are, in a new directory
			// (this process still holds the old one's lock).
			dir2 := t.TempDir()
			copyDir(t, dir, dir2)
			opts.FS = vfs.Default
			s = mustOpen(t, dir2, opts)
			defer mustClose(t, s)
			switch seq := s.State().Seq; {
			case seq == committed+1 && doubt != nil:
				keys = append(keys, doubt...)
			case seq != committed:
				t.Fatalf("reopened at seq %d, want %d (or the failed commit's)", seq, committed)
			}
			mustHoldExactly(t, s, 1, keys, "after the reopen")
		})
	}
}
