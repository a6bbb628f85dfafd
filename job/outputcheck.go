package job

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dedupstream/dedupstream/fetch"
)

// The output topic is the source of truth and the stores are its cache,
// so a job id belongs to one output topic. Two operator actions break that
// without the start-up checks of the partition count noticing:
//
//   - output.topic renamed under the same job id: the committed input
//     offsets continue, and a store restored from the new topic (a new
//     instance, a lost disk, a moved partition) does not know the keys
//     emitted to the old one, so their replays pass;
//   - the output topic deleted and created again (empty, or refilled
//     since): a store that restores from it learns nothing of the old
//     records, and a kept store's checkpoint points into a different log.
//
// So every committed input offset carries the output topic and the end of
// the stage's output partition after its cycle in its metadata
// ("output=TOPIC@NEXT", written in the same transaction as the records),
// and the partitions topic records the output topic (key "output") for
// good. Run refuses to start, with ErrTopics (exit 2), when the recorded
// topic is not the configured one, or when an output partition ends before
// the offset the group committed with it: the log that offset pointed into
// is gone. `dedupstream migrate` accepts the configured output as the
// truth: it rebuilds the stores from it and records it.
//
// Kafka topic ids would tell a recreated topic also after the group's
// offsets expired; kafka-go's Metadata request (up to v8) does not carry
// them, so a topic recreated and refilled past every committed end while
// the group's offsets expired is not detected.

// outputRecordKey is the key of the partitions topic's record that holds
// the output topic's name.
const outputRecordKey = "output"

// checkOutputTopic refuses to start on an output topic other than the one
// the job wrote (recs: the partitions topic's layout, without an output
// record only when the job may not use that topic), or one that lost
// records the job committed.
func (j *Job) checkOutputTopic(ctx context.Context, lay layout, recs jobRecords) error {
	out := j.cfg.Output.Topic
	if r, ok := recs[outputRecordKey]; ok && string(r.value) != out {
		return j.otherOutput(fmt.Sprintf("topic %q records that job %q writes output topic %q, the config names %q", PartitionsTopic(j.cfg.Job.ID), j.cfg.Job.ID, r.value, out))
	}

	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	topics, err := j.groupOffsets(octx, lay.partitions)
	if err != nil {
		return fmt.Errorf("job: %w", err)
	}
	next := map[int]int64{} // output partition -> the largest end committed
	for _, t := range slices.Sorted(maps.Keys(topics)) {
		for _, op := range topics[t] {
			if op.Error != nil || op.CommittedOffset < 0 {
				continue
			}
			m := parseOffsetMeta(op.Metadata)
			if m.output != "" && m.output != out {
				return j.otherOutput(fmt.Sprintf("the offsets job %q committed (%s/%d) were committed with output topic %q, the config names %q",
					j.cfg.Job.ID, t, op.Partition, m.output, out))
			}
			if m.output == out && m.outputNext > next[op.Partition] {
				next[op.Partition] = m.outputNext
			}
		}
	}
	var lost []string
	for _, p := range slices.Sorted(maps.Keys(next)) {
		if p >= lay.partitions {
			continue
		}
		f, err := fetch.New(j.client, out, p, fetch.Options{RequestTimeout: j.opts.RequestTimeout, RetryTimeout: j.opts.RetryTimeout, ClientID: j.cfg.Kafka.ClientID, Logger: j.log})
		if err != nil {
			return err
		}
		offs, err := f.ListOffsets(octx)
		if err != nil {
			return fmt.Errorf("job: output offsets of %s/%d: %w", out, p, err)
		}
		// The high watermark: the records of a committed cycle are
		// replicated before it commits, its markers may still be on the
		// way.
		if offs.Latest < next[p] {
			lost = append(lost, fmt.Sprintf("%s/%d ends at offset %d, the group committed input with it up to %d", out, p, offs.Latest, next[p]))
		}
	}
	if len(lost) > 0 {
		return j.otherOutput(fmt.Sprintf("the output topic lost records the job committed (%s): it was deleted and created again, or truncated",
			strings.Join(lost, "; ")))
	}
	return nil
}

// otherOutput is the refusal of an output topic that is not the one the
// job's stores and committed offsets belong to.
// otherJob adds to err, a refused partition count or route, a line saying
// that the recorded output topic is not the configured one either, when it
// is not: the config is perhaps another job's that reuses this job.id (a
// copied file). The refusals above advise migrate, which would take the
// id over from the job that runs under it.
func (j *Job) otherJob(err error, recs jobRecords) error {
	r, ok := recs[outputRecordKey]
	if !ok || string(r.value) == j.cfg.Output.Topic || !errors.Is(err, ErrTopics) {
		return err
	}
	return fmt.Errorf("%w\njob.id: topic %q records that job %q writes output topic %q, this config writes %q: if it is another job's config, give that job a job.id of its own "+
		"(migrate would take this id over from the job that runs under it)", err, PartitionsTopic(j.cfg.Job.ID), j.cfg.Job.ID, r.value, j.cfg.Output.Topic)
}

func (j *Job) otherOutput(what string) error {
	return fmt.Errorf("%w: output.topic: %s. The stores and the committed input offsets of job %q belong to the output it wrote; "+
		"a store restored from this one would not know the keys emitted there, so their replays would pass. "+
		"Set output.topic back to the topic the job wrote; or, to go on with this output (a copy of the old one, or accepting that keys "+
		"emitted only to the old one are forgotten), stop every instance and run `dedupstream migrate --config FILE` on every instance "+
		"(it rebuilds the stores from this output and records it; see docs/scaling.md); or start under a new job.id",
		ErrTopics, what, j.cfg.Job.ID)
}
