package sink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
)

// Record is one record to produce.
type Record struct {
	// Key is the record key; nil writes a null key.
	Key []byte
	// Value is the record value; nil writes a null value (a tombstone).
	Value []byte
	// Headers are written in order; a nil header value is written as null.
	Headers []Header
	// Time is the record's create time, kept to the millisecond. The zero
	// value stands for the time the batch is encoded.
	Time time.Time
}

// Header is a record header: kafka-go's protocol.Header, the type package
// fetch and package partition use too, so headers pass from a fetched
// record to a produced one without conversion.
type Header = protocol.Header

// BatchHeader carries the batch-level fields of a record batch v2 that the
// producer chooses.
type BatchHeader struct {
	// ProducerID and ProducerEpoch identify the producer; -1 and -1 for a
	// plain (non-idempotent) batch.
	ProducerID    int64
	ProducerEpoch int16
	// BaseSequence is the sequence number of the first record; -1 for a
	// plain batch. Record i has sequence BaseSequence+i.
	BaseSequence int32
	// Transactional sets attribute bit 0x10: the batch belongs to a
	// transaction and stays invisible to read_committed consumers until the
	// transaction commits.
	Transactional bool
	// Compression compresses the records section with one of the codecs
	// kafka-go ships. The default is no compression.
	Compression compress.Compression
}

// Layout of a record batch v2 (all integers big-endian):
//
//	offset  size  field
//	 0      8     base offset (0 in produce requests)
//	 8      4     batch length: bytes after this field
//	12      4     partition leader epoch (-1 from clients)
//	16      1     magic (2)
//	17      4     CRC-32C of bytes 21..end
//	21      2     attributes
//	23      4     last offset delta
//	27      8     first timestamp
//	35      8     max timestamp
//	43      8     producer id
//	51      2     producer epoch
//	53      4     base sequence
//	57      4     record count
//	61      ...   records, compressed as a whole when attributes&7 != 0
const (
	batchHeaderSize = 61
	offLength       = 8
	offCRC          = 17
	offAttributes   = 21

	attrTransactional = 0x10
	attrControl       = 0x20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	errNoRecords      = errors.New("sink: batch has no records")
	errTooManyRecords = errors.New("sink: batch has more than 2^31-1 records")
	errBatchTooLarge  = errors.New("sink: batch larger than 2 GiB")
	errUnknownCodec   = errors.New("sink: unknown compression codec")
)

// Encoder encodes record batches v2. It keeps scratch space for compression
// between calls, so one Encoder per producer avoids allocating per batch.
// The zero value is ready to use. An Encoder is not safe for concurrent use.
type Encoder struct {
	raw []byte       // uncompressed records, when compressing
	out appendWriter // sink for the compressor
}

// AppendBatch appends one record batch v2 holding recs to dst and returns the
// extended slice. It does not allocate when dst has room and the batch is
// not compressed. The control attribute is never set: clients may not write
// control batches.
func (e *Encoder) AppendBatch(dst []byte, h BatchHeader, recs []Record) ([]byte, error) {
	if len(recs) == 0 {
		return dst, errNoRecords
	}
	if len(recs) > math.MaxInt32 {
		return dst, errTooManyRecords
	}
	var codec compress.Codec
	if h.Compression != compress.None {
		if codec = h.Compression.Codec(); codec == nil {
			return dst, fmt.Errorf("%w: %d", errUnknownCodec, h.Compression)
		}
	}

	firstTS, maxTS, now := int64(0), int64(math.MinInt64), int64(0)
	for i := range recs {
		ts := recordMillis(&recs[i], &now)
		if i == 0 {
			firstTS = ts
		}
		maxTS = max(maxTS, ts)
	}

	attrs := int16(h.Compression) & 0x07
	if h.Transactional {
		attrs |= attrTransactional
	}

	start := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, 0)                   // base offset
	dst = binary.BigEndian.AppendUint32(dst, 0)                   // length, patched below
	dst = binary.BigEndian.AppendUint32(dst, math.MaxUint32)      // partition leader epoch -1
	dst = append(dst, 2)                                          // magic
	dst = binary.BigEndian.AppendUint32(dst, 0)                   // CRC, patched below
	dst = binary.BigEndian.AppendUint16(dst, uint16(attrs))       // attributes
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(recs)-1)) // last offset delta
	dst = binary.BigEndian.AppendUint64(dst, uint64(firstTS))
	dst = binary.BigEndian.AppendUint64(dst, uint64(maxTS))
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.ProducerID))
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.ProducerEpoch))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.BaseSequence))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(recs)))

	if codec == nil {
		dst = appendRecords(dst, recs, firstTS, now)
	} else {
		e.raw = appendRecords(e.raw[:0], recs, firstTS, now)
		var err error
		if dst, err = e.compress(dst, codec); err != nil {
			return dst[:start], err
		}
	}

	n := len(dst) - start - offLength - 4
	if n > math.MaxInt32 {
		return dst[:start], errBatchTooLarge
	}
	b := dst[start:]
	binary.BigEndian.PutUint32(b[offLength:], uint32(n))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return dst, nil
}

