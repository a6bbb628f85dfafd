package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/pipeline"
	"github.com/dedupstream/dedupstream/sink"
	"github.com/dedupstream/dedupstream/statestore"
	"github.com/segmentio/kafka-go"
)

// MigrateStats is what Migrate did.
type MigrateStats struct {
	// From is the partition count the committed offsets recorded, or
	// else the partitions topic (0: none), To the topics' count now.
	From, To int
	// Partitions are the partitions whose state was rebuilt.
	Partitions []int
	// Read counts output records read (the window of every output
	// partition); Restored those inserted into a rebuilt store (once each,
	// though a key that moved goes to the stores of its partition under
	// both counts).
	Read, Restored uint64
	// Backlog counts input records past the group's committed offsets
	// whose key now belongs to another partition than the one they lie
	// in: their keys were inserted into that partition's store.
	Backlog uint64
}

// Migrate rebuilds the state of the partitions this instance owns
// (assignment.partitions in static mode, every partition in group mode)
// for the topics' current partition count N, after the raw and output
// topics were grown. Each owned partition's state directory is removed and
// built again from the window of the whole output topic (every partition,
// the same span a new store restores: pipeline.Config.RestoreFrom): every
// output record whose key belongs to the partition under N (the configured
// input partitioner on its Kafka key; murmur2 on the business key in
// repartition mode) is inserted, so a key emitted before the change is
// still remembered by the partition it moved to; it is also inserted into
// the store of the output partition it lies in (where the old count or
// route put it), for input read again from before the change. Input not
// read yet whose key now belongs to another partition is inserted there
// too (migrateBacklog). Every rebuilt store is durable, and a mark beside
// its directory removed (statedir.go), before N is recorded with
// the group's committed offsets and in the partitions topic
// (PartitionsTopic), and Run accepts the new count.
//
// Every instance of the job must be stopped while it runs; in static mode
// run it on every instance (each rebuilds its own partitions), in group mode
// on every instance whose state directory will be used. It is idempotent:
// running it again rebuilds the same state.
func Migrate(ctx context.Context, cfg *config.Config, opts Options) (MigrateStats, error) {
	var ms MigrateStats
	j, err := New(cfg, opts)
	if err != nil {
		return ms, err
	}
	lay, err := j.checkTopics(ctx)
	if err == nil {
		// Before any state is removed: the layout migrate records must
		// stay.
		err = j.checkPartitionsTopicConfig(ctx)
	}
	if err != nil {
		return ms, err
	}
	j.fitOutput(lay) // the backlog's records the stages dead-letter stay out
	n := lay.partitions
	ms.To = n
	if ms.From, err = j.recordedPartitions(ctx, n); err != nil && !errors.Is(err, ErrPartitionCount) {
		return ms, err
	}
	if ms.From == 0 {
		if ms.From, err = j.readPartitionsRecord(ctx); err != nil && !errors.Is(err, errPartitionsTopicRefused) {
			return ms, err
		}
	}
	owned := cfg.Assignment.Partitions
	if cfg.Assignment.Mode == "group" {
		owned = make([]int, n)
		for p := range owned {
			owned[p] = p
		}
	}
	route, err := migrationRoute(j, n)
	if err != nil {
		return ms, err
	}
	// A key also stays in the store of the output partition its record lies
	// in, which is where the layout it was emitted under put it (the old
	// count, the old route): a stage that reads its input partition from an
	// offset before the change (the group's offsets expired) meets records
	// routed under that layout again, and must drop those already emitted.
	// Not from the old count or route recorded: in group mode migrate runs
	// on every instance, and only the first finds them recorded; the
	// others' stores left these keys out, and 1981 of 3000 records read
	// again passed (TestMigrateOnEveryInstance).
	if err := j.openMemory(); err != nil {
		return ms, err
	}
	defer j.closeMemory() // after the stores below are closed
	j.planMemory(len(owned))
	runners := make(map[int]*runner, len(owned))
	defer func() {
		for _, r := range runners {
			r.stage.Close()
		}
	}()
	for _, p := range owned {
		// A start refuses the state until it is rebuilt (statedir.go).
		if err := markMigrating(cfg.State.Dir, p); err != nil {
			return ms, fmt.Errorf("job: migrate: partition %d: %w", p, err)
		}
		if err := pipeline.RemoveState(j.stateDir(p)); err != nil {
			if errors.Is(err, statestore.ErrLocked) {
				// Nothing was removed: the running instance's state
				// stays usable.
				unmarkMigrating(cfg.State.Dir, p)
				return ms, fmt.Errorf("job: migrate: the state of partition %d is open in a running instance (%w): stop every instance of job %q first", p, err, cfg.Job.ID)
			}
			return ms, fmt.Errorf("job: migrate: remove state of partition %d: %w", p, err)
		}
		r := newRunner(j, p, lay, sink.Group{ID: cfg.Job.ID})
		if err := r.open(); err != nil {
			return ms, err
		}
		runners[p] = r
		ms.Partitions = append(ms.Partitions, p)
	}
	// The output partitions' ends now: each rebuilt store resumes reading
	// its own output partition from there.
	ends := make([]int64, n)
	for q := range n {
		f, err := fetch.New(j.client, cfg.Output.Topic, q, fetch.Options{RequestTimeout: j.opts.RequestTimeout, RetryTimeout: j.opts.RetryTimeout, ClientID: cfg.Kafka.ClientID, Logger: j.log})
		if err != nil {
			return ms, err
		}
		rq := &runner{j: j, p: q, lay: lay, log: j.log.With("output_partition", q), out: f}
		offs, err := f.ListOffsets(ctx)
		if err != nil {
			return ms, fmt.Errorf("job: migrate: output offsets of partition %d: %w", q, err)
		}
		ends[q] = offs.LastStable
		from, err := rq.windowStart(ctx, offs)
		if err != nil {
			return ms, fmt.Errorf("job: migrate: output partition %d: %w", q, err)
		}
		// The generation marks of stage q (marks.go) are read as a
		// recovery reads them: the window begins at the oldest live
		// generation's mark when that is earlier, each batch is filed in
		// the generation of its newest mark at least, and no record counts
		// later than the end of its mark's generation (emitTimes). Without
		// them a late key emitted after a record that is not in the output
		// moved the clock was left out, and its replay passed
		// (TestMigrateLateRecords).
		marks, emitted, err := migrationMarks(ctx, j, q)
		if err != nil {
			return ms, fmt.Errorf("job: migrate: committed offsets of partition %d: %w", q, err)
		}
		if r := runners[q]; r != nil {
			r.marks = marks // its checkpoint keeps a copy
		}
		from = max(marks.liveStart(&j.pc, from), offs.Earliest)
		if from >= offs.LastStable {
			continue
		}
		groups := map[int][]pipeline.Record{}
		err = f.ReadRange(ctx, from, offs.LastStable, func(b *fetch.Batch) error {
			clear(groups)
			limit := emitted.batchLimit(b.Records)
			for i := range b.Records {
				rec := outputRecord(&b.Records[i], limit)
				ms.Read++
				p := route(&rec)
				kept := false
				if _, ok := runners[p]; ok {
					groups[p], kept = append(groups[p], rec), true
				}
				if q != p && runners[q] != nil {
					groups[q], kept = append(groups[q], rec), true
				}
				if kept {
					ms.Restored++
				}
			}
			g, marked := marks.genAt(b.NextOffset - 1)
			for p, recs := range groups {
				if marked {
					runners[p].stage.AdvanceTo(g)
				}
				if err := runners[p].stage.Restore(recs, nil); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return ms, fmt.Errorf("job: migrate: read output partition %d: %w", q, err)
		}
		j.opts.failpoint(testhook.MigrateRead)
	}
	// Input the stages have not read yet (past the group's committed
	// offsets: producers went on while the job was stopped, or it lagged)
	// was routed under the old layout. Stage p reads and emits a key of
	// it that now belongs to partition q, and a later record of the key,
	// routed under the new layout, reaches stage q, whose store never saw
	// it: q's store learns such keys now, as emitted, since stage p emits
	// them (or did before). Without this, replays of the backlog's moved
	// keys passed (TestPartitionCountChangeWithBacklog: 341 of 500).
	for _, t := range j.topics {
		for p := range n {
			if err := migrateBacklog(ctx, j, t, p, route, runners, &ms); err != nil {
				return ms, fmt.Errorf("job: migrate: input %s/%d: %w", t, p, err)
			}
		}
	}
	for _, p := range owned {
		r := runners[p]
		committed, err := j.committedOffsets(ctx, cfg.Job.ID, j.topics, p)
		if err != nil {
			return ms, fmt.Errorf("job: migrate: committed offsets of partition %d: %w", p, err)
		}
		if err := r.stage.Restore(nil, r.checkpoint(committed, ends[p])); err != nil {
			return ms, fmt.Errorf("job: migrate: commit state of partition %d: %w", p, err)
		}
		// Durable before the count is recorded: a restore's loads sit in
		// memory until the store writes them (up to a memtable's worth of
		// keys), and once the count is recorded Run accepts these stores.
		// Killed between the two, a store reopened empty (no checkpoint),
		// so its stage restored only its own output partition and the keys
		// that moved there passed again (TestMigrateKilledBeforeStoresClosed).
		if err := r.stage.EndRestore(); err != nil {
			return ms, fmt.Errorf("job: migrate: write state of partition %d: %w", p, err)
		}
		if err := unmarkMigrating(cfg.State.Dir, p); err != nil {
			return ms, fmt.Errorf("job: migrate: partition %d: %w", p, err)
		}
	}
	// Before the count: a store that starts empty later reads the other
	// output partitions up to here for the keys that moved to it
	// (restoremoved.go).
	if err := j.writeJobRecord(ctx, movedRecordKey, movedValue(ends)); err != nil && !errors.Is(err, errPartitionsTopicRefused) {
		return ms, fmt.Errorf("job: migrate: %w", err)
	}
	if err := j.recordPartitions(ctx, n); err != nil {
		return ms, err
	}
	if err := j.writePartitionsRecord(ctx, n); err != nil && !errors.Is(err, errPartitionsTopicRefused) {
		return ms, fmt.Errorf("job: migrate: %w", err)
	}
	if err := j.writeJobRecord(ctx, routeRecordKey, j.routeSettings()); err != nil && !errors.Is(err, errPartitionsTopicRefused) {
		return ms, fmt.Errorf("job: migrate: %w", err)
	}
	if err := j.writeJobRecord(ctx, outputRecordKey, j.cfg.Output.Topic); err != nil && !errors.Is(err, errPartitionsTopicRefused) {
		return ms, fmt.Errorf("job: migrate: %w", err)
	}
	j.opts.failpoint(testhook.Migrated)
	return ms, nil
}

// migrationRoute returns the function that gives an output record's
// partition under n partitions, as new input will arrive: the route step's
// murmur2 of the business key in repartition mode, else the configured
// input partitioner of the record's Kafka key (murmur2 by default).
func migrationRoute(j *Job, n int) (func(*pipeline.Record) int, error) {
	if j.cfg.Input.Partitioning == "repartition" {
		keyer, err := pipeline.NewKeyer(j.pc)
		if err != nil {
			return nil, err
		}
		return func(r *pipeline.Record) int {
			key, _, _ := keyer.Key(r)
			return partition.Murmur2Partition(key, n)
		}, nil
	}
	fn, err := partition.PartitionerByName(j.cfg.Input.Partitioner)
	if err != nil || fn == nil {
		fn = partition.Murmur2Partition
	}
	return func(r *pipeline.Record) int { return fn(r.Key, n) }, nil
}

// recordPartitions commits the group's committed offsets again with n in
// their metadata (the offsets unchanged). The group must be empty: every
// instance stopped.
func (j *Job) recordPartitions(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	topics, err := j.groupOffsets(ctx, n)
	if err != nil {
		return fmt.Errorf("job: migrate: %w", err)
	}
	commit := &kafka.OffsetCommitRequest{GroupID: j.cfg.Job.ID, GenerationID: -1, Topics: map[string][]kafka.OffsetCommit{}}
	for t, ps := range topics {
		for _, op := range ps {
			if op.Error == nil && op.CommittedOffset >= 0 {
				// The generation marks stay: they describe the output
				// partition, which the stage of the same number goes on
				// writing, and its rebuilt store's clock reached them
				// (Migrate files every batch at its mark's generation).
				// Dropped, a store rebuilt after the migration (a disk
				// lost) restored by timestamps alone and left a late key
				// out (TestMigrateLateRecords).
				om := parseOffsetMeta(op.Metadata)
				commit.Topics[t] = append(commit.Topics[t], kafka.OffsetCommit{Partition: op.Partition, Offset: op.CommittedOffset,
					Metadata: offsetMeta(n, j.cfg.Output.Topic, -1, om.marks, om.marksSpan)})
			}
		}
	}
	if len(commit.Topics) == 0 {
		return nil
	}
	cres, err := j.client.OffsetCommit(ctx, commit)
	if err != nil {
		return fmt.Errorf("job: migrate: record %d partitions with the committed offsets: %w", n, err)
	}
	for t, ps := range cres.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return fmt.Errorf("job: migrate: record %d partitions with the committed offset of %s/%d: %w (is an instance still running? stop every instance first)", n, t, p.Partition, p.Error)
			}
		}
	}
	return nil
}

