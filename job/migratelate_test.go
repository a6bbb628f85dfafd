package job_test

import (
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/job"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMigrateLateRecords is TestRestoreWindowLateRecords' "poison record"
// case with the stores rebuilt by dedupstream migrate (run again at the
// same count, as it may be: it is idempotent): the late key was emitted at
// clock T+60m, moved there by a dead-lettered record that is not in the
// output, so its record lies before the first record stamped inside the
// window and its key belongs in the generation of T+60m; its replay 41m
// later on the stage clock must be dropped, by the migrated store, and by
// a store rebuilt from the output after the migration (a disk lost).
func TestMigrateLateRecords(t *testing.T) {
	for _, lost := range []bool{false, true} {
		name := "migrated store"
		if lost {
			name = "state removed after migrate"
		}
		t.Run(name, func(t *testing.T) {
			T := time.Now().Add(-3 * time.Hour).Truncate(time.Millisecond)
			ids := keysOn(0, 2)
			e := newEnv(t)
			rec := orderAt(e.raw, T)
			late, newer := ids[0], ids[1]
			cfg := e.config("0, 1, 2, 3")
			cfg.Dedup.Window = time.Hour
			e.produce([]*kgo.Record{{Topic: e.raw, Partition: 0, Key: []byte("p"), Value: []byte("not json"), Timestamp: T.Add(60 * time.Minute)},
				rec(late, 0, 1), rec(newer, 100*time.Minute, 1)})
			e.runToEnd(cfg)
			ms, err := job.Migrate(e.ctx(60*time.Second), cfg, job.Options{RequestTimeout: 5 * time.Second, RetryTimeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("migrate: %+v", ms)
			e.replayLate(cfg, rec, late, T, lost)
		})
	}
}
