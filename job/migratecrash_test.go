package job_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/pipeline"
)

// crashableStores gives each partition's store a crashable in-memory file
// system (testhook.Hooks.StoreFS), so that a test can take what a crash
// would leave on disk at any moment (crash) while the process runs on.
type crashableStores struct {
	t   *testing.T
	dir string // the job's state.dir
	mu  sync.Mutex
	fs  map[int]*vfs.MemFS
}

func newCrashableStores(t *testing.T, dir string, parts int) *crashableStores {
	c := &crashableStores{t: t, dir: dir, fs: map[int]*vfs.MemFS{}}
	for p := range parts {
		fs := vfs.NewCrashableMem()
		// The state directory exists durably before the store is made in
		// it, as a real one does: only the store's own syncs decide what a
		// crash keeps.
		d := job.StateDir(dir, p)
		if err := fs.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for ; ; d = fs.PathDir(d) {
			f, err := fs.OpenDir(d)
			if err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(f.Sync(), f.Close()); err != nil {
				t.Fatal(err)
			}
			if d == fs.PathDir(d) {
				break
			}
		}
		c.fs[p] = fs
	}
	return c
}

func (c *crashableStores) storeFS(p int) vfs.FS {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fs, ok := c.fs[p]; ok {
		return fs
	}
	return nil
}

// crash replaces every store's file system by what a crash now would leave
// of it: nothing that was not synced, as after a machine crash, which
// covers a kill -9 too (it loses what the process held in memory, and
// perhaps less of what it wrote). It returns a function that also removes
// the Bloom snapshots written since (on the real disk, by the Close calls
// the killed process would not have made).
func (c *crashableStores) crash() (after func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, fs := range c.fs {
		c.fs[p] = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	}
	return func() {
		for p := range c.fs {
			if err := os.Remove(filepath.Join(job.StateDir(c.dir, p), pipeline.SnapshotFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
				c.t.Fatal(err)
			}
		}
	}
}

// TestMigrateKilledBeforeStoresClosed: dedupstream migrate (4 -> 6
// partitions) killed right after it recorded the new count, before it
// closed the stores it rebuilt (failpoint Migrated, the stores' file systems
// crash-cloned there). A start under 6 partitions is then accepted (the
// count is recorded), so every key that moved partitions must already be
// durable in its new partition's store: replays of the old keys on their
// new partitions must all be dropped (read back with kgo).
func TestMigrateKilledBeforeStoresClosed(t *testing.T) {
	e := newEnv(t)
	_, before, after := growWorkload(e, 3_000)
	e.produce(before)
	e.runToEnd(e.config("0, 1, 2, 3"))

	p6 := growAndReplay(t, e, after)
	cfg6 := e.config("0, 1, 2, 3, 4, 5")
	stores := newCrashableStores(t, cfg6.State.Dir, 6)
	var afterCrash func()
	opts := job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second}
	testhook.Set(&opts, testhook.Hooks{StoreFS: stores.storeFS, Failpoint: func(name string) {
		if name == testhook.Migrated && afterCrash == nil {
			afterCrash = stores.crash()
		}
	}})
	ms, err := job.Migrate(e.ctx(120*time.Second), cfg6, opts)
	if err != nil {
		t.Fatal(err)
	}
	if afterCrash == nil {
		t.Fatal("the failpoint never fired")
	}
	afterCrash()
	t.Logf("migrate: %+v", ms)

	r2 := e.start(cfg6, func(o *job.Options) { testhook.Set(o, testhook.Hooks{StoreFS: stores.storeFS}) })
	waitReplays(t, e, p6)
	e.stop(r2)
	if repeats, total := countRepeats(t, e, 6); repeats != 0 || total != len(before) {
		t.Errorf("migrate killed after recording the count: %d repeats in %d output records, want 0 in %d", repeats, total, len(before))
	}
}

// errKilled stops job.Migrate at a failpoint, as a kill would.
var errKilled = errors.New("killed at the failpoint")

