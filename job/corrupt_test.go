package job_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/dedupstream/dedupstream/pipeline"
	"github.com/dedupstream/dedupstream/statestore"
	"github.com/twmb/franz-go/pkg/kgo"
)

// corruptStore flips bytes inside a data block of partition p's store
// tables, on disk: the second of its runs' tables (keys under 0x01), which
// only a lookup reads (Open reads a run's first block, to find orphans, and
// its last, which holds the run's filter), or the first of the tables of
// its metadata (keys under 0x00: the state and the run registry), which
// Open reads. It returns the tables it corrupted.
func corruptStore(t *testing.T, cfg *config.Config, p int, metadata bool) []string {
	t.Helper()
	dir := filepath.Join(job.StateDir(cfg.State.Dir, p), pipeline.StoreDir, "db")
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil {
		t.Fatal(err)
	}
	var done []string
	for _, path := range tables {
		first, blocks := dataBlocks(t, path)
		if first < 0 || (first == 0) != metadata {
			continue
		}
		off := blocks[0]
		if !metadata {
			if len(blocks) < 3 {
				t.Fatalf("run table %s has %d data blocks, want 3 or more", path, len(blocks))
			}
			off = blocks[1]
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 16)
		if _, err := f.ReadAt(b, off+8); err != nil {
			t.Fatal(err)
		}
		for i := range b {
			b[i] ^= 0x5a
		}
		if _, err := f.WriteAt(b, off+8); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		done = append(done, path)
	}
	if len(done) == 0 {
		t.Fatalf("no table of partition %d's store to corrupt in %s (metadata %v; tables %v)", p, dir, metadata, tables)
	}
	return done
}

