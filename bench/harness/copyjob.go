package harness

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/sink"
	"github.com/segmentio/kafka-go"
)

// CopyJob is the baseline a dedup job must be compared with: the same
// client path as the job (fetch.Fetcher in, sink.Producer transactions out,
// input offsets committed in the transaction, the same commit interval and
// record cap), and no dedup at all. Partition p of every raw topic is copied
// to partition p of Output, taking turns between topics as the job does.
type CopyJob struct {
	Client     *kafka.Client
	Topics     []string
	Output     string
	Group      string // consumer group; transactional ids are "<Group>-<p>"
	Partitions []int
	Interval   time.Duration
	MaxRecords int
	// FetchMaxBytes and BatchMaxBytes are the per-partition fetch limit
	// and the produce batch limit (0: the job's config defaults), so the
	// copy job sends the requests the job sends.
	FetchMaxBytes, BatchMaxBytes int
	// MaxInFlight is the produce requests in flight per transaction, as
	// the job's produce.max_in_flight (0: one at a time).
	MaxInFlight int
}

// Run copies until ctx ends, then commits the open cycle and returns.
// ready is called once every partition's producer is initialised and its
// fetchers positioned.
func (c *CopyJob) Run(ctx context.Context, ready func()) error {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		errs    []error
		pending = len(c.Partitions)
	)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for _, p := range c.Partitions {
		wg.Go(func() {
			err := c.partition(ctx, p, func() {
				mu.Lock()
				pending--
				if pending == 0 && ready != nil {
					ready()
				}
				mu.Unlock()
			})
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("copy partition %d: %w", p, err))
				mu.Unlock()
				cancel(err)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

func (c *CopyJob) partition(ctx context.Context, p int, ready func()) error {
	// Produce requests on the producer's own connections, as the job sends them.
	var dialer *sink.Dialer
	if t, ok := c.Client.Transport.(*kafka.Transport); ok {
		dialer = sink.DialerFor(t)
	}
	prod, err := sink.NewProducer(sink.Config{Client: c.Client, TransactionalID: fmt.Sprintf("%s-%d", c.Group, p),
		MaxBatchBytes: cmp.Or(c.BatchMaxBytes, int(config.DefaultProduceBatchMaxBytes)), MaxInFlight: c.MaxInFlight,
		Dialer: dialer})
	if err != nil {
		return err
	}
	defer prod.Close()
	if err := prod.Init(ctx); err != nil {
		return err
	}
	fo := fetch.Options{MaxWait: min(max(c.Interval/time.Duration(len(c.Topics)), 10*time.Millisecond), fetch.DefaultMaxWait),
		MaxBytes: cmp.Or(c.FetchMaxBytes, int(config.DefaultFetchPartitionMaxBytes))}
	var ins []*fetch.Fetcher
	for _, t := range c.Topics {
		f, err := fetch.New(c.Client, t, p, fo)
		if err != nil {
			return err
		}
		f.SetPosition(fetch.OffsetEarliest)
		ins = append(ins, f)
	}
	ready()
	txCtx := context.WithoutCancel(ctx)
	var (
		batch   fetch.Batch
		recs    []sink.Record
		headers []sink.Header
		before  = make([]int64, len(ins))
		after   = make([]int64, len(ins))
		offsets []sink.Offset
	)
	positions := func(dst []int64) {
		for i, f := range ins {
			dst[i] = f.Position()
		}
	}
	for {
		if err := prod.Begin(); err != nil {
			return err
		}
		positions(before)
		start, n, stopping := time.Now(), 0, false
		for turn := 0; n < c.MaxRecords && time.Since(start) < c.Interval; turn++ {
			t := turn % len(ins)
			if err := ins[t].Fetch(ctx, &batch); err != nil {
				if ctx.Err() != nil {
					stopping = true
					break
				}
				return err
			}
			if len(batch.Records) == 0 {
				continue
			}
			recs, headers = recs[:0], headers[:0]
			for i := range batch.Records {
				headers = append(headers, batch.Records[i].Headers...)
			}
			h0 := 0
			for i := range batch.Records {
				r := &batch.Records[i]
				h1 := h0 + len(r.Headers)
				recs = append(recs, sink.Record{Key: r.Key, Value: r.Value, Headers: headers[h0:h1:h1], Time: r.Timestamp})
				h0 = h1
			}
			if _, err := prod.Produce(txCtx, c.Output, int32(p), recs); err != nil {
				return err
			}
			n += len(recs)
		}
		positions(after)
		if !slices.Equal(before, after) {
			offsets = offsets[:0]
			for i, off := range after {
				if off >= 0 {
					offsets = append(offsets, sink.Offset{Topic: c.Topics[i], Partition: int32(p), Offset: off})
				}
			}
			if err := prod.SendOffsets(txCtx, sink.Group{ID: c.Group}, offsets); err != nil {
				return err
			}
		}
		if err := prod.Commit(txCtx); err != nil {
			return err
		}
		if stopping {
			return nil
		}
	}
}
