package job

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/pipeline"
	"github.com/dedupstream/dedupstream/sink"
)

// source is one raw topic partition that a route step reads.
type source struct {
	topic     string
	partition int
}

// routeSources returns the raw partitions whose route step belongs to
// stage p in repartition mode (none in input mode): raw partition r of every raw topic with
// r mod N = p, N being the job's partition count. Every raw partition
// therefore has exactly one owner whenever every stage has one.
func (j *Job) routeSources(p int, lay layout) []source {
	if j.cfg.Input.Partitioning != "repartition" {
		return nil
	}
	var srcs []source
	for _, t := range j.raw {
		for r := p; r < lay.raw[t]; r += lay.partitions {
			srcs = append(srcs, source{t, r})
		}
	}
	return srcs
}

// router is the route step of repartition mode for one raw partition: it
// reads the raw records, keys them like a stage does, and writes each to
// partition murmur2(business key) mod N of the repartition topic, keeping
// key, value, headers and timestamp. Records it cannot key go to the DLQ
// with their raw source. It writes in transactions that also commit its
// input offsets (group "<job.id>-route"), so the repartition topic holds
// each raw record once; the stages remove the duplicates as usual.
type router struct {
	j     *Job
	src   source
	lay   layout
	log   *slog.Logger
	keyer *pipeline.Keyer
	prod  *sink.Producer
	in    *prefetcher // the raw partition, read one batch ahead
	owned bool        // as runner.owned
	from  []int64     // input position at the start of the open cycle
	pos   []int64     // input position now

	rec    pipeline.Record
	dests  []int // per record of the batch: repartition partition, or -1 for the DLQ
	reason []string
	out    [][]sink.Record // per repartition partition
	dlq    []sink.Record
	arena  arena
	topicB []byte
}

var _ task = (*router)(nil)

func newRouter(j *Job, src source, lay layout) (*router, error) {
	keyer, err := pipeline.NewKeyer(j.pc)
	if err != nil {
		return nil, err
	}
	cfg := j.cfg
	prod, err := sink.NewProducer(sink.Config{
		Client:             j.client,
		TransactionalID:    fmt.Sprintf("%s-route-%s-%d", cfg.Job.ID, src.topic, src.partition),
		TransactionTimeout: cfg.Kafka.TransactionTimeout,
		RequestTimeout:     j.opts.RequestTimeout,
		RetryTimeout:       j.opts.RetryTimeout,
		Compression:        j.codec,
		MaxBatchBytes:      lay.maxBatchBytes(int(cfg.Produce.BatchMaxBytes)),
		MaxInFlight:        cfg.Produce.MaxInFlight,
		Dialer:             j.dialer,
		Logger:             j.log,
	})
	if err != nil {
		return nil, err
	}
	maxWait := min(max(cfg.Commit.Interval, 10*time.Millisecond), fetch.DefaultMaxWait)
	in, err := fetch.New(j.client, src.topic, src.partition, j.inputOptions(fetch.Options{
		MaxWait:         maxWait,
		MaxBytes:        int(cfg.Fetch.PartitionMaxBytes),
		MaxRequestBytes: int(cfg.Fetch.RequestMaxBytes),
		RequestTimeout:  j.opts.RequestTimeout,
		RetryTimeout:    j.opts.RetryTimeout,
		ClientID:        cfg.Kafka.ClientID,
		Logger:          j.log,
	}, src.topic, src.partition))
	if err != nil {
		return nil, err
	}
	return &router{
		j: j, src: src, lay: lay, keyer: keyer, prod: prod,
		in:     newPrefetcher([]*fetch.Fetcher{in}, cfg.Fetch.FetchAhead(), fetch.Wait{Max: maxWait, MinBytes: int(cfg.Fetch.MinBytes)}),
		log:    j.log.With("route", fmt.Sprintf("%s/%d", src.topic, src.partition)),
		out:    make([][]sink.Record, lay.partitions),
		topicB: []byte(src.topic),
		arena:  arena{dlqLimit: lay.dlqMaxBytes},
	}, nil
}

// routeGroup is the consumer group of the route steps' input offsets.
func (j *Job) routeGroup() string { return j.cfg.Job.ID + "-route" }

// run drives the route step's recovery and cycles until ctx ends or a
// failure is not transient.
func (rt *router) run(ctx context.Context) error {
	name := fmt.Sprintf("route %s/%d", rt.src.topic, rt.src.partition)
	d := rt.j.newDriver(name, "another instance routes this raw partition", rt.log)
	d.onFenced = func(ctx context.Context, err error) error { // see fenced.go
		return rt.j.onFenced(ctx, fenceSite{what: name, p: -1, prod: rt.prod, owned: &rt.owned,
			group: rt.j.cfg.Assignment.Mode == "group", log: rt.log}, err)
	}
	defer rt.in.close()
	defer rt.prod.Close()
	return d.run(ctx, rt)
}

