package job_test

import (
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/job"
)

// TestPartitionsTopicDeleted: after the topics grew from 4 to 6 and
// migrate ran, someone deletes the partitions topic, between runs or
// while the job runs. It held the ends of the output partitions at the
// migration ("moved"), which a store that starts empty within the window
// needs to learn the keys that moved to its partition. An instance that
// then starts with an empty disk must still drop every replay of an old
// key on its new partition (read back with kgo).
func TestPartitionsTopicDeleted(t *testing.T) {
	for _, tc := range []struct {
		name          string
		live, keptRun bool // deleted under a running job; a run on the kept disks first
	}{
		{"between runs, the empty disk first", false, false},
		{"between runs", false, true},
		{"while running", true, true},
	} {
		live := tc.live
		t.Run(tc.name, func(t *testing.T) {
			e, before, after, cfg6 := migratedTo6(t)
			if live {
				r := e.start(cfg6)
				time.Sleep(time.Second)
				deleteTopic(t, e, job.PartitionsTopic(e.jobID))
				time.Sleep(time.Second)
				e.stop(r)
			} else {
				e.runToEnd(cfg6)
				deleteTopic(t, e, job.PartitionsTopic(e.jobID))
			}
			if tc.keptRun {
				e.runToEnd(cfg6) // it records the layout again
			}

			replayOnEmptyDisk(t, e, cfg6, before, after, "an empty disk after the partitions topic was deleted")
		})
	}
}