// migrateKilledAt runs job.Migrate on cfg with the stores of stores,
// crash-clones them at the first pass through failpoint name and stops
// Migrate there (a panic it unwinds through, its deferred closes writing
// only to the file systems the crash left behind).
func migrateKilledAt(t *testing.T, e *env, cfg *config.Config, stores *crashableStores, name string) {
	t.Helper()
	var afterCrash func()
	opts := job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second}
	testhook.Set(&opts, testhook.Hooks{StoreFS: stores.storeFS, Failpoint: func(at string) {
		if at == name && afterCrash == nil {
			afterCrash = stores.crash()
			panic(errKilled)
		}
	}})
	func() {
		defer func() {
			if v := recover(); v != nil && v != errKilled {
				panic(v)
			}
		}()
		if _, err := job.Migrate(e.ctx(120*time.Second), cfg, opts); err != nil {
			t.Fatal(err)
		}
	}()
	if afterCrash == nil {
		t.Fatalf("migrate never passed failpoint %s", name)
	}
	afterCrash()
}

// TestMigrateInterrupted: two static instances, A owning partitions 0-2
// and B 3-5 after the topics grew from 4 to 6. B's dedupstream migrate is
// killed while it reads the output (failpoint MigrateRead), A's completes
// and records 6 partitions. B must then refuse to start (exit 2, naming
// migrate) instead of taking its half-built stores for new ones, which
// restore only their own output partition: replays of the keys that moved
// there would pass. After B's migrate is run again, every replay is dropped
// (read back with kgo).
func TestMigrateInterrupted(t *testing.T) {
	e := newEnv(t)
	_, before, after := growWorkload(e, 3_000)
	e.produce(before)
	e.runToEnd(e.config("0, 1, 2, 3"))

	p6 := growAndReplay(t, e, after)
	cfgA, cfgB := e.config("0, 1, 2"), e.config("3, 4, 5")
	killed := newCrashableStores(t, cfgB.State.Dir, 6)
	migrateKilledAt(t, e, cfgB, killed, testhook.MigrateRead)
	if _, err := job.Migrate(e.ctx(120*time.Second), cfgA, job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}

	rb := e.start(cfgB, func(o *job.Options) { testhook.Set(o, testhook.Hooks{StoreFS: killed.storeFS}) })
	deadline := time.Now().Add(30 * time.Second)
	for rb.job.Stats().Recovered < 3 && len(rb.done) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(rb.done) == 0 {
		// Accepted: show what that costs.
		ra := e.start(cfgA)
		waitReplays(t, e, p6)
		e.stop(ra)
		e.stop(rb)
		repeats, total := countRepeats(t, e, 6)
		t.Fatalf("B started on the state its killed migrate left: %d repeats in %d output records", repeats, total)
	}
	if err := rb.wait(t, time.Second); !errors.Is(err, job.ErrTopics) || !strings.Contains(err.Error(), "dedupstream migrate") {
		t.Fatalf("B after its killed migrate: want ErrTopics naming dedupstream migrate, got %v", err)
	} else {
		t.Logf("B refused: %v", err)
	}

	stores := newCrashableStores(t, cfgB.State.Dir, 6) // B's disks as migrate leaves them
	opts := job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second}
	testhook.Set(&opts, testhook.Hooks{StoreFS: stores.storeFS})
	if _, err := job.Migrate(e.ctx(120*time.Second), cfgB, opts); err != nil {
		t.Fatal(err)
	}
	ra := e.start(cfgA)
	rb = e.start(cfgB, func(o *job.Options) { testhook.Set(o, testhook.Hooks{StoreFS: stores.storeFS}) })
	waitReplays(t, e, p6)
	e.stop(ra)
	e.stop(rb)
	if repeats, total := countRepeats(t, e, 6); repeats != 0 || total != len(before) {
		t.Errorf("after B's migrate ran again: %d repeats in %d output records, want 0 in %d", repeats, total, len(before))
	}
}