func (e *Encoder) compress(dst []byte, codec compress.Codec) ([]byte, error) {
	e.out.b = dst
	w := codec.NewWriter(&e.out)
	_, err := w.Write(e.raw)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	dst, e.out.b = e.out.b, nil
	if err != nil {
		return dst, fmt.Errorf("sink: compress with %s: %w", codec.Name(), err)
	}
	return dst, nil
}

// appendWriter is an io.Writer appending to a slice the Encoder owns, so the
// compressor writes straight into the output buffer.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// recordMillis returns the record's timestamp in milliseconds; a zero Time
// takes the encoding time, read once per batch into *now.
func recordMillis(r *Record, now *int64) int64 {
	if !r.Time.IsZero() {
		return r.Time.UnixMilli()
	}
	if *now == 0 {
		*now = time.Now().UnixMilli()
	}
	return *now
}

// appendRecords appends the records section: per record a varint length,
// then attributes (0), timestamp delta, offset delta, key, value, headers.
// Integers inside records are zigzag varints, as encoding/binary writes them.
func appendRecords(dst []byte, recs []Record, firstTS, now int64) []byte {
	for i := range recs {
		r := &recs[i]
		tsDelta := r.Time.UnixMilli() - firstTS
		if r.Time.IsZero() {
			tsDelta = now - firstTS
		}
		dst = binary.AppendVarint(dst, int64(recordBodySize(r, tsDelta, i)))
		dst = append(dst, 0) // record attributes, unused
		dst = binary.AppendVarint(dst, tsDelta)
		dst = binary.AppendVarint(dst, int64(i))
		dst = appendVarBytes(dst, r.Key)
		dst = appendVarBytes(dst, r.Value)
		dst = binary.AppendVarint(dst, int64(len(r.Headers)))
		for j := range r.Headers {
			hd := &r.Headers[j]
			dst = binary.AppendVarint(dst, int64(len(hd.Key)))
			dst = append(dst, hd.Key...)
			dst = appendVarBytes(dst, hd.Value)
		}
	}
	return dst
}

func appendVarBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

// recordBodySize is the size of a record after its length prefix.
func recordBodySize(r *Record, tsDelta int64, offsetDelta int) int {
	n := 1 + varintSize(tsDelta) + varintSize(int64(offsetDelta)) +
		varBytesSize(r.Key) + varBytesSize(r.Value) + varintSize(int64(len(r.Headers)))
	for j := range r.Headers {
		hd := &r.Headers[j]
		n += varintSize(int64(len(hd.Key))) + len(hd.Key) + varBytesSize(hd.Value)
	}
	return n
}

// recordSizeBound is an upper bound of a record's encoded size inside a
// batch, used to split large produce calls into batches.
func recordSizeBound(r *Record) int {
	n := recordBodySize(r, math.MaxInt64, math.MaxInt32)
	return n + varintSize(int64(n))
}

func varBytesSize(b []byte) int {
	if b == nil {
		return 1
	}
	return varintSize(int64(len(b))) + len(b)
}

// varintSize is the length of x as a zigzag varint.
func varintSize(x int64) int {
	u := uint64(x<<1) ^ uint64(x>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
