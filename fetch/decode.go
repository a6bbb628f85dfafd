package fetch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"time"

	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
)

// This file decodes Fetch responses (v4-v11, the versions kafka-go's protocol
// package negotiates) straight from the response frame, without copying
// record data and without allocating per record, and applies the
// read_committed rules: records of aborted transactions and control batches
// are dropped.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks a response or record batch that cannot be decoded.
var errCorrupt = errors.New("fetch: corrupt response")

// cursor reads big-endian fields from a byte slice. The first read past the
// end sets err and every later read returns zero values.
type cursor struct {
	b   []byte
	off int
	err error
}

func (c *cursor) fail() {
	if c.err == nil {
		c.err = fmt.Errorf("%w: truncated at byte %d of %d", errCorrupt, c.off, len(c.b))
	}
	c.off = len(c.b)
}

func (c *cursor) next(n int) []byte {
	if n < 0 || len(c.b)-c.off < n {
		c.fail()
		return nil
	}
	s := c.b[c.off : c.off+n : c.off+n]
	c.off += n
	return s
}

func (c *cursor) int16() int16 {
	if s := c.next(2); s != nil {
		return int16(binary.BigEndian.Uint16(s))
	}
	return 0
}

func (c *cursor) int32() int32 {
	if s := c.next(4); s != nil {
		return int32(binary.BigEndian.Uint32(s))
	}
	return 0
}

func (c *cursor) int64() int64 {
	if s := c.next(8); s != nil {
		return int64(binary.BigEndian.Uint64(s))
	}
	return 0
}

// varint reads a zigzag varint, the encoding of record fields.
func (c *cursor) varint() int64 {
	if c.off < len(c.b) && c.b[c.off] < 0x80 { // one byte: the common case
		u := int64(c.b[c.off])
		c.off++
		return u>>1 ^ -(u & 1)
	}
	v, n := binary.Varint(c.b[c.off:])
	if n <= 0 {
		c.fail()
		return 0
	}
	c.off += n
	return v
}

// varbytes reads a varint length and that many bytes; length -1 is nil.
func (c *cursor) varbytes() []byte {
	n := c.varint()
	if n < 0 {
		if n != -1 {
			c.fail()
		}
		return nil
	}
	if n > int64(len(c.b)-c.off) {
		c.fail()
		return nil
	}
	return c.next(int(n))
}

// abortedTxn is one entry of a fetch response's AbortedTransactions.
type abortedTxn struct {
	producerID  int64
	firstOffset int64
}

// partitionData is the fetched partition of a response.
type partitionData struct {
	errorCode        int16
	highWatermark    int64
	lastStableOffset int64
	logStartOffset   int64
	aborted          []abortedTxn
	records          []byte
}

// decoder holds the reusable state of decoding; one per Fetcher.
type decoder struct {
	aborted []abortedTxn
	open    []int64 // producer ids whose aborted transaction is in progress
	intern  map[string]string
	zsrc    bytes.Reader

	// zin and zout are the compressed and inflated bytes of every batch
	// decompressed so far: their ratio sizes the decompression buffer for
	// the compressed bytes a response still holds (zleft), see reserve.
	zin, zout int64
	zleft     int
}

// maxInterned bounds the header-key intern table: past it header keys are
// allocated per record.
const maxInterned = 1024

// parseResponse finds topic/partition in the body of a Fetch response of the
// given version (the frame after the size and correlation id).
func (d *decoder) parseResponse(body []byte, version int16, topic string, partition int32) (partitionData, bool, error) {
	c := cursor{b: body}
	var p partitionData
	found := false
	c.int32() // throttle time (v1+)
	if version >= 7 {
		if code := c.int16(); code != 0 {
			return p, false, partitionError(code)
		}
		c.int32() // session id
	}
	for nt := c.int32(); nt > 0 && c.err == nil; nt-- {
		name := c.next(int(c.int16()))
		match := string(name) == topic
		for np := c.int32(); np > 0 && c.err == nil; np-- {
			var q partitionData
			id := c.int32()
			q.errorCode = c.int16()
			q.highWatermark = c.int64()
			q.lastStableOffset = c.int64()
			if version >= 5 {
				q.logStartOffset = c.int64()
			}
			na := c.int32()
			if na > int32(len(c.b)-c.off)/16 {
				c.fail()
				break
			}
			ours := match && id == partition && !found
			if ours {
				d.aborted = d.aborted[:0]
			}
			for ; na > 0; na-- {
				t := abortedTxn{producerID: c.int64(), firstOffset: c.int64()}
				if ours {
					d.aborted = append(d.aborted, t)
				}
			}
			if version >= 11 {
				c.int32() // preferred read replica
			}
			if n := c.int32(); n > 0 {
				q.records = c.next(int(n))
			}
			if ours && c.err == nil {
				q.aborted = d.aborted
				p, found = q, true
			}
		}
	}
	if c.err != nil {
		return partitionData{}, false, c.err
	}
	return p, found, nil
}

