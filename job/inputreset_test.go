package job_test

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// orderID is a record's business key in the jobtest workload, "" for
// poison records.
func orderID(r *kgo.Record) string {
	var v struct {
		OrderID string `json:"order_id"`
	}
	if json.Unmarshal(r.Value, &v) != nil {
		return ""
	}
	return v.OrderID
}

// TestInputRecordsDeleted: while the job was stopped, records of the raw
// topic it had not read were deleted (retention shorter than the stop,
// kafka-delete-records), so its committed offsets lie before the log
// start. With input.offset_reset earliest (the default) it goes on from
// the log start: every key with a record left in the log is in the output
// once, none twice (read back with kgo), and the offsets skipped are
// counted per partition. With fail it stops, and the error says how to go
// on.
func TestInputRecordsDeleted(t *testing.T) {
	for _, reset := range []string{"earliest", "fail"} {
		t.Run(reset, func(t *testing.T) {
			e := newEnv(t)
			w := e.workload(47, 3_000, 1_000)
			half := len(w.Records) / 2
			e.produce(w.Records[:half])
			cfg := e.config("0, 1, 2, 3")
			e.runToEnd(cfg)
			committed := maps.Clone(e.prod.End[e.raw])

			e.produce(w.Records[half:])
			cut, want := map[int32]int64{}, map[string]float64{}
			for p, end := range e.prod.End[e.raw] {
				cut[p] = committed[p] + (end-committed[p])/2
				want[`dedupstream_input_offsets_skipped_total{topic="`+e.raw+`"}`] += float64(cut[p] - committed[p])
			}
			if err := e.prod.DeleteRecords(e.ctx(30*time.Second), e.raw, cut); err != nil {
				t.Fatal(err)
			}

			cfg.Input.OffsetReset = reset
			r := e.start(cfg)
			if reset == "fail" {
				err := r.wait(t, 60*time.Second)
				var oor *fetch.OutOfRangeError
				if !errors.As(err, &oor) || !strings.Contains(err.Error(), "input.offset_reset is fail") {
					t.Fatalf("job stopped with %v, want an out-of-range error naming input.offset_reset", err)
				}
				return
			}
			e.waitCommitted(r, 1, 60*time.Second)
			checkCollector(t, r.job, want)
			e.stop(r)

			out, _ := e.readOutput()
			seen := map[string]int{}
			for _, rec := range out {
				seen[orderID(rec)]++
			}
			for k, n := range seen {
				if n > 1 {
					t.Errorf("key %s emitted %d times", k, n)
				}
			}
			left, err := jobtest.ReadCommitted(e.ctx(30*time.Second), e.brokers, e.raw, partitions)
			if err != nil {
				t.Fatal(err)
			}
			missing := 0
			for _, rec := range left {
				if k := orderID(rec); k != "" && seen[k] == 0 {
					missing++
				}
			}
			if missing > 0 {
				t.Errorf("%d records left in the raw topic have keys the output lacks", missing)
			}
			t.Logf("%d raw records left after the cut, %d keys out; skipped %v", len(left), len(seen), want)
		})
	}
}
