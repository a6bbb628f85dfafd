package statestore

import (
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// gateFS holds the creation of run files (in the ingest directory) until
// open is called: the flush of an index stays pending.
type gateFS struct {
	vfs.FS
	once    sync.Once
	gate    chan struct{}
	waiting chan struct{} // closed when a creation first waits
	wonce   sync.Once
}

func newGateFS(fs vfs.FS) *gateFS {
	return &gateFS{FS: fs, gate: make(chan struct{}), waiting: make(chan struct{})}
}

func (g *gateFS) open() { g.once.Do(func() { close(g.gate) }) }

func (g *gateFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.Contains(name, "/"+ingestDir+"/") {
		g.wonce.Do(func() { close(g.waiting) })
		<-g.gate
	}
	return g.FS.Create(name, category)
}

// tearLastLog cuts cut bytes off the newest commit log in fs: the torn
// tail a crash leaves of a record being written.
func tearLastLog(t *testing.T, fs vfs.FS, dir string, cut int) {
	t.Helper()
	nums, err := listLogs(fs, dir)
	if err != nil || len(nums) == 0 {
		t.Fatalf("no commit log to tear: %v", err)
	}
	p := fs.PathJoin(dir, logName(nums[len(nums)-1]))
	f, err := fs.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	_ = f.Close()
	if err != nil || len(data) <= cut {
		t.Fatalf("log %s: %d bytes, %v", p, len(data), err)
	}
	w, err := fs.Create(p, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data[:len(data)-cut]); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
}

// TestTornLogThenNewCommits: a crash tears the last record of the commit
// log; the store reopens at the commit before it and takes new commits,
// which a Flush makes durable, while the flush of the replayed keys is
// still pending (held here). A machine crash then must not lose the
// flushed commits: the torn log, not yet removed, must not hide the logs
// written after it.
func TestTornLogThenNewCommits(t *testing.T) {
	base := newCloneableMem()
	opts := testOptions(base)
	opts.VersionMode = true
	h := newHistory()
	commit := func(s *Store, i uint64) {
		t.Helper()
		if uint64(len(h.commitGen)) <= i {
			h.commitGen = append(h.commitGen, 1)
			h.commitKeys = append(h.commitKeys, 5)
			h.floorAfter = append(h.floorAfter, nil)
		}
		b := s.NewBatch()
		for j := 0; j < h.commitKeys[i]; j++ {
			b.Put(h.commitGen[i], keyOf(i, uint64(j)), i)
		}
		if st, err := s.Commit(b, State{Generation: h.commitGen[i], Checkpoint: checkpointOf(i)}); err != nil || st.Seq != i {
			t.Fatalf("commit %d: seq %d, %v", i, st.Seq, err)
		}
	}
	s := mustOpen(t, "db", opts)
	for i := uint64(1); i <= 10; i++ {
		commit(s, i)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	commit(s, 11)
	// kill -9 while commit 11's record is written: its tail is lost.
	crashed := base.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))})
	tearLastLog(t, crashed, "db", 3)
	mustClose(t, s)

	// The restart: the replayed commits' flush is held.
	base2 := &cloneableMem{MemFS: crashed}
	gate := newGateFS(base2)
	opts.FS = gate
	opened := make(chan error, 1)
	var s2 *Store
	go func() {
		var err error
		s2, err = Open("db", opts)
		opened <- err
	}()
	<-gate.waiting // the replayed keys' flush
	var err error
	select {
	case err = <-opened: // Open did not wait for it: commits come while it is held
	case <-time.After(time.Second):
		gate.open() // Open waits for it
		err = <-opened
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		gate.open()
		mustClose(t, s2)
	}()
	if st := s2.State(); st.Seq != 10 {
		t.Fatalf("reopened at seq %d, want 10 (commit 11 torn)", st.Seq)
	}
	for i := uint64(11); i <= 14; i++ {
		commit(s2, i)
	}
	if err := s2.Flush(); err != nil {
		t.Fatal(err)
	}
	// A machine crash: only what is synced survives.
	clone := base2.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(1, 3))})
	opts.FS = nil
	checkRecovered(t, h, crashPoint{fs: clone, committed: 14, durable: 14}, opts)
}

// syncGateFS holds the Sync of the commit log named held (set by the test)
// until release is called.
type syncGateFS struct {
	vfs.FS
	held    atomic.Pointer[string]
	gate    chan struct{}
	waiting chan struct{} // closed when the held log's Sync first waits
	once    sync.Once
}

type syncGateFile struct {
	vfs.File
	g    *syncGateFS
	name string
}

func (g *syncGateFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.Create(name, category)
	if err != nil {
		return nil, err
	}
	return &syncGateFile{File: f, g: g, name: name}, nil
}

func (f *syncGateFile) Sync() error {
	if h := f.g.held.Load(); h != nil && strings.HasSuffix(f.name, "/"+*h) {
		f.g.once.Do(func() { close(f.g.waiting) })
		<-f.g.gate
	}
	return f.File.Sync()
}

// TestFlushWaitsForHandedOverLog: a handover leaves its index's commit log
// to the worker to sync; a Flush right after must not return before that
// log is durable, or a machine crash loses commits it reported durable.
func TestFlushWaitsForHandedOverLog(t *testing.T) {
	base := newCloneableMem()
	gfs := &syncGateFS{FS: base, gate: make(chan struct{}), waiting: make(chan struct{})}
	opts := testOptions(gfs)
	opts.VersionMode = true
	opts.MemTableSize = 32 << 10 // a handover after a few commits
	h := newHistory()
	s := mustOpen(t, "db", opts)
	released := false
	defer func() {
		if !released {
			close(gfs.gate)
		}
		mustClose(t, s)
	}()
	first := logName(s.logNum)
	gfs.held.Store(&first)
	var i uint64
	for logName(s.logNum) == first {
		i++
		h.commitGen = append(h.commitGen, 1)
		h.commitKeys = append(h.commitKeys, 20)
		h.floorAfter = append(h.floorAfter, nil)
		b := s.NewBatch()
		for j := 0; j < 20; j++ {
			b.Put(1, keyOf(i, uint64(j)), i)
		}
		if _, err := s.Commit(b, State{Generation: 1, Checkpoint: checkpointOf(i)}); err != nil {
			t.Fatal(err)
		}
		if i > 10000 {
			t.Fatal("no handover after 10000 commits")
		}
	}
	<-gfs.waiting // the worker syncs the handed-over log, held here
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush() }()
	select {
	case err := <-flushed:
		// Returned with commit 1's log not synced: what a crash keeps.
		clone := base.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(1, 4))})
		t.Errorf("Flush returned (%v) while the handed-over log was not synced", err)
		o := opts
		o.FS = nil
		checkRecovered(t, h, crashPoint{fs: clone, committed: i, durable: i}, o)
		return
	case <-time.After(200 * time.Millisecond):
	}
	close(gfs.gate)
	released = true
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	clone := base.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(1, 5))})
	opts.FS = nil
	checkRecovered(t, h, crashPoint{fs: clone, committed: i, durable: i}, opts)
}
