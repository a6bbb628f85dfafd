package job

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/pipeline"
)

// A key's partition depends on the layout (the partition count, the
// route). After Migrate changed it, the output's window holds records
// emitted under the old layout, on the partitions it gave their keys.
// Migrate rebuilt the stores of the instances it ran on from the whole
// output; a store that starts empty later (a disk lost, a new instance, a
// group member that never ran migrate), while those records are still
// inside the window, restored its own output partition only: the keys that
// moved to it were missing and their replays passed
// (TestEmptyDiskAfterPartitionCountChange: 668 of 1000). So Migrate
// records in the partitions topic where each output partition ended when it
// ran (key "moved": "0=END,1=END,..."), and a new store whose window still
// reaches before such an end reads that other partition's window too and
// keeps the keys that belong to it now (restoreMoved). Earlier builds
// ignore the record.

// movedRecordKey is the key of the partitions topic's record of the output
// partitions' ends at the last migration.
const movedRecordKey = "moved"

// The record lives only in the partitions topic. Deleted (by hand, or
// emptied and created again) within the window after a migration, a
// store that started empty restored its own output partition only, and
// the replays of keys that moved to it passed (TestPartitionsTopicDeleted:
// 668 of 1000, whether deleted between runs or under a running job). A
// start cannot tell whether a migration ran before the topic was lost; it
// can tell that the topic was lost: it holds no layout, and the group has
// committed offsets recorded by the job. recordLostMoves then records the
// output partitions' ends as a migration would now. That can only cost
// reads: a store that starts empty within the next window reads the other
// output partitions' windows, and keeps only the keys that belong to it.

// movedValue encodes the output partitions' ends.
func movedValue(ends []int64) string {
	var b strings.Builder
	for q, end := range ends {
		if q > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d=%d", q, end)
	}
	return b.String()
}

// parseMoved decodes movedValue; an entry it cannot read is left out (its
// partition is then not read by restoreMoved).
func parseMoved(v []byte) map[int]int64 {
	ends := map[int]int64{}
	for field := range strings.SplitSeq(string(v), ",") {
		q, end, ok := strings.Cut(field, "=")
		qn, qerr := strconv.Atoi(q)
		en, eerr := strconv.ParseInt(end, 10, 64)
		if ok && qerr == nil && eerr == nil && qn >= 0 && en >= 0 {
			ends[qn] = en
		}
	}
	return ends
}

// restoreMoved puts into a new store the keys of the other output
// partitions' windows that belong to this partition under the layout in
// force, from every partition whose window still begins before its end at
// the last migration (j.moved), each read with its stage's generation
// marks as Migrate reads it. The loads carry no checkpoint, so a crash
// before the store's first checkpoint leaves it new and this runs again.
// It returns how many records it kept.
func (r *runner) restoreMoved(ctx context.Context) (int, error) {
	qs := make([]int, 0, len(r.j.moved))
	for q := range r.j.moved {
		if q != r.p && q < r.lay.partitions {
			qs = append(qs, q)
		}
	}
	if len(qs) == 0 {
		return 0, nil
	}
	slices.Sort(qs)
	route, err := migrationRoute(r.j, r.lay.partitions)
	if err != nil {
		return 0, err
	}
	var (
		kept int
		recs []pipeline.Record
	)
	for _, q := range qs {
		f, err := fetch.New(r.j.client, r.j.cfg.Output.Topic, q, fetch.Options{RequestTimeout: r.j.opts.RequestTimeout, RetryTimeout: r.j.opts.RetryTimeout, ClientID: r.j.cfg.Kafka.ClientID, Logger: r.log})
		if err != nil {
			return kept, err
		}
		offs, err := f.ListOffsets(ctx)
		if err != nil {
			return kept, fmt.Errorf("output offsets of partition %d: %w", q, err)
		}
		if r.j.moved[q] <= offs.Earliest {
			continue // retention deleted what the old layout placed there
		}
		rq := &runner{j: r.j, p: q, lay: r.lay, log: r.log.With("output_partition", q), out: f}
		from, err := rq.windowStart(ctx, offs)
		if err != nil {
			return kept, fmt.Errorf("output partition %d: %w", q, err)
		}
		marks, emitted, err := migrationMarks(ctx, r.j, q)
		if err != nil {
			return kept, fmt.Errorf("committed offsets of partition %d: %w", q, err)
		}
		from = max(marks.liveStart(&r.j.pc, from), offs.Earliest)
		if from >= min(r.j.moved[q], offs.LastStable) {
			continue // what the old layout placed there has left the window
		}
		err = f.ReadRange(ctx, from, offs.LastStable, func(b *fetch.Batch) error {
			recs = recs[:0]
			limit := emitted.batchLimit(b.Records)
			for i := range b.Records {
				rec := outputRecord(&b.Records[i], limit)
				if route(&rec) == r.p {
					recs = append(recs, rec)
				}
			}
			if len(recs) == 0 {
				return nil
			}
			if g, ok := marks.genAt(b.NextOffset - 1); ok {
				r.stage.AdvanceTo(g)
			}
			kept += len(recs)
			return r.stage.Restore(recs, nil)
		})
		if err != nil {
			return kept, fmt.Errorf("output partition %d: %w", q, err)
		}
	}
	if kept > 0 {
		r.log.Info("restored the keys that moved to this partition from the other output partitions", "records", kept)
	}
	return kept, nil
}

// recordLostMoves records the output partitions' ends now as the last
// migration's, when the group committed offsets under the job's layout
// (n partitions) although the partitions topic holds none: it was deleted
// or emptied, and with it perhaps the ends of a migration (see above).
func (j *Job) recordLostMoves(ctx context.Context, n int) error {
	topics, err := j.groupOffsets(ctx, n)
	if err != nil {
		return fmt.Errorf("job: %w", err)
	}
	committed := false
	for _, ps := range topics {
		for _, op := range ps {
			committed = committed || op.Error == nil && op.CommittedOffset >= 0 && parseOffsetMeta(op.Metadata).partitions > 0
		}
	}
	if !committed {
		return nil // a new job, or one of a build before the topic: nothing moved
	}
	ends := make([]int64, n)
	for q := range n {
		f, err := fetch.New(j.client, j.cfg.Output.Topic, q, fetch.Options{RequestTimeout: j.opts.RequestTimeout, RetryTimeout: j.opts.RetryTimeout, ClientID: j.cfg.Kafka.ClientID, Logger: j.log})
		if err != nil {
			return err
		}
		offs, err := f.ListOffsets(ctx)
		if err != nil {
			return fmt.Errorf("job: output offsets of partition %d: %w", q, err)
		}
		ends[q] = offs.LastStable
	}
	j.log.Warn("the job's layout topic holds no layout although the job committed before: it was deleted or emptied. Recording the layout again, "+
		"and the output's ends as a migration's, so that a store that starts empty within the next window also reads the other output partitions for keys that moved to it",
		"topic", PartitionsTopic(j.cfg.Job.ID), "window", j.pc.Window)
	return j.writeJobRecord(ctx, movedRecordKey, movedValue(ends))
}
