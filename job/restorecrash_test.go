package job_test

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job"
)

// TestRestoreKilledMidway: partition 0's state directory is lost, and the
// restore that rebuilds it from the output is killed part-way (failpoint
// Restored at its 7th of 8 batches; the store's file system crash-cloned there,
// keeping nothing unsynced, as a machine crash does). Small fetches and a
// small memtable make the restore many batches long and write part of it
// as runs before the crash. The next start must resume the restore from
// what the crash kept: replays of every key are then all dropped (read back
// with kgo).
func TestRestoreKilledMidway(t *testing.T) {
	e := newEnv(t)
	w := e.workload(61, 12_000, 3_000)
	firsts := w.Records[:len(w.Records)-3_000]
	e.produce(firsts)
	cfg := e.config("0, 1, 2, 3")
	cfg.State.MemTableSize = 64 << 10
	cfg.Fetch.PartitionMaxBytes = 32 << 10
	cfg.Produce.BatchMaxBytes = 16 << 10 // output batches of ~100 records
	r1 := e.start(cfg)
	e.waitCommitted(r1, 1, 60*time.Second)
	e.stop(r1)
	if err := os.RemoveAll(job.StateDir(cfg.State.Dir, 0)); err != nil {
		t.Fatal(err)
	}

	stores := newCrashableStores(t, cfg.State.Dir, 1)
	var afterCrash func()
	var restored int
	died := make(chan struct{})
	r2 := e.start(cfg, func(o *job.Options) {
		testhook.Set(o, testhook.Hooks{StoreFS: stores.storeFS, Failpoint: func(name string) {
			// Only partition 0 restores: the other stores are current.
			if name == testhook.Restored && afterCrash == nil {
				if restored++; restored == 7 {
					afterCrash = stores.crash()
					close(died)
					runtime.Goexit() // the stage stops here
				}
			}
		}})
	})
	select {
	case <-died:
	case <-time.After(20 * time.Second):
		t.Fatalf("the restore passed the failpoint %d times, not 7", restored)
	}
	e.stop(r2)
	afterCrash()

	e.produce(w.Records[len(firsts):])
	r3 := e.start(cfg, func(o *job.Options) { testhook.Set(o, testhook.Hooks{StoreFS: stores.storeFS}) })
	e.waitCommitted(r3, 1, 60*time.Second)
	e.stop(r3)
	t.Logf("restored before the crash: %d; after: %d", r2.job.Stats().Restored, r3.job.Stats().Restored)
	rep, err := w.Verify(e.ctx(60*time.Second), e.brokers, e.out, e.dlq, partitions, e.clientOpts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Error(p)
	}
	t.Logf("in=%d out=%d escaped=%d lost=%d", rep.In, rep.Out, rep.Escaped, rep.Lost)
}