// dataBlocks reads the table at path with Pebble's reader: the first byte
// of its first key (-1 for an empty table) and the offsets of its data
// blocks.
func dataBlocks(t *testing.T, path string) (first int, offs []int64) {
	t.Helper()
	f, err := vfs.Default.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sstable.NewReader(context.Background(), readable, sstable.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l, err := r.Layout()
	if err != nil {
		t.Fatal(err)
	}
	it, err := r.NewIter(sstable.NoTransforms, nil, nil, sstable.AssertNoBlobHandles)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	kv := it.First()
	if kv == nil || len(l.Data) == 0 {
		return -1, nil
	}
	for _, h := range l.Data {
		offs = append(offs, int64(h.Offset))
	}
	return int(kv.K.UserKey[0]), offs
}

// corruptDirs lists partition p's state directories moved aside.
func corruptDirs(t *testing.T, cfg *config.Config, p int) []string {
	t.Helper()
	dirs, err := filepath.Glob(job.StateDir(cfg.State.Dir, p) + ".corrupt-*")
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// garbleCheckpoint commits a checkpoint cut to its first two bytes to
// partition p's store: a record the store keeps intact (its checksums
// pass) that the job cannot decode. It returns the store's directory,
// relative to the stage's.
func garbleCheckpoint(t *testing.T, cfg *config.Config, p int) string {
	t.Helper()
	s, err := statestore.Open(filepath.Join(job.StateDir(cfg.State.Dir, p), pipeline.StoreDir), statestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := s.State()
	if len(st.Checkpoint) < 3 {
		t.Fatalf("partition %d's store holds a checkpoint of %d bytes", p, len(st.Checkpoint))
	}
	if _, err := s.Commit(s.NewBatch(), statestore.State{Generation: st.Generation, Checkpoint: st.Checkpoint[:2]}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return pipeline.StoreDir
}

// TestCorruptStoreRestored: a store corrupted on disk between two runs (a
// run's data block, which a lookup of a repeated key reads; a metadata
// table, which Open reads; a checkpoint record that does not decode) is
// moved aside and restored from the output under state.on_corruption's
// default, and the job goes on: the replays of the keys emitted before are
// all dropped and every key is in the output once (read back with kgo),
// the corruption is counted once, and the corrupt directory is kept beside
// the new one.
func TestCorruptStoreRestored(t *testing.T) {
	table := func(metadata bool) func(*testing.T, *config.Config, int) string {
		return func(t *testing.T, cfg *config.Config, p int) string {
			tables := corruptStore(t, cfg, p, metadata)
			t.Logf("corrupted %v", tables)
			return filepath.Join(pipeline.StoreDir, "db", filepath.Base(tables[0]))
		}
	}
	for _, c := range []struct {
		name    string
		corrupt func(*testing.T, *config.Config, int) string // returns a path the corrupt directory must keep
	}{
		{"run data block read by a lookup", table(false)},
		{"metadata table read at open", table(true)},
		{"checkpoint that does not decode", garbleCheckpoint},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, w, cfg, replays := corruptSetup(t, 83)
			kept := c.corrupt(t, cfg, 0)

			e.produce(replays) // replays of keys emitted before
			r := e.runToEnd(cfg)
			checkCollector(t, r.job, map[string]float64{"dedupstream_state_corruptions_total": 1})
			if st := r.job.Stats(); st.Restored == 0 {
				t.Errorf("the run restored %d output records, want > 0 (partition 0's new store)", st.Restored)
			}
			aside := corruptDirs(t, cfg, 0)
			if len(aside) != 1 {
				t.Fatalf("corrupt directories moved aside: %v, want 1", aside)
			}
			if _, err := os.Stat(filepath.Join(aside[0], kept)); err != nil {
				t.Errorf("%s is not kept in %s: %v", kept, aside[0], err)
			}
			rep := e.verifyOutput(w)
			t.Logf("in=%d out=%d escaped=%d lost=%d", rep.In, rep.Out, rep.Escaped, rep.Lost)

			// The new store is sound: a restart meets no corruption.
			e.produce(replays)
			r = e.runToEnd(cfg)
			checkCollector(t, r.job, map[string]float64{"dedupstream_state_corruptions_total": 0})
			e.verifyOutput(w)
		})
	}
}

// TestCorruptStoreFail: with state.on_corruption: fail a corrupt store
// stops the job, as before the policy, with an error naming the corrupt
// table and the setting, and the directory stays where it is.
func TestCorruptStoreFail(t *testing.T) {
	e, _, cfg, replays := corruptSetup(t, 84)
	tables := corruptStore(t, cfg, 0, false)
	e.produce(replays)
	cfg.State.OnCorruption = "fail"
	err := e.start(cfg).wait(t, 60*time.Second)
	if err == nil || !strings.Contains(err.Error(), "data corruption in "+tables[0]) || !strings.Contains(err.Error(), "state.on_corruption: fail") {
		t.Fatalf("job exited with %v, want the data corruption in %s under state.on_corruption: fail", err, tables[0])
	}
	t.Logf("job stopped: %v", err)
	if aside := corruptDirs(t, cfg, 0); len(aside) != 0 {
		t.Errorf("directories moved aside under fail: %v", aside)
	}
	if _, err := os.Stat(tables[0]); err != nil {
		t.Errorf("the corrupt table is gone: %v", err)
	}
}

// TestCorruptStoreLoopGuard: a partition whose store was found corrupt
// and restored three times within the hour (the directories moved aside
// say when) stops the job at the next corruption instead of restoring
// again: the disk is failing. The corrupt directory stays in place and
// the three are kept.
func TestCorruptStoreLoopGuard(t *testing.T) {
	e, _, cfg, replays := corruptSetup(t, 85)
	now := time.Now().Unix()
	for i := range 3 {
		d := fmt.Sprintf("%s.corrupt-%d", job.StateDir(cfg.State.Dir, 0), now-int64(60*(i+1)))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tables := corruptStore(t, cfg, 0, false)
	e.produce(replays)
	err := e.start(cfg).wait(t, 60*time.Second)
	if err == nil || !strings.Contains(err.Error(), "restored 3 times within 1h0m0s") || !strings.Contains(err.Error(), "data corruption in "+tables[0]) {
		t.Fatalf("job exited with %v, want a stop after 3 corruptions within the hour", err)
	}
	t.Logf("job stopped: %v", err)
	if aside := corruptDirs(t, cfg, 0); len(aside) != 3 {
		t.Errorf("directories moved aside: %v, want the 3 earlier ones", aside)
	}
	if _, err := os.Stat(tables[0]); err != nil {
		t.Errorf("the corrupt table is gone: %v", err)
	}
}

// garbageFS is the operating system's files, except that once armed every
// read of an sstable returns its bytes flipped: a disk that returns
// garbage for what it holds and for whatever is written to it next.
type garbageFS struct {
	vfs.FS
	armed atomic.Bool
}

func (g *garbageFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := g.FS.Open(name, opts...)
	if err != nil || !strings.HasSuffix(name, ".sst") {
		return f, err
	}
	return garbageFile{File: f, fs: g}, nil
}

type garbageFile struct {
	vfs.File
	fs *garbageFS
}

func (f garbageFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	if f.fs.armed.Load() {
		for i := range p[:n] {
			p[i] ^= 0x5a
		}
	}
	return n, err
}

// TestCorruptStoreGarbageDisk: partition 0's disk starts returning garbage
// while the job runs. The store a lookup (or Pebble in the background)
// finds corrupt is moved aside, and so is each new one, found corrupt as
// it opens, until the third in the hour: then the job stops with the error
// listing the three, instead of restoring forever.
func TestCorruptStoreGarbageDisk(t *testing.T) {
	e, _, cfg, replays := corruptSetup(t, 86)

	disk := &garbageFS{FS: vfs.Default}
	r := e.start(cfg, func(o *job.Options) {
		testhook.Set(o, testhook.Hooks{StoreFS: func(p int) vfs.FS {
			if p == 0 {
				return disk
			}
			return nil
		}})
	})
	// Every stage recovered: the store is open and the garbage starts
	// under a running cycle.
	for deadline := time.Now().Add(30 * time.Second); r.job.Stats().Ready < partitions; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stages ready: %d of %d", r.job.Stats().Ready, partitions)
		}
	}
	disk.armed.Store(true)
	e.produce(replays) // replays: lookups of partition 0's runs
	err := r.wait(t, 60*time.Second)
	if err == nil || !strings.Contains(err.Error(), "restored 3 times within 1h0m0s") {
		t.Fatalf("job exited with %v, want a stop after 3 corruptions within the hour", err)
	}
	t.Logf("job stopped: %v", err)
	if aside := corruptDirs(t, cfg, 0); len(aside) != 3 {
		t.Errorf("directories moved aside: %v, want 3", aside)
	}
	checkCollector(t, r.job, map[string]float64{"dedupstream_state_corruptions_total": 3})
}

// TestDiskFullIsNotCorruption: a state disk that fails writes with ENOSPC
// is not corrupt: the files are sound and the fault may pass, so the job
// stops with the store's fatal error as before, nothing is moved aside and
// no corruption is counted.
func TestDiskFullIsNotCorruption(t *testing.T) {
	e := newEnv(t)
	w := e.workload(87, 5_000, 0)
	cfg := e.config("0, 1, 2, 3")
	cfg.State.MemTableSize = 64 << 10 // flushes, so writes, come often
	var armed atomic.Bool
	full := errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpCreate:
			if armed.Load() {
				return fmt.Errorf("injected: write %s: %w", op.Path, syscall.ENOSPC)
			}
		}
		return nil
	})
	r := e.start(cfg, func(o *job.Options) {
		testhook.Set(o, testhook.Hooks{StoreFS: func(p int) vfs.FS {
			if p == 0 {
				return errorfs.Wrap(vfs.Default, full)
			}
			return nil
		}})
	})
	for deadline := time.Now().Add(30 * time.Second); r.job.Stats().Ready < partitions; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stages ready: %d of %d", r.job.Stats().Ready, partitions)
		}
	}
	armed.Store(true)
	e.produce(w.Records)
	err := r.wait(t, 60*time.Second)
	if err == nil || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "statestore: fatal:") {
		t.Fatalf("job exited with %v, want the store's fatal ENOSPC", err)
	}
	t.Logf("job stopped: %v", err)
	if aside := corruptDirs(t, cfg, 0); len(aside) != 0 {
		t.Errorf("directories moved aside for a full disk: %v", aside)
	}
	checkCollector(t, r.job, map[string]float64{"dedupstream_state_corruptions_total": 0})
}

// corruptSetup runs a job of 4 partitions over the first 3000 records of
// a 5000-key workload of seed, to their end, and returns the environment,
// the workload, the config and the workload's last 2000 records: replays
// of keys that run emitted, for after the store is corrupted.
func corruptSetup(t *testing.T, seed uint64) (*env, *jobtest.Workload, *config.Config, []*kgo.Record) {
	e := newEnv(t)
	w := e.workload(seed, 5_000, 2_000)
	firsts := w.Records[:len(w.Records)-2_000]
	cfg := e.config("0, 1, 2, 3")
	e.produce(firsts)
	e.runToEnd(cfg)
	return e, w, cfg, w.Records[len(firsts):]
}
