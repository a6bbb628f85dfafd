package fetch

import (
	"time"

	"github.com/segmentio/kafka-go/protocol"
)

// Record is one committed (or non-transactional) record.
//
// Key, Value and the header values alias the Batch's buffers: they stay valid
// until the Batch is passed to Fetch (or ReadRange) again. Copy what must
// outlive that. Header keys are ordinary strings and may be kept.
type Record struct {
	Offset int64
	// Key is nil for a record without key and empty (non-nil) for a
	// zero-length key; the same holds for Value (nil is a tombstone).
	Key     []byte
	Value   []byte
	Headers []protocol.Header
	// Timestamp is the record's create time, or the broker's append time
	// when the topic uses LogAppendTime. Millisecond precision.
	Timestamp time.Time
}

// Batch is the result of one Fetch. It is owned by the caller and meant to be
// reused: Fetch resets it and grows its buffers only when a response is
// larger than any before, so a steady-state fetch loop allocates nothing per
// record.
//
// Two Batches may be used alternately (process one while fetching into the
// other): each owns its buffers.
type Batch struct {
	Topic     string
	Partition int
	// Records are the committed records in offset order, starting at or
	// after the position Fetch was called at. It may be empty: after MaxWait
	// with no new data, or when every record fetched was aborted or a
	// transaction marker.
	Records []Record
	// HighWatermark is the partition's high watermark (the offset of the next
	// record to be replicated) when the broker answered.
	HighWatermark int64
	// LastStableOffset is the offset below which every transaction is
	// decided; read_committed fetching never goes past it. LastStableOffset
	// minus NextOffset is the consumer lag.
	LastStableOffset int64
	// LogStartOffset is the first offset still in the log.
	LogStartOffset int64
	// NextOffset is the fetcher's position after this batch: one past the
	// last offset it covered, including dropped aborted records and markers.
	NextOffset int64
	// Aborted counts records dropped because their transaction aborted.
	Aborted int
	// Markers counts transaction markers (control records) dropped.
	Markers int
	// AppendTime is set when a record of the batch carries the broker's
	// append time (a LogAppendTime topic) instead of its create time.
	AppendTime bool

	buf  []byte            // raw fetch response frame
	dbuf []byte            // decompressed record data
	hdrs []protocol.Header // backing array of Records[i].Headers
}

// reset empties b for a new fetch, keeping its buffers.
func (b *Batch) reset(topic string, partition int) {
	clear(b.Records) // drop references into old buffers
	b.Records = b.Records[:0]
	b.Topic = topic
	b.Partition = partition
	b.HighWatermark, b.LastStableOffset, b.LogStartOffset, b.NextOffset = -1, -1, -1, -1
	b.Aborted, b.Markers, b.AppendTime = 0, 0, false
	b.dbuf = b.dbuf[:0]
	clear(b.hdrs)
	b.hdrs = b.hdrs[:0]
}

// trimFrom drops the records at or after offset end.
func (b *Batch) trimFrom(end int64) {
	n := len(b.Records)
	for n > 0 && b.Records[n-1].Offset >= end {
		n--
	}
	clear(b.Records[n:])
	b.Records = b.Records[:n]
}