// migrationMarks returns the generation marks committed with stage q's
// input offsets, in the generation span in force, and the bound they put
// on the times of its output records (see runner.recover); none on
// processing time or when the offsets carry none.
func migrationMarks(ctx context.Context, j *Job, q int) (genMarks, *emitTimes, error) {
	if j.pc.TimeBase != pipeline.RecordTime {
		return nil, nil, nil
	}
	_, meta, err := j.committedOffsetsMeta(ctx, j.cfg.Job.ID, j.topics, q)
	if err != nil {
		return nil, nil, err
	}
	if om, ok := committedMarks(meta); ok {
		return om.marks.inSpan(om.marksSpan, j.pc.SpanMs()), &emitTimes{marks: om.marks, spanMs: om.marksSpan, upTo: om.outputNext}, nil
	}
	return nil, nil, nil
}

// migrateBacklog inserts into the stores of runners the keys of partition
// p of input topic, from the group's committed offset (the log start
// without one, where the stage will begin) to its last stable offset, that
// route sends to another partition than p: stage p will read and emit them
// (or has emitted them before), and their later records reach the stage of
// the partition they now belong to; records the stage dead-letters are
// left out. Should that input never be read (its
// offsets moved past it with the Kafka tooling, or retention deleted it
// first), a later record of such a key is dropped although it was not
// emitted.
func migrateBacklog(ctx context.Context, j *Job, topic string, p int, route func(*pipeline.Record) int, runners map[int]*runner, ms *MigrateStats) error {
	committed, err := j.committedOffsets(ctx, j.cfg.Job.ID, []string{topic}, p)
	if err != nil {
		return fmt.Errorf("committed offset: %w", err)
	}
	f, err := fetch.New(j.client, topic, p, fetch.Options{RequestTimeout: j.opts.RequestTimeout, RetryTimeout: j.opts.RetryTimeout, ClientID: j.cfg.Kafka.ClientID, Logger: j.log})
	if err != nil {
		return err
	}
	offs, err := f.ListOffsets(ctx)
	if err != nil {
		return fmt.Errorf("offsets: %w", err)
	}
	from := max(committed[0], offs.Earliest)
	if from >= offs.LastStable {
		return nil
	}
	// Keyed as the stage will key them: a record it dead-letters (too
	// large, no business key) is never emitted, and its key must not be
	// inserted.
	keyer, err := pipeline.NewKeyer(j.pc)
	if err != nil {
		return err
	}
	groups := map[int][]pipeline.Record{}
	return f.ReadRange(ctx, from, offs.LastStable, func(b *fetch.Batch) error {
		clear(groups)
		for i := range b.Records {
			fr := &b.Records[i]
			rec := pipeline.Record{Record: partition.Record{Key: fr.Key, Value: fr.Value, Headers: fr.Headers}, TimestampMs: fr.Timestamp.UnixMilli()}
			if _, _, reason := keyer.Key(&rec); reason != "" {
				continue
			}
			if q := route(&rec); q != p && runners[q] != nil {
				groups[q] = append(groups[q], rec)
				ms.Backlog++
			}
		}
		for q, recs := range groups {
			if err := runners[q].stage.Restore(recs, nil); err != nil {
				return err
			}
		}
		return nil
	})
}
