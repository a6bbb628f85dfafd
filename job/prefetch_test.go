package job_test

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
)

// TestAbortWithFetchInFlight: with fetch.ahead a stage's next fetch is
// sent before its batch is produced. Every fourth transactional produce
// fails with UNKNOWN_PRODUCER_ID, which aborts the cycle, and the test
// counts the faults at which the raw partition's latest fetch already
// started past the produced records (a fetch ahead). The prefetched batch
// must be dropped and read again from the committed offset: the output,
// read by kgo, must hold every key once and the accounting must add up.
func TestAbortWithFetchInFlight(t *testing.T) {
	kafkatest.SkipExternal(t, "drives kfake's request controls")
	e := newEnv(t)
	w := e.workload(13, 8_000, 2_000)

	offsetOf := map[string]int64{} // where each input record sits, by value: the output carries it
	var (
		mu        sync.Mutex
		lastFetch = map[int32]int64{} // offset of the latest raw fetch, per partition
		stop      atomic.Bool
		n         atomic.Int64
		faults    atomic.Int64 // faults with a fetch past the produced records sent
	)
	e.cluster.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		f := r.(*kmsg.FetchRequest)
		mu.Lock()
		defer mu.Unlock()
		for _, tp := range f.Topics {
			if tp.Topic == e.raw {
				for _, p := range tp.Partitions {
					lastFetch[p.Partition] = p.FetchOffset
				}
			}
		}
		return nil, nil, false
	})
	e.cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		pr := r.(*kmsg.ProduceRequest)
		if pr.TransactionID == nil || stop.Load() || len(pr.Topics) == 0 || pr.Topics[0].Topic != e.out || n.Add(1)%4 != 0 {
			return nil, nil, false
		}
		pp := pr.Topics[0].Partitions[0]
		// The input offset of the last record produced: a fetch of the
		// raw partition from beyond it is a fetch ahead.
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(pp.Records); err != nil {
			t.Errorf("decode produced batch: %v", err)
			return nil, nil, false
		}
		produced, buf := int64(-1), rb.Records
		for range rb.NumRecords {
			var rec kmsg.Record
			if err := rec.ReadFrom(buf); err != nil {
				t.Errorf("decode produced record: %v", err)
				return nil, nil, false
			}
			l, sz := binary.Varint(buf)
			buf = buf[int(l)+sz:]
			produced = max(produced, offsetOf[string(rec.Value)])
		}
		e.cluster.SleepControl(func() { time.Sleep(50 * time.Millisecond) })
		mu.Lock()
		ahead := lastFetch[pp.Partition] > produced
		mu.Unlock()
		if ahead {
			faults.Add(1)
		}
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range pr.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = tp.Topic
			for _, pp := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = pp.Partition
				rp.ErrorCode = kerr.UnknownProducerID.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})

	// A backlog in small record batches, so that a prefetch comes back
	// with records at once.
	for chunk := range slices.Chunk(w.Records, 100) {
		e.produce(chunk)
	}
	for _, rec := range w.Records {
		if o, ok := offsetOf[string(rec.Value)]; !ok || rec.Offset < o {
			offsetOf[string(rec.Value)] = rec.Offset
		}
	}
	cfg := e.config("0, 1, 2, 3")
	// Many small fetches and cycles: every produce has a fetch behind it.
	cfg.Fetch.PartitionMaxBytes, cfg.Fetch.RequestMaxBytes = 16<<10, 16<<10
	cfg.Commit.MaxRecords = 400
	r := e.start(cfg)
	e.waitCommitted(r, 1, 60*time.Second)
	stop.Store(true)
	e.stop(r)
	st := r.job.Stats()
	t.Logf("%d aborts with a raw fetch sent past the produced records; %d transactional produces, %d recoveries", faults.Load(), n.Load(), st.Recoveries)
	if faults.Load() < 3 || st.Recoveries <= partitions {
		t.Fatalf("no cycle aborted with a fetch in flight: faults %d, recoveries %d", faults.Load(), st.Recoveries)
	}
	e.verify(w, st)
}

// TestFetchWaitsForTheReadPhase: input produced in small requests a few
// milliseconds apart is read once or twice per cycle (fetch.min_bytes
// holds each fetch on the broker until the read phase ends), not once per
// produce request, so the job adds a few requests per commit to the
// brokers' load whatever the input's request rate. The raw fetches and the
// committing EndTxn requests are counted by the broker (kfake's request
// controls) while the input trickles in; the output is checked by kgo.
func TestFetchWaitsForTheReadPhase(t *testing.T) {
	kafkatest.SkipExternal(t, "counts requests with kfake's request controls")
	e := newEnv(t)
	w := e.workload(17, 600, 200)
	var counting atomic.Bool
	var fetches, commits atomic.Int64
	e.cluster.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		for _, tp := range r.(*kmsg.FetchRequest).Topics {
			if tp.Topic == e.raw && counting.Load() {
				fetches.Add(int64(len(tp.Partitions)))
			}
		}
		return nil, nil, false
	})
	e.cluster.ControlKey(int16(kmsg.EndTxn), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if r.(*kmsg.EndTxnRequest).Commit && counting.Load() {
			commits.Add(1)
		}
		return nil, nil, false
	})
	cfg := e.config("0, 1, 2, 3")
	cfg.Commit.Interval = 200 * time.Millisecond
	r := e.start(cfg)
	for r.job.Stats().Ready < partitions {
		time.Sleep(10 * time.Millisecond)
	}
	counting.Store(true)
	for chunk := range slices.Chunk(w.Records, 4) {
		e.produce(chunk)
		time.Sleep(5 * time.Millisecond)
	}
	counting.Store(false)
	e.waitCommitted(r, 1, 60*time.Second)
	e.stop(r)
	e.verify(w, r.job.Stats())
	f, c := fetches.Load(), commits.Load()
	t.Logf("%d raw fetches, %d commits while %d records trickled in %d requests", f, c, len(w.Records), (len(w.Records)+3)/4)
	// About 3.3 a commit when the fetches wait (a loaded machine's slow
	// cycles have seen 4.04), about 33 when each answers at once.
	if c == 0 || f > 8*c {
		t.Fatalf("%d raw fetches for %d commits: more than 8 a cycle, the fetches did not wait for the read phase", f, c)
	}
}
