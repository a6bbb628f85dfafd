package job

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// checkpointVersion is the first byte of every encoded checkpoint. A store
// holding a checkpoint of an unknown version is refused rather than guessed
// at. Version 2 is version 1 followed by the partition count; version 3
// adds the dedup settings, version 4 the output topic, version 5 the
// generation marks. Each checkpoint is written in the lowest version that
// holds it (no Marks: 4; no OutputTopic either: 3; no Dedup either: 2; no
// Partitions either: 1), so that every checkpoint keeps exactly one
// encoding, and a store without marks (processing time, a stage that has
// emitted nothing yet) stays readable by the builds before version 5.
//
// A build refuses versions above its own (the stage stops with "state
// DIR: job: corrupt checkpoint: version 5, this build reads versions 1 to
// 4" before it reads or writes anything): rolling back across a new
// version means removing the state directories, which the stages then
// restore from the output (docs/deploy.md, "Upgrading across a state
// format change").
const (
	checkpointVersion       = 1
	checkpointVersionN      = 2
	checkpointVersionDedup  = 3
	checkpointVersionOutput = 4
	checkpointVersionMarks  = 5
	maxCheckpointVersion    = checkpointVersionMarks
)

// maxDedupLen bounds Checkpoint.Dedup.
const maxDedupLen = 64 << 10

// maxTopicLen is Kafka's limit on topic names.
const maxTopicLen = 249

// maxCheckpointMarks bounds Checkpoint.Marks: a stage keeps the marks of
// its live generations, at most dedup.generations (<= 64) + 1.
const maxCheckpointMarks = 1 << 10

// Checkpoint is what a stage commits with the keys of a cycle: where its
// input stood and where its output stood when the Kafka transaction carrying
// that cycle committed.
//
// Encoding, version 1 (all integers unsigned varints unless noted):
//
//	byte    version (1)
//	uvarint number of inputs n
//	n times:
//	  uvarint len(topic), topic bytes
//	  uvarint partition
//	  uvarint input offset (the next offset to read)
//	uvarint output offset (one past the last record the stage wrote to its
//	        output partition; 0 before the first)
//
// Version 2 appends
//
//	uvarint partition count N the store is laid out for (>= 1)
//
// Version 3 appends instead
//
//	uvarint partition count N (0: unknown)
//	uvarint len(dedup) (>= 1), dedup bytes
//
// Version 4 appends to those
//
//	uvarint len(output topic) (1 to 249), output topic bytes
//
// and its dedup settings may be empty (length 0: unknown).
//
// Version 5 appends to those
//
//	uvarint the marks' generation span in milliseconds (>= 1)
//	uvarint number of marks m (1 to 1024)
//	m times:
//	  uvarint generation (greater than the previous mark's)
//	  uvarint output offset (not less than the previous mark's)
//
// and its output topic may be empty too (length 0: unknown, and then its
// marks are not used: they are offsets in a partition of no known topic).
//
// A reader must reject trailing bytes and overlong varints, so that every
// checkpoint has exactly one encoding and a later version cannot be misread
// as this one.
type Checkpoint struct {
	Inputs []InputOffset
	// Output is one past the last output record the stage knows of: the
	// offset the output read-back starts at in recovery.
	Output int64
	// Partitions is the partition count N of the job's topics when the
	// store was written: a key's partition, so the store that remembers
	// it, depends on it. 0 means unknown (a version 1 checkpoint).
	Partitions int
	// Dedup describes the dedup settings the store's keys were written
	// under (dedupSettings); "" means unknown (versions 1 and 2).
	Dedup string
	// OutputTopic is the output topic whose records the store holds the
	// keys of (Output is an offset in its partition); "" means unknown
	// (versions 1 to 3).
	OutputTopic string
	// Marks are the stage's generation marks (marks.go) when the
	// checkpoint was written, in generations MarksSpan milliseconds long,
	// oldest first: where in the output partition the stage clock entered
	// each live generation. The committed input offsets carry the same in
	// their metadata; this copy outlives offsets committed without them
	// (reset with the Kafka tooling, expired). nil means none (versions 1
	// to 4: processing time, no output yet, an older build).
	Marks     []GenMark
	MarksSpan int64
}

// InputOffset is the next offset to read of one raw topic-partition.
type InputOffset struct {
	Topic     string
	Partition int32
	Offset    int64
}

var errCheckpoint = errors.New("job: corrupt checkpoint")

// errCheckpointNewer matches a checkpoint of a newer build (errCheckpoint
// too): the store is sound, only this build cannot read it, so
// state.on_corruption leaves it alone (corrupt.go).
var errCheckpointNewer = fmt.Errorf("%w", errCheckpoint)

// Input returns the offset recorded for topic/partition, or -1.
func (c Checkpoint) Input(topic string, partition int32) int64 {
	for _, in := range c.Inputs {
		if in.Topic == topic && in.Partition == partition {
			return in.Offset
		}
	}
	return -1
}

