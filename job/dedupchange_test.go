package job_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDedupConfigChange: the job runs, stops, and starts again on the same
// state directories with a dedup setting changed that decides what a store
// holds (the generation span, the business key, the mode). Replays of every
// key then arrive; each is a repeat under the new setting too, so the
// output read back with kgo must hold no key twice. A store kept as it was
// would answer in the old setting's terms: generations of another span
// expire at once or never, and keys of another identity never match.
func TestDedupConfigChange(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(*config.Config)
		dropped uint64 // stores removed at the second start
	}{
		{"window 24h to 1h", func(c *config.Config) { c.Dedup.Window = time.Hour }, partitions},
		{"window 24h to 96h", func(c *config.Config) { c.Dedup.Window = 96 * time.Hour }, partitions},
		{"generations 4 to 8", func(c *config.Config) { c.Dedup.Generations = 8 }, partitions},
		{"key order_id to order_id + status", func(c *config.Config) { c.Dedup.Key = []string{"json:order_id", "json:status"} }, partitions},
		// Records emitted under the old key lack the new one: the restore
		// skips them (no later record can repeat a key they do not have)
		// instead of failing every start until they leave the output.
		{"key order_id to payment_id, absent from earlier records", func(c *config.Config) { c.Dedup.Key = []string{"json:payment_id"} }, partitions},
		// Settings that do not decide what a store holds keep it.
		{"window and generations doubled (same span)", func(c *config.Config) { c.Dedup.Window, c.Dedup.Generations = 48*time.Hour, 8 }, 0},
		{"expected keys", func(c *config.Config) { c.Dedup.ExpectedKeys = 80_000 }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			const keys = 2_000
			var first, replays []*kgo.Record
			for i := range keys {
				id := fmt.Sprintf("c-%d", i)
				p := int32(partition.Murmur2Partition([]byte(id), partitions))
				first = append(first, &kgo.Record{Topic: e.raw, Partition: p, Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q,"status":"paid","msg":1}`, id)})
				replays = append(replays, &kgo.Record{Topic: e.raw, Partition: p, Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q,"status":"paid","msg":2}`, id)})
			}
			cfg := e.config("0, 1, 2, 3")
			e.produce(first)
			r1 := e.start(cfg)
			e.waitCommitted(r1, 1, 60*time.Second)
			e.stop(r1)

			cfg2 := e.config("0, 1, 2, 3")
			tc.change(cfg2)
			e.produce(replays)
			r2 := e.start(cfg2)
			e.waitCommitted(r2, 1, 60*time.Second)
			e.stop(r2)
			if n := r2.job.Stats().StatesDropped; n != tc.dropped {
				t.Errorf("the second start removed %d stores, want %d", n, tc.dropped)
			}
			if repeats, total := countRepeats(t, e, partitions); repeats != 0 || total != keys {
				t.Errorf("%d repeats in %d output records, want 0 in %d", repeats, total, keys)
			}
		})
	}
}
