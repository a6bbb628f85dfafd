package job

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/prometheus/client_golang/prometheus"
)

// An input position can fall out of the log while the job does not read
// it: the job was stopped, or lagged, for longer than the raw topic's
// retention (or an operator ran kafka-delete-records past it), or the topic
// was deleted and created again, so the committed offset lies past its new
// end. The broker then answers OFFSET_OUT_OF_RANGE at every start, and a job
// that stops on it stops again after every restart until an operator resets
// the group's offsets. input.offset_reset decides: "earliest" (the default)
// goes on from the log start, as a Kafka Streams application does, with a
// warning and a counter of the offsets skipped; "fail" stops the job with an
// error naming the way out. Going on is safe for exactly once: what is read
// again (after a recreated topic) meets the store like any replay, and what
// retention removed was never read and is gone whatever the job does.
//
// Not on the repartition topic: its records were read by the route step,
// which committed their raw offsets, so records that left it unread (the
// topic deleted and created again, as a reset tool does with a job's
// internal topics, or its retention ran out while the job was stopped with
// a backlog there) are lost to the job although the raw topic may still
// hold them, and going on from its start dropped them with a warning that
// counted 0 skipped (TestRepartitionTopicLost). A stage stops instead
// (exit 1), naming the route group whose offsets to move back so that the
// route step writes them again; what it routes again that was emitted
// before meets the store like any replay.

// inputOptions returns fo for a reader of topic/partition in the stages'
// or route steps' input, with the out-of-range policy of input.offset_reset
// (always fail on the repartition topic).
func (j *Job) inputOptions(fo fetch.Options, topic string, partition int) fetch.Options {
	if j.cfg.Input.OffsetReset != "earliest" || topic == RepartitionTopic(j.cfg) {
		return fo
	}
	fo.OutOfRange = fetch.OutOfRangeEarliest
	fo.OnReset = func(from, to int64) { j.inputReset(topic, partition, from, to) }
	return fo
}

// inputReset logs and counts a position the out-of-range policy moved.
func (j *Job) inputReset(topic string, partition int, from, to int64) {
	skipped := max(0, to-from)
	j.log.Warn(fmt.Sprintf("input %s/%d: offset %d is no longer in the log; going on from its start, %d (input.offset_reset: earliest). "+
		"Records between were removed unread (retention shorter than the time the job was stopped or behind, or kafka-delete-records), "+
		"or the topic was created again", topic, partition, from, to),
		"topic", topic, "partition", partition, "from", from, "to", to, "skipped", skipped)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.skipped == nil {
		j.skipped = map[topicPart]uint64{}
	}
	j.skipped[topicPart{topic, partition}] += uint64(skipped)
}

// topicPart names one partition of a topic.
type topicPart struct {
	topic     string
	partition int
}

var descSkipped = prometheus.NewDesc("dedupstream_input_offsets_skipped_total",
	"Input offsets a reader skipped because they were no longer in the log when it got there (input.offset_reset: earliest): records removed unread by retention or DeleteRecords.",
	[]string{"topic", "partition"}, nil)

// collectSkipped sends the skipped-offset counters, one per partition
// that ever skipped.
func (j *Job) collectSkipped(ch chan<- prometheus.Metric) {
	j.mu.Lock()
	counts := maps.Clone(j.skipped)
	j.mu.Unlock()
	for _, tp := range slices.SortedFunc(maps.Keys(counts), func(a, b topicPart) int {
		return cmp.Or(strings.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	}) {
		ch <- prometheus.MustNewConstMetric(descSkipped, prometheus.CounterValue, float64(counts[tp]), tp.topic, fmt.Sprint(tp.partition))
	}
}

// inputFailed adds the way out to a reader's out-of-range error under
// input.offset_reset: fail; other errors pass unchanged.
func (j *Job) inputFailed(err error) error {
	var oor *fetch.OutOfRangeError
	if !errors.As(err, &oor) {
		return err
	}
	if rt := RepartitionTopic(j.cfg); oor.Topic == rt {
		return fmt.Errorf("%w: the repartition topic no longer holds records the route step wrote there and stage %d did not read "+
			"(the topic was deleted and created again, or its retention ran out while the job was stopped); their raw offsets are committed. "+
			"To route them again, stop the job, move group %q's offsets on the raw topics back to before that (kafka-consumer-groups.sh --group %s "+
			"--reset-offsets --to-datetime ... --execute), and group %q's offsets on %q to its start (--to-earliest); records routed again that "+
			"were emitted before are dropped as repeats. To accept the loss, move only group %q's offsets on %q", err, oor.Partition,
			j.cfg.Job.ID+"-route", j.cfg.Job.ID+"-route", j.cfg.Job.ID, rt, j.cfg.Job.ID, rt)
	}
	return fmt.Errorf("%w; input.offset_reset is fail: set it to earliest to go on from the log start, or move group %q's offset "+
		"(kafka-consumer-groups.sh --reset-offsets) and start again", err, j.cfg.Job.ID)
}
