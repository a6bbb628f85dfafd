package job_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/pipeline"
)

// TestFirstSnapshot: a stage whose store is empty after recovery (a new
// job) does not write the Bloom snapshot in its first cycle, as it would
// spare a restart nothing; a stage that opened a store with commits (its
// snapshot consumed by Open) writes one in its first committed cycle.
func TestFirstSnapshot(t *testing.T) {
	e := newEnv(t)
	w := e.workload(7, 2_000, 300)
	half := len(w.Records) / 2
	cfg := e.config("0, 1, 2, 3")
	snapshots := func() (n int) {
		for p := range partitions {
			if _, err := os.Stat(filepath.Join(cfg.State.Dir, fmt.Sprintf("partition-%d", p), pipeline.SnapshotFile)); err == nil {
				n++
			} else if !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
		return n
	}

	e.produce(w.Records[:half])
	r1 := e.start(cfg)
	e.waitCommitted(r1, 1, 45*time.Second)
	// A stage writes its snapshot after the transaction whose offsets
	// waitCommitted saw: give the last cycles time to get there.
	time.Sleep(2 * time.Second)
	if n := snapshots(); n != 0 {
		t.Errorf("a new job wrote %d Bloom snapshots in its first cycles, want 0", n)
	}
	e.stop(r1) // Close writes them
	if n := snapshots(); n != partitions {
		t.Fatalf("%d Bloom snapshots after a clean stop, want %d", n, partitions)
	}

	r2 := e.start(cfg)
	e.produce(w.Records[half:])
	e.waitCommitted(r2, 1, 45*time.Second)
	n := snapshots()
	for deadline := time.Now().Add(20 * time.Second); n != partitions && time.Now().Before(deadline); n = snapshots() {
		time.Sleep(50 * time.Millisecond)
	}
	if n != partitions {
		t.Errorf("%d Bloom snapshots after the restarted job's first cycles, want %d (Open consumed the last ones)", n, partitions)
	}
	e.stop(r2)
	e.verify(w, sum(r1.job.Stats(), r2.job.Stats()))
}
