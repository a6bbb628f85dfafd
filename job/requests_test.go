package job_test

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
)

// TestRequestSizesReachTheBroker checks at the broker that fetch.* and
// produce.batch_max_bytes of the config are what the job's fetch and
// produce requests carry.
func TestRequestSizesReachTheBroker(t *testing.T) {
	kafkatest.SkipExternal(t, "reads the requests at the embedded broker")
	e := newEnv(t)
	const part, req, batch = 64 << 10, 128 << 10, 4 << 10
	var (
		mu                  sync.Mutex
		fetches, badFetches int
		produces, largest   int
		bad                 []int
	)
	e.cluster.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		f := r.(*kmsg.FetchRequest)
		mu.Lock()
		defer mu.Unlock()
		for _, tp := range f.Topics {
			for _, p := range tp.Partitions {
				if tp.Topic != e.raw && tp.Topic != e.out {
					continue
				}
				fetches++
				if p.PartitionMaxBytes != part || f.MaxBytes != req {
					badFetches++
				}
			}
		}
		return nil, nil, false
	})
	e.cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		p := r.(*kmsg.ProduceRequest)
		if p.TransactionID == nil {
			return nil, nil, false // the test's own input producer
		}
		mu.Lock()
		defer mu.Unlock()
		for _, tp := range p.Topics {
			for _, pp := range tp.Partitions {
				produces++
				largest = max(largest, len(pp.Records))
				if len(pp.Records) > batch {
					bad = append(bad, len(pp.Records))
				}
			}
		}
		return nil, nil, false
	})
	w := e.workload(3, 6_000, 0)
	cfg := e.config("0, 1, 2, 3")
	cfg.Fetch.PartitionMaxBytes, cfg.Fetch.RequestMaxBytes, cfg.Produce.BatchMaxBytes = part, req, batch
	r := e.start(cfg)
	e.produce(w.Records)
	e.waitCommitted(r, 1, 45*time.Second)
	e.stop(r)
	e.verify(w, r.job.Stats())

	mu.Lock()
	defer mu.Unlock()
	if fetches == 0 || badFetches > 0 {
		t.Errorf("%d of %d fetches of the job's topics did not carry partition/request limits %d/%d", badFetches, fetches, part, req)
	}
	// Every cycle holds up to 2000 records of ~100 bytes: far more than one
	// 4 KiB batch, so the limit must show as batches just below it.
	if produces == 0 || len(bad) > 0 || largest < batch/2 {
		t.Errorf("%d transactional produce batches, largest %d bytes, over %d bytes: %v", produces, largest, batch, bad)
	}
}
