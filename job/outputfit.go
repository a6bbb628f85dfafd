package job

import (
	"errors"
	"fmt"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/sink"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
)

// The output topic's max.message.bytes bounds every batch a stage writes
// there, and so every record. The producers were sized for the DLQ topic
// only: under an output topic that takes less than a batch (an operator
// lowered it, or a tool created it so), every commit failed with
// MESSAGE_TOO_LARGE, and the job stopped on each start at the same input
// (TestOutputMaxMessageBytes). So the start reads it as it reads the
// DLQ's (checkTopics): batches are sized to fit both topics
// (layout.maxBatchBytes), and a record that could not fit the output alone
// is dead-lettered like one over dedup.max_record_bytes, with reason
// record_too_large, before its key is looked up: it is never emitted, so
// its key is not remembered, and a later record of the key that fits is
// emitted. Migrate applies the same limit, so that it does not insert the
// keys of backlog records the stages will dead-letter.
//
// The limit is taken on the record's key, value and headers, as
// max_record_bytes is, below max.message.bytes by the batch header, the
// record's length fields and, when output.compression is set, the slack a
// codec may add to an incompressible value (64 bytes and 1/128): a record
// with many small headers could still exceed it by their length fields.
// Kafka's default max.message.bytes (1048588) takes records of about
// 1048480 bytes, a little less than the default max_record_bytes (1MiB):
// the limit is lowered quietly by such margins, and with a warning when
// the topic takes much less. A limit lowered while the job runs is read at
// the next start; until then a batch the topic refuses stops the job
// (exit 1), and the start after that fits it.

// outputRecordLimit is the largest record (key, value and headers) that
// fits an output topic of max.message.bytes limit, in batches compressed
// or not; 0 for no limit known.
func outputRecordLimit(limit int, compressed bool) int {
	if limit <= 0 {
		return 0
	}
	fits := limit - sink.SingleBatchSize(&sink.Record{}) - 32
	if compressed {
		fits -= dlqSlack(limit)
	}
	return max(fits, 1)
}

// fitOutput lowers the job's record limit (dedup.max_record_bytes) to what
// the output topic takes, with a warning when it takes much less.
func (j *Job) fitOutput(lay layout) {
	fits := outputRecordLimit(lay.outMaxBytes, j.codec != compress.None)
	configured := j.pc.MaxRecordBytes
	if fits == 0 || fits >= configured {
		return
	}
	j.pc.MaxRecordBytes = fits
	if fits >= configured-configured/64 {
		return
	}
	j.log.Warn("the output topic takes smaller records than dedup.max_record_bytes: larger records go to the DLQ as record_too_large",
		"topic", j.cfg.Output.Topic, "max.message.bytes", lay.outMaxBytes, "max_record_bytes", config.ByteSize(configured).String(), "limit", fits,
		"fix", fmt.Sprintf("raise the output topic's max.message.bytes to %d or more to emit them", configured+lay.outMaxBytes-fits))
}

// tooLarge explains a batch the brokers refused as too large: the limits
// it was sized for were read at start, so a topic's max.message.bytes was
// lowered since. "" for other errors.
func (l layout) tooLarge(err error) string {
	if !errors.Is(err, kafka.MessageSizeTooLarge) && !errors.Is(err, kafka.RecordListTooLarge) {
		return ""
	}
	return fmt.Sprintf(" (batches and records were sized at start for max.message.bytes %d of the output topic and %d of the DLQ topic: "+
		"one was lowered since; the next start reads them again)", l.outMaxBytes, l.dlqMaxBytes)
}
