package job_test

import (
	"context"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job"
)

// TestRestoreInterrupted: partition 0's state directory is lost, and the
// restore that rebuilds it from the output is interrupted part-way, at
// failpoint Restored after its 7th of 8 batches: killed (the store's file
// system crash-cloned there, keeping nothing unsynced, as a machine crash
// does; small fetches and a small memtable write part of the restore as
// runs before it), or stopped as SIGTERM does (the job's context cancelled
// there; it must exit cleanly). The next start must resume the restore
// from what was kept: replays of every key are then all dropped (read back
// with kgo).
func TestRestoreInterrupted(t *testing.T) {
	for _, kill := range []bool{true, false} {
		name := "sigterm"
		if kill {
			name = "kill"
		}
		t.Run(name, func(t *testing.T) {
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
			var stop atomic.Pointer[context.CancelFunc]
			hit := make(chan struct{})
			r2 := e.start(cfg, func(o *job.Options) {
				testhook.Set(o, testhook.Hooks{StoreFS: stores.storeFS, Failpoint: func(name string) {
					// Only partition 0 restores: the other stores are current.
					if name != testhook.Restored {
						return
					}
					if restored++; restored != 7 {
						return
					}
					if kill {
						afterCrash = stores.crash()
						close(hit)
						runtime.Goexit() // the stage stops here
					}
					close(hit)
					for stop.Load() == nil {
						time.Sleep(time.Millisecond)
					}
					(*stop.Load())()
				}})
			})
			stop.Store(&r2.cancel)
			select {
			case <-hit:
			case <-time.After(20 * time.Second):
				t.Fatalf("the restore passed the failpoint %d times, not 7", restored)
			}
			e.stop(r2)
			if kill {
				afterCrash()
			}

			e.produce(w.Records[len(firsts):])
			r3 := e.start(cfg, func(o *job.Options) { testhook.Set(o, testhook.Hooks{StoreFS: stores.storeFS}) })
			e.waitCommitted(r3, 1, 60*time.Second)
			e.stop(r3)
			t.Logf("restored before the interruption: %d; after: %d", r2.job.Stats().Restored, r3.job.Stats().Restored)
			rep := e.verifyOutput(w)
			t.Logf("in=%d out=%d escaped=%d lost=%d", rep.In, rep.Out, rep.Escaped, rep.Lost)
		})
	}
}