// recover fences the previous router of the raw partition, settling its
// open transaction, and resumes at the route group's committed offset.
func (rt *router) recover(ctx context.Context) error {
	if err := acquire(ctx, rt.prod, &rt.owned); err != nil {
		return err
	}
	committed, err := rt.j.committedOffsets(ctx, rt.j.routeGroup(), []string{rt.src.topic}, rt.src.partition)
	if err != nil {
		return fmt.Errorf("committed offsets: %w", err)
	}
	pos := committed[0]
	if pos < 0 {
		pos = fetch.OffsetEarliest
	}
	rt.in.reset(ctx, []int64{pos})
	return nil
}

// begin opens a route cycle's transaction and notes its input position.
func (rt *router) begin() error {
	rt.in.phase(time.Now().Add(rt.j.cfg.Commit.Interval))
	rt.from = rt.in.positions(rt.from)
	return rt.prod.Begin()
}

// fetch returns the raw partition's next batch, fetched ahead by rt.in.
func (rt *router) fetch(context.Context, int) (*fetch.Batch, error) {
	b, _, err := rt.in.next()
	if err != nil {
		return nil, fmt.Errorf("fetch %s/%d: %w", rt.src.topic, rt.src.partition, rt.j.inputFailed(err))
	}
	return b, nil
}

// settle commits the route cycle's input offset with its transaction,
// then adds its counts.
func (rt *router) settle(ctx context.Context, cycle *Stats) error {
	var err error
	if rt.pos = rt.in.positions(rt.pos); rt.pos[0] != rt.from[0] {
		err = rt.prod.SendOffsets(ctx, sink.Group{ID: rt.j.routeGroup()},
			[]sink.Offset{{Topic: rt.src.topic, Partition: int32(rt.src.partition), Offset: rt.pos[0]}})
	}
	if err == nil {
		err = rt.prod.Commit(ctx)
	}
	if err != nil {
		return rt.abort(ctx, err)
	}
	rt.j.addStats(func(s *Stats) {
		s.RouteIn += cycle.RouteIn
		s.DLQTruncated += cycle.DLQTruncated
		s.Routed += cycle.Routed
		s.DeadLettered += cycle.DeadLettered
	})
	return nil
}

func (rt *router) abort(ctx context.Context, cause error) error {
	rt.in.discard() // read again after recovery
	return abortTxn(ctx, rt.prod, rt.log, cause)
}

// decide keys one fetched batch and lays each record out for its
// repartition partition, or for the DLQ when it cannot be keyed.
func (rt *router) decide(_ int, b *fetch.Batch, cycle *Stats) error {
	rt.dests, rt.reason = rt.dests[:0], rt.reason[:0]
	dead := 0
	for i := range b.Records {
		rt.rec = fromFetched(&b.Records[i])
		key, _, reason := rt.keyer.Key(&rt.rec)
		dest := -1
		if reason == "" {
			dest = partition.Murmur2Partition(key, rt.lay.partitions)
		} else {
			dead++
		}
		rt.dests = append(rt.dests, dest)
		rt.reason = append(rt.reason, reason)
	}
	rt.arena.reset(b, dead)
	for p := range rt.out {
		rt.out[p] = rt.out[p][:0]
	}
	rt.dlq = rt.dlq[:0]
	for i, dest := range rt.dests {
		if dest < 0 {
			rt.dlq = append(rt.dlq, rt.arena.record(&b.Records[i], rt.reason[i], rt.topicB, rt.src.partition))
			continue
		}
		rt.out[dest] = append(rt.out[dest], rt.arena.record(&b.Records[i], "", nil, 0))
	}
	cycle.DLQTruncated += rt.arena.cut
	cycle.RouteIn += uint64(len(b.Records))
	cycle.Routed += uint64(len(b.Records) - dead)
	cycle.DeadLettered += uint64(dead)
	return nil
}

// produce sends the laid-out records to the repartition topic and the DLQ
// inside the open transaction.
func (rt *router) produce(ctx context.Context) error {
	topic := rt.j.topics[0]
	for p, recs := range rt.out {
		if len(recs) == 0 {
			continue
		}
		if _, err := rt.prod.Produce(ctx, topic, int32(p), recs); err != nil {
			return fmt.Errorf("produce to %s/%d: %w", topic, p, err)
		}
	}
	if len(rt.dlq) > 0 {
		dp := int32(rt.src.partition % rt.lay.dlqPartitions)
		if _, err := rt.prod.Produce(ctx, rt.j.cfg.Output.DLQTopic, dp, rt.dlq); err != nil {
			return fmt.Errorf("produce to %s/%d: %w", rt.j.cfg.Output.DLQTopic, dp, err)
		}
	}
	return nil
}
