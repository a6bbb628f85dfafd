//go:build unix

package statestore

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
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