// Offsets of the fields of a v2 record batch header.
const (
	batchLengthEnd   = 12 // base offset (8) + batch length (4)
	batchMagic       = 16
	batchCRC         = 17
	batchAttributes  = 21
	batchLastDelta   = 23
	batchFirstTime   = 27
	batchMaxTime     = 35
	batchProducerID  = 43
	batchRecordCount = 57
	batchHeaderSize  = 61

	attrCompression   = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

// decodeRecords appends to b the records of p at or after offset pos that a
// read_committed consumer must see, and returns the next fetch position.
func (d *decoder) decodeRecords(b *Batch, p *partitionData, pos int64) (int64, error) {
	next := pos
	// Kafka sends AbortedTransactions ordered by first offset; make sure.
	slices.SortFunc(p.aborted, func(a, b abortedTxn) int {
		switch {
		case a.firstOffset < b.firstOffset:
			return -1
		case a.firstOffset > b.firstOffset:
			return 1
		}
		return 0
	})
	aborted := p.aborted
	d.open = d.open[:0]
	d.reserve(b, p.records)

	rs := p.records
	end := int64(-1) // one past the previous batch
	for len(rs) >= batchLengthEnd {
		baseOffset := int64(binary.BigEndian.Uint64(rs))
		length := int64(int32(binary.BigEndian.Uint32(rs[8:])))
		if length < batchHeaderSize-batchLengthEnd {
			return next, fmt.Errorf("%w: record batch at offset %d: length %d", errCorrupt, baseOffset, length)
		}
		if int64(len(rs)) < batchLengthEnd+length {
			// A partial batch at the end: the broker cut the response at
			// MaxBytes. The next fetch starts at it.
			if next == pos {
				return next, fmt.Errorf("%w: record batch at offset %d needs %d bytes, response holds %d",
					errCorrupt, baseOffset, batchLengthEnd+length, len(rs))
			}
			break
		}
		raw := rs[:batchLengthEnd+length]
		rs = rs[len(raw):]

		if magic := raw[batchMagic]; magic != 2 {
			return next, fmt.Errorf("fetch: record batch at offset %d: unsupported message format v%d (only v2, Kafka >= 0.11)", baseOffset, magic)
		}
		if want, got := binary.BigEndian.Uint32(raw[batchCRC:]), crc32.Checksum(raw[batchAttributes:], castagnoli); want != got {
			return next, fmt.Errorf("%w: record batch at offset %d: crc %08x, computed %08x", errCorrupt, baseOffset, want, got)
		}
		attrs := binary.BigEndian.Uint16(raw[batchAttributes:])
		lastOffset := baseOffset + int64(int32(binary.BigEndian.Uint32(raw[batchLastDelta:])))
		producerID := int64(binary.BigEndian.Uint64(raw[batchProducerID:]))
		count := int32(binary.BigEndian.Uint32(raw[batchRecordCount:]))
		if baseOffset < end || lastOffset < baseOffset {
			return next, fmt.Errorf("%w: record batch at offset %d: offsets overlap or run backwards", errCorrupt, baseOffset)
		}
		end = lastOffset + 1
		next = max(next, end)

		// Transactions whose first record is at or before this batch have
		// started: from here on their producer's batches are aborted, up
		// to the producer's abort marker.
		for len(aborted) > 0 && aborted[0].firstOffset <= lastOffset {
			if !slices.Contains(d.open, aborted[0].producerID) {
				d.open = append(d.open, aborted[0].producerID)
			}
			aborted = aborted[1:]
		}

		if attrs&attrControl != 0 {
			b.Markers += int(count)
			if d.isAbortMarker(raw, attrs) {
				if i := slices.Index(d.open, producerID); i >= 0 {
					d.open = slices.Delete(d.open, i, i+1)
				}
			}
			continue
		}
		if attrs&attrTransactional != 0 && slices.Contains(d.open, producerID) {
			b.Aborted += int(count)
			continue
		}
		if lastOffset < pos {
			continue // delivered by an earlier fetch
		}
		if err := d.appendRecords(b, raw, attrs, baseOffset, lastOffset, count, pos); err != nil {
			return next, err
		}
	}
	return next, nil
}

// reserve makes room in b for the data records of response records rs
// before any is decoded: Records gets room for the batches' record counts
// and, once a compression ratio has been seen, the decompression buffer
// room for their compressed bytes at that ratio. Without it both grew batch
// by batch, copying what they held at every step: a fetcher's first
// responses (all of a short run's) spent more CPU growing buffers than
// decoding (37 % of the copy job's CPU in a 400k-record e2e run). Buffers
// are kept across fetches, so a steady fetch loop allocates nothing.
//
// The headers read here are not yet checked (their CRC is checked when the
// batch is decoded): the record counts are trusted up to one record per
// minRecordBytes of the response, what uncompressed records can hold at
// most, so a corrupt count cannot reserve more than the smallest records
// would fill; a larger need (tiny compressed records) is met by growth as
// before, after the CRC.
func (d *decoder) reserve(b *Batch, rs []byte) {
	maxRecords := len(rs) / minRecordBytes
	records, zbytes := 0, 0
	for len(rs) >= batchHeaderSize {
		length := int(int32(binary.BigEndian.Uint32(rs[8:])))
		if length < batchHeaderSize-batchLengthEnd || len(rs) < batchLengthEnd+length {
			break // corrupt, or the partial batch at the end
		}
		attrs := binary.BigEndian.Uint16(rs[batchAttributes:])
		if attrs&attrControl == 0 {
			count := int(int32(binary.BigEndian.Uint32(rs[batchRecordCount:])))
			records += max(0, min(count, length))
			if attrs&attrCompression != 0 {
				zbytes += length - (batchHeaderSize - batchLengthEnd)
			}
		}
		rs = rs[batchLengthEnd+length:]
	}
	records = min(records, maxRecords)
	if free := cap(b.Records) - len(b.Records); free < records {
		b.Records = slices.Grow(b.Records, records)
	}
	d.zleft = zbytes
	if want := d.inflated(zbytes); cap(b.dbuf)-len(b.dbuf) < want {
		b.dbuf = slices.Grow(b.dbuf, want)
	}
}

// minRecordBytes is the smallest encoded record: length, attributes,
// timestamp delta, offset delta, key length, value length and header count
// of one byte each.
const minRecordBytes = 7

// maxReserveRatio bounds the ratio room is reserved at: data that once
// compressed a thousandfold (a batch of zeros) must not make the next
// response reserve gigabytes its records may never fill; past it the
// buffer grows with the data.
const maxReserveRatio = 16

// inflated estimates the size of zbytes of compressed records at the ratio
// seen so far (at most maxReserveRatio), with an eighth to spare; 0 before
// any was seen.
func (d *decoder) inflated(zbytes int) int {
	if d.zin == 0 || zbytes <= 0 {
		return 0
	}
	return int(min(int64(zbytes)*d.zout/d.zin, int64(zbytes)*maxReserveRatio) * 9 / 8)
}

// isAbortMarker reports whether the control batch raw holds an abort marker.
// A control record's key is version (int16) and type (int16): 0 abort,
// 1 commit.
func (d *decoder) isAbortMarker(raw []byte, attrs uint16) bool {
	data := raw[batchHeaderSize:]
	if attrs&attrCompression != 0 {
		return false // brokers never compress markers
	}
	c := cursor{b: data}
	c.varint() // length
	c.next(1)  // attributes
	c.varint() // timestamp delta
	c.varint() // offset delta
	key := c.varbytes()
	return c.err == nil && len(key) >= 4 && binary.BigEndian.Uint16(key[2:]) == 0
}

// appendRecords decodes the records of one data batch into b.
func (d *decoder) appendRecords(b *Batch, raw []byte, attrs uint16, baseOffset, lastOffset int64, count int32, pos int64) error {
	data := raw[batchHeaderSize:]
	if codec := compress.Compression(attrs & attrCompression); codec != compress.None {
		var err error
		if data, err = d.decompress(b, codec, data); err != nil {
			return fmt.Errorf("fetch: record batch at offset %d: %s: %w", baseOffset, codec, err)
		}
	}
	firstTime := int64(binary.BigEndian.Uint64(raw[batchFirstTime:]))
	logAppend := attrs&attrLogAppendTime != 0
	maxTime := int64(binary.BigEndian.Uint64(raw[batchMaxTime:]))

	if free := cap(b.Records) - len(b.Records); free < int(count) {
		// Room for the whole batch, at least doubling: append's growth
		// of large slices (1.25x) would copy the records many times.
		b.Records = slices.Grow(b.Records, max(int(count), cap(b.Records)))
	}
	c := cursor{b: data}
	prev := baseOffset - 1
	for i := int32(0); i < count; i++ {
		length := c.varint()
		if c.err != nil || length < 0 || length > int64(len(data)-c.off) {
			return fmt.Errorf("%w: record %d of batch at offset %d: length %d", errCorrupt, i, baseOffset, length)
		}
		end := c.off + int(length)
		c.next(1) // attributes, unused
		timeDelta := c.varint()
		offset := baseOffset + c.varint()
		key := c.varbytes()
		value := c.varbytes()
		nh := c.varint()
		if nh < 0 || nh > int64(end-c.off)/2 {
			c.fail()
		}
		h0 := len(b.hdrs)
		for j := int64(0); j < nh && c.err == nil; j++ {
			hk := c.varbytes()
			hv := c.varbytes()
			b.hdrs = append(b.hdrs, protocol.Header{Key: d.internKey(hk), Value: hv})
		}
		if c.err != nil || c.off != end || offset <= prev || offset > lastOffset {
			return fmt.Errorf("%w: record %d of batch at offset %d", errCorrupt, i, baseOffset)
		}
		prev = offset
		if offset < pos {
			b.hdrs = b.hdrs[:h0]
			continue
		}
		ts := firstTime + timeDelta
		if logAppend {
			ts = maxTime
			b.AppendTime = true
		}
		r := Record{Offset: offset, Key: key, Value: value, Timestamp: time.UnixMilli(ts)}
		if len(b.hdrs) > h0 {
			r.Headers = b.hdrs[h0:len(b.hdrs):len(b.hdrs)]
		}
		b.Records = append(b.Records, r)
	}
	return nil
}

// internKey returns header key k as a string without allocating for keys
// seen before.
func (d *decoder) internKey(k []byte) string {
	if s, ok := d.intern[string(k)]; ok {
		return s
	}
	s := string(k)
	if d.intern == nil {
		d.intern = make(map[string]string)
	}
	if len(d.intern) < maxInterned {
		d.intern[s] = s
	}
	return s
}

// decompress inflates one batch's records onto the end of b.dbuf and returns
// them.
func (d *decoder) decompress(b *Batch, codec compress.Compression, data []byte) ([]byte, error) {
	cc := codec.Codec()
	if cc == nil {
		return nil, fmt.Errorf("unsupported compression codec %d", codec)
	}
	d.zsrc.Reset(data)
	zr := cc.NewReader(&d.zsrc)
	defer zr.Close()
	start := len(b.dbuf)
	buf := b.dbuf
	for {
		if len(buf) == cap(buf) {
			// Room for the rest of the response at the ratio seen so
			// far (the first batch ever: a guess), and at least a
			// quarter more, so that a ratio that keeps rising costs
			// few copies.
			buf = slices.Grow(buf, max(d.inflated(d.zleft), 4*len(data), 64<<10, cap(buf)/4))
		}
		n, err := zr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	b.dbuf = buf
	d.zin += int64(len(data))
	d.zout += int64(len(buf) - start)
	if d.zin > 1<<30 { // let the ratio follow the data
		d.zin, d.zout = d.zin/2, d.zout/2
	}
	d.zleft -= len(data)
	return buf[start:len(buf):len(buf)], nil
}