// AppendEncode appends the encoding of c to dst.
func (c Checkpoint) AppendEncode(dst []byte) []byte {
	marks := len(c.Marks) > 0
	switch {
	case marks:
		dst = append(dst, checkpointVersionMarks)
	case c.OutputTopic != "":
		dst = append(dst, checkpointVersionOutput)
	case c.Dedup != "":
		dst = append(dst, checkpointVersionDedup)
	case c.Partitions > 0:
		dst = append(dst, checkpointVersionN)
	default:
		dst = append(dst, checkpointVersion)
	}
	dst = binary.AppendUvarint(dst, uint64(len(c.Inputs)))
	for _, in := range c.Inputs {
		dst = binary.AppendUvarint(dst, uint64(len(in.Topic)))
		dst = append(dst, in.Topic...)
		dst = binary.AppendUvarint(dst, uint64(in.Partition))
		dst = binary.AppendUvarint(dst, uint64(in.Offset))
	}
	dst = binary.AppendUvarint(dst, uint64(c.Output))
	if c.Partitions > 0 || c.Dedup != "" || c.OutputTopic != "" || marks {
		dst = binary.AppendUvarint(dst, uint64(c.Partitions))
	}
	if c.Dedup != "" || c.OutputTopic != "" || marks {
		dst = binary.AppendUvarint(dst, uint64(len(c.Dedup)))
		dst = append(dst, c.Dedup...)
	}
	if c.OutputTopic != "" || marks {
		dst = binary.AppendUvarint(dst, uint64(len(c.OutputTopic)))
		dst = append(dst, c.OutputTopic...)
	}
	if marks {
		dst = binary.AppendUvarint(dst, uint64(c.MarksSpan))
		dst = binary.AppendUvarint(dst, uint64(len(c.Marks)))
		for _, k := range c.Marks {
			dst = binary.AppendUvarint(dst, k.Gen)
			dst = binary.AppendUvarint(dst, uint64(k.Offset))
		}
	}
	return dst
}

// DecodeCheckpoint reads an encoded checkpoint. An empty input (a store that
// never committed) gives the zero Checkpoint and no error.
func DecodeCheckpoint(b []byte) (Checkpoint, error) {
	var c Checkpoint
	if len(b) == 0 {
		return c, nil
	}
	version := b[0]
	if version > maxCheckpointVersion {
		// Most likely a newer build's, after a rollback: say what to do.
		return c, fmt.Errorf("%w: version %d, this build reads versions %d to %d: a newer dedupstream wrote it; "+
			"remove the state directory (the stage then restores it from the output)", errCheckpointNewer, b[0], checkpointVersion, maxCheckpointVersion)
	}
	if version < checkpointVersion {
		return c, fmt.Errorf("%w: version %d, this build reads versions %d to %d", errCheckpoint, b[0], checkpointVersion, maxCheckpointVersion)
	}
	b = b[1:]
	next := func(limit uint64) (uint64, bool) {
		v, n := binary.Uvarint(b)
		// A final zero byte after a continuation is an overlong encoding:
		// refused, so that every checkpoint has exactly one encoding.
		if n <= 0 || v > limit || n > 1 && b[n-1] == 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	n, ok := next(1 << 16)
	if !ok {
		return Checkpoint{}, fmt.Errorf("%w: input count", errCheckpoint)
	}
	for i := range n {
		l, ok := next(maxTopicLen)
		if !ok || uint64(len(b)) < l {
			return Checkpoint{}, fmt.Errorf("%w: input %d: topic", errCheckpoint, i)
		}
		topic := string(b[:l])
		b = b[l:]
		p, ok1 := next(math.MaxInt32)
		off, ok2 := next(math.MaxInt64)
		if !ok1 || !ok2 {
			return Checkpoint{}, fmt.Errorf("%w: input %d: partition or offset", errCheckpoint, i)
		}
		c.Inputs = append(c.Inputs, InputOffset{Topic: topic, Partition: int32(p), Offset: int64(off)})
	}
	out, ok := next(math.MaxInt64)
	if !ok {
		return Checkpoint{}, fmt.Errorf("%w: output offset", errCheckpoint)
	}
	if version >= checkpointVersionN {
		n, ok := next(math.MaxInt32)
		if !ok || n == 0 && version == checkpointVersionN {
			return Checkpoint{}, fmt.Errorf("%w: partition count", errCheckpoint)
		}
		c.Partitions = int(n)
	}
	if version >= checkpointVersionDedup {
		l, ok := next(maxDedupLen)
		if !ok || l == 0 && version == checkpointVersionDedup || uint64(len(b)) < l {
			return Checkpoint{}, fmt.Errorf("%w: dedup settings", errCheckpoint)
		}
		c.Dedup = string(b[:l])
		b = b[l:]
	}
	if version >= checkpointVersionOutput {
		l, ok := next(maxTopicLen)
		if !ok || l == 0 && version == checkpointVersionOutput || uint64(len(b)) < l {
			return Checkpoint{}, fmt.Errorf("%w: output topic", errCheckpoint)
		}
		c.OutputTopic = string(b[:l])
		b = b[l:]
	}
	if version >= checkpointVersionMarks {
		span, ok1 := next(math.MaxInt64)
		n, ok2 := next(maxCheckpointMarks)
		if !ok1 || !ok2 || span == 0 || n == 0 {
			return Checkpoint{}, fmt.Errorf("%w: generation marks", errCheckpoint)
		}
		c.MarksSpan = int64(span)
		c.Marks = make([]GenMark, 0, n)
		for i := range n {
			gen, ok1 := next(math.MaxUint64)
			off, ok2 := next(math.MaxInt64)
			// Oldest first, as the stage keeps them (genMarks).
			if !ok1 || !ok2 || i > 0 && (gen <= c.Marks[i-1].Gen || int64(off) < c.Marks[i-1].Offset) {
				return Checkpoint{}, fmt.Errorf("%w: generation mark %d", errCheckpoint, i)
			}
			c.Marks = append(c.Marks, GenMark{Gen: gen, Offset: int64(off)})
		}
	}
	if len(b) != 0 {
		return Checkpoint{}, fmt.Errorf("%w: %d trailing bytes", errCheckpoint, len(b))
	}
	c.Output = int64(out)
	return c, nil
}
