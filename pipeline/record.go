package pipeline

import "github.com/dedupstream/dedupstream/partition"

// Record is one input record as the stage sees it. Key, Value and Headers
// may alias a fetch buffer: the stage reads them during Process and keeps
// nothing.
type Record struct {
	partition.Record
	// TimestampMs is the record timestamp in Unix milliseconds.
	TimestampMs int64
}

// size is the record's size as the broker would count it (key, value and
// headers; record framing left out).
func (r *Record) size() int {
	n := len(r.Key) + len(r.Value)
	for i := range r.Headers {
		n += len(r.Headers[i].Key) + len(r.Headers[i].Value)
	}
	return n
}

// Verdict is what happens to one record.
type Verdict uint8

const (
	// Emit writes the record to the output topic.
	Emit Verdict = iota
	// DropBatch drops a repeat of a key emitted in the open commit cycle.
	DropBatch
	// DropHistory drops a repeat of a key committed earlier in the window.
	DropHistory
	// DeadLetter sends the record to the DLQ topic with Decision.Reason.
	DeadLetter
)

func (v Verdict) String() string {
	switch v {
	case Emit:
		return "emit"
	case DropBatch:
		return "batch"
	case DropHistory:
		return "history"
	case DeadLetter:
		return "dlq"
	}
	return "unknown"
}

// Decision is the verdict on one record.
type Decision struct {
	Verdict Verdict
	// Reason says why a record was dead-lettered, in the stable snake_case
	// spelling written to the DLQ reason header; empty otherwise.
	Reason string
}

// GenStart says that decision Index of a Process call is its first Emit in
// generation Gen: the emits before it were decided in an older generation
// (or Index is the call's first Emit), those from it on in Gen or newer
// until the next GenStart.
type GenStart struct {
	Index int
	Gen   uint64
}

// Counts are the per-batch counters of Process, added up by the caller.
type Counts struct {
	In             uint64 // records processed
	Emitted        uint64 // records to write to the output
	DroppedBatch   uint64 // repeats inside the open commit cycle
	DroppedHistory uint64 // repeats of committed keys
	DeadLettered   uint64 // records to the DLQ
	BloomNegative  uint64 // Bloom said "definitely new": no store read
	StoreReads     uint64 // Bloom said "maybe": one store lookup each
	FalsePositives uint64 // store reads that found nothing
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.In += o.In
	c.Emitted += o.Emitted
	c.DroppedBatch += o.DroppedBatch
	c.DroppedHistory += o.DroppedHistory
	c.DeadLettered += o.DeadLettered
	c.BloomNegative += o.BloomNegative
	c.StoreReads += o.StoreReads
	c.FalsePositives += o.FalsePositives
}

// ReasonRecordTooLarge is the DLQ reason of a record over MaxRecordBytes.
const ReasonRecordTooLarge = "record_too_large"
