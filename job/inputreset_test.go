package job_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/twmb/franz-go/pkg/kerr"
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

// TestRepartitionTopicLost: in repartition mode the route step has routed
// records that the stages have not read yet (their raw offsets are
// committed by group <job.id>-route), and the repartition topic is deleted
// while the job is stopped; the next start creates it again, empty. Those
// records are not in the job's reach any more: the start must stop with
// an error naming the route group to move back (not go on from the new
// topic's start, as input.offset_reset earliest did, with 0 skipped
// counted). Following it, every key is in the output once (kgo).
func TestRepartitionTopicLost(t *testing.T) {
	e := newEnv(t)
	cfg := e.config("0, 1, 2, 3")
	cfg.Input.Partitioning = "repartition"
	record := func(id string, p int) *kgo.Record {
		// Keyed by message, not by business key: the route step spreads them.
		return &kgo.Record{Topic: e.raw, Partition: int32(p % partitions), Key: []byte("m-" + id), Value: fmt.Appendf(nil, `{"order_id":%q}`, id)}
	}
	var first, inFlight []*kgo.Record
	for i := range 200 {
		first = append(first, record(fmt.Sprintf("a-%d", i), i))
	}
	for i := range 60 {
		inFlight = append(inFlight, record(fmt.Sprintf("b-%d", i), i))
	}
	routeGroup := e.jobID + "-route"
	routed := func(r *running) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			ok, _, err := e.prod.Caught(e.ctx(10*time.Second), routeGroup, e.raw, partitions, 1)
			if err != nil && !kerr.IsRetriable(err) {
				t.Fatal(err)
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the route step did not commit the raw topic; stats %+v", r.job.Stats())
			}
		}
	}
	e.produce(first)
	r := e.start(cfg)
	routed(r)
	for r.job.Stats().Emitted < uint64(len(first)) {
		time.Sleep(50 * time.Millisecond)
	}
	e.stop(r)

	// The stages die before committing their next cycle; the route steps
	// go on and route the new records.
	e.produce(inFlight)
	r = e.start(cfg, func(o *job.Options) {
		testhook.Set(o, testhook.Hooks{Failpoint: func(name string) {
			if name == testhook.Produced {
				runtime.Goexit()
			}
		}})
	})
	routed(r)
	e.stop(r)
	deleteTopic(t, e, job.RepartitionTopic(cfg))

	r = e.start(cfg)
	err := r.wait(t, 60*time.Second)
	if err == nil || !strings.Contains(err.Error(), "the repartition topic no longer holds records") || !strings.Contains(err.Error(), fmt.Sprintf("group %q's offsets on the raw topics", routeGroup)) {
		t.Fatalf("want a stop naming the route group to move back, got %v", err)
	}
	t.Logf("stopped: %v", err)

	// The way out the error names: the route group from the start (the
	// deletion's time here), the stages from the new topic's start.
	ctx := e.ctx(30 * time.Second)
	zero := map[int32]int64{0: 0, 1: 0, 2: 0, 3: 0}
	if err := e.prod.ResetOffsets(ctx, routeGroup, e.raw, zero); err != nil {
		t.Fatal(err)
	}
	if err := e.prod.ResetOffsets(ctx, e.jobID, job.RepartitionTopic(cfg), zero); err != nil {
		t.Fatal(err)
	}
	r = e.start(cfg)
	routed(r)
	for deadline := time.Now().Add(60 * time.Second); r.job.Stats().In < uint64(len(first)+len(inFlight)); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the stages did not read the records routed again: %+v", r.job.Stats())
		}
	}
	time.Sleep(500 * time.Millisecond)
	e.stop(r)
	out, _ := e.readOutput()
	seen := map[string]int{}
	for _, rec := range out {
		seen[orderID(rec)]++
	}
	for _, rec := range append(first, inFlight...) {
		if id := orderID(rec); seen[id] != 1 {
			t.Errorf("key %s is %d times in the output, want once", id, seen[id])
		}
	}
	if len(out) != len(first)+len(inFlight) {
		t.Errorf("output holds %d records, want %d", len(out), len(first)+len(inFlight))
	}
}
