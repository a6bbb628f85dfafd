package job_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/job/jobtest"
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
			first, replays := replayPairs(e, "c", keys, `,"status":"paid"`)
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
			// The clock stays where the records put it: the generation
			// marks of the first run count in its span, and read in
			// another they would move the clock to another time (24h to
			// 96h: four times now).
			pc, err := cfg2.Pipeline()
			if err != nil {
				t.Fatal(err)
			}
			limit := float64(time.Now().Add(pc.MaxFutureSkew+time.Minute).UnixMilli() / pc.SpanMs())
			for name, v := range gauges(t, r2.job) {
				if strings.HasPrefix(name, "dedupstream_window_generation{") && v > limit {
					t.Errorf("%s = %.0f after the restart, later than now's generation %.0f", name, v, limit)
				}
			}
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

// TestTimeBaseChange: dedup.time_base changed between two runs on the same
// state directories, with record timestamps hours behind the wall clock (a
// backlog, or producers stamping event time). The two clocks then put a
// store's keys in generations hours apart, so a store kept across the
// change answers on the wrong clock:
//
//   - record to processing: the keys sit in the generations of their old
//     timestamps; the wall clock expires them all at once, and replays
//     arriving seconds after the first emission pass (repeats);
//   - processing to record: the keys sit in the wall clock's generation;
//     records of the same keys stamped beyond the window after the first
//     ones are taken for repeats until record time reaches the wall clock
//     (lost).
//
// The output, read back with kgo, must hold each key once in the first
// case and twice (the msg 1 and the msg 2 record) in the second.
func TestTimeBaseChange(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name         string
		before, then string        // time_base of the first and the second run
		first, later time.Duration // age of the first records' and the later records' timestamps
		wantTwice    bool          // the later records are no repeats under the second run's clock
	}{
		{"record to processing", "record", "processing", 3 * time.Hour, 3 * time.Hour, false},
		{"processing to record", "processing", "record", 6 * time.Hour, 4 * time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			const keys = 1_000
			first, later := replayPairs(e, "t", keys, "")
			for i := range keys {
				first[i].Timestamp, later[i].Timestamp = now.Add(-tc.first), now.Add(-tc.later)
			}
			cfgFor := func(timeBase string) *config.Config {
				c := e.config("0, 1, 2, 3")
				c.Dedup.Window, c.Dedup.TimeBase = time.Hour, timeBase
				return c
			}
			e.produce(first)
			e.runToEnd(cfgFor(tc.before))
			e.produce(later)
			r2 := e.runToEnd(cfgFor(tc.then))
			if n := r2.job.Stats().StatesDropped; n != partitions {
				t.Errorf("the second start removed %d stores, want %d", n, partitions)
			}

			out, err := jobtest.ReadCommitted(e.ctx(60*time.Second), e.brokers, e.out, partitions, e.clientOpts...)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for _, r := range out {
				seen[string(r.Key)]++
			}
			want := 1
			if tc.wantTwice {
				want = 2
			}
			var wrong int
			for i := range keys {
				if seen[fmt.Sprintf("t-%d", i)] != want {
					wrong++
				}
			}
			if wrong != 0 || len(out) != want*keys {
				t.Errorf("%d of %d keys are not in the output %d times (%d output records, want %d)", wrong, keys, want, len(out), want*keys)
			}
		})
	}
}

// replayPairs returns, for keys keys "prefix-i" each on the partition
// murmur2 gives it, a first record and its replay: JSON with the key as
// order_id, then fields (more JSON members, each after a comma), then
// "msg" 1 or 2.
func replayPairs(e *env, prefix string, keys int, fields string) (first, replays []*kgo.Record) {
	for i := range keys {
		id := fmt.Sprintf("%s-%d", prefix, i)
		p := int32(partition.Murmur2Partition([]byte(id), partitions))
		first = append(first, &kgo.Record{Topic: e.raw, Partition: p, Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q%s,"msg":1}`, id, fields)})
		replays = append(replays, &kgo.Record{Topic: e.raw, Partition: p, Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q%s,"msg":2}`, id, fields)})
	}
	return first, replays
}
