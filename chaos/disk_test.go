package chaos

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
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job"
)

// diskFault fails state store file operations once armed: every write
// with ENOSPC, or every sync with EIO.
type diskFault struct {
	sync     bool
	armed    atomic.Bool
	injected atomic.Int64
}

func (d *diskFault) String() string {
	if d.sync {
		return "failed sync (EIO)"
	}
	return "disk full (ENOSPC on write)"
}

func (d *diskFault) MaybeError(op errorfs.Op) error {
	if !d.armed.Load() {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		if d.sync {
			d.injected.Add(1)
			return fmt.Errorf("injected: sync %s: %w", op.Path, syscall.EIO)
		}
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpCreate:
		if !d.sync {
			d.injected.Add(1)
			return fmt.Errorf("injected: write %s: %w", op.Path, syscall.ENOSPC)
		}
	}
	return nil
}

// restartDisk stands for the process exit after a fatal store error: the
// broken store stays open in this process (its Pebble goroutines are parked
// and it holds its lock, by design, since the command exits), so the next
// run gets a copy of the state directory as the disk holds it now.
func (r *run) restartDisk(round int) {
	r.t.Helper()
	dst := filepath.Join(r.dir, fmt.Sprintf("state-%d", round))
	if err := os.CopyFS(dst, os.DirFS(r.stateDir)); err != nil {
		r.t.Fatalf("copy the state directory: %v", err)
	}
	r.stateDir = dst
}

// TestDiskFaults breaks the state store of one seeded partition while the
// job runs: disk full, or syncs failing, in turns. The job must stop with
// a "statestore: fatal:" error naming the partition (never exit the
// process, never go on writing); a restart on the healthy disk must then
// finish the input with nothing lost or repeated.
func TestDiskFaults(t *testing.T) {
	r := begin(t)
	r.memtable = "64KiB" // small memtables flush, and so sync, often
	rounds := r.n(2, 4)
	w := r.workload(r.n(8_000, 16_000))
	prod := r.producer()
	ctx := r.ctx(20 * time.Minute)
	chunks := splitN(w.Records, rounds+1)
	for i := range rounds {
		fault := &diskFault{sync: i%2 == 1}
		p := r.intn(parts)
		j := r.startJob(func(o *job.Options) {
			testhook.Set(o, testhook.Hooks{StoreFS: func(part int) vfs.FS {
				if part != p {
					return nil
				}
				return errorfs.Wrap(vfs.Default, fault)
			}})
		})
		fed := make(chan error, 1)
		go func() { fed <- feedPaced(ctx, prod, chunks[i]) }()
		delay := r.between(300*time.Millisecond, 1500*time.Millisecond)
		time.Sleep(delay)
		fault.armed.Store(true)
		r.event("round %d/%d: %s on partition %d's store, %v after start", i+1, rounds, fault, p, delay.Round(time.Millisecond))
		var err error
		select {
		case err = <-j.done:
			j.done <- err
		case <-time.After(60 * time.Second):
			// Syncs may wait for the next flush; a clean stop closes the
			// store, which syncs.
			r.event("round %d: no failure within 60s; stopping the job", i+1)
			j.stop()
			err = <-j.done
			j.done <- err
		}
		if ferr := <-fed; ferr != nil {
			t.Fatal(ferr)
		}
		r.event("round %d: job stopped after %d injected errors (%d records restored from the output at its start): %v",
			i+1, fault.injected.Load(), j.job.Stats().Restored, err)
		want := fmt.Sprintf("partition %d: ", p)
		if err == nil || !strings.Contains(err.Error(), "statestore: fatal:") || !strings.Contains(err.Error(), want) {
			t.Fatalf("round %d: job ended with %v; want a %q error naming partition %d", i+1, err, "statestore: fatal:", p)
		}
		if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EIO) && !strings.Contains(err.Error(), "injected") {
			t.Errorf("round %d: the error does not carry the injected cause: %v", i+1, err)
		}
		r.restartDisk(i + 1)
	}
	if err := feedPaced(ctx, prod, chunks[rounds]); err != nil {
		t.Fatal(err)
	}
	j := r.startJob(nil)
	r.waitCaught(prod, j.done, 3*time.Minute)
	r.finish(j)
	r.event("restart on a healthy disk: %+v", j.job.Stats())
	r.verify(w, nil)
}
