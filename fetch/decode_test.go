package fetch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"

	"github.com/segmentio/kafka-go/compress"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The tests here drive the decoder with responses encoded by franz-go's kmsg,
// an encoder independent of the code under test.

// tbatch describes one record batch to encode.
type tbatch struct {
	base      int64
	pid       int64
	txn       bool
	control   bool // a marker; commit says which
	commit    bool
	n         int // data records; offsets base..base+n-1
	codec     compress.Compression
	logAppend bool
}

func (tb tbatch) last() int64 {
	if tb.control {
		return tb.base
	}
	return tb.base + int64(tb.n) - 1
}

func encodeBatch(t testing.TB, tb tbatch) []byte {
	var recs []byte
	n := tb.n
	if tb.control {
		n = 1
	}
	for i := 0; i < n; i++ {
		r := kmsg.Record{TimestampDelta64: int64(i), OffsetDelta: int32(i)}
		if tb.control {
			r.Key = binary.BigEndian.AppendUint16([]byte{0, 0}, map[bool]uint16{false: 0, true: 1}[tb.commit])
			r.Value = []byte{0, 0, 0, 0, 0, 7}
		} else {
			r.Key = fmt.Appendf(nil, "k%d", tb.base+int64(i))
			r.Value = fmt.Appendf(nil, "v%d-pid%d", tb.base+int64(i), tb.pid)
			if i%2 == 1 {
				r.Headers = []kmsg.Header{{Key: "h", Value: []byte("x")}, {Key: "nil"}}
			}
		}
		size := len(r.AppendTo(nil)) - 1
		r.Length = int32(size)
		recs = r.AppendTo(recs)
	}
	attrs := int16(tb.codec)
	if tb.logAppend {
		attrs |= attrLogAppendTime
	}
	if tb.txn || tb.control {
		attrs |= attrTransactional
	}
	if tb.control {
		attrs |= attrControl
	}
	if tb.codec != compress.None {
		var buf bytes.Buffer
		w := tb.codec.Codec().NewWriter(&buf)
		if _, err := w.Write(recs); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		recs = buf.Bytes()
	}
	pid := tb.pid
	if !tb.txn && !tb.control {
		pid = -1
	}
	b := kmsg.RecordBatch{
		FirstOffset:     tb.base,
		Length:          int32(batchHeaderSize - batchLengthEnd + len(recs)),
		Magic:           2,
		Attributes:      attrs,
		LastOffsetDelta: int32(n - 1),
		FirstTimestamp:  1_700_000_000_000,
		MaxTimestamp:    1_700_000_000_000 + int64(n-1) + 1000,
		ProducerID:      pid,
		FirstSequence:   -1,
		NumRecords:      int32(n),
		Records:         recs,
	}
	raw := b.AppendTo(nil)
	b.CRC = int32(crc32.Checksum(raw[batchAttributes:], crc32.MakeTable(crc32.Castagnoli)))
	return b.AppendTo(nil)
}

// encodeResponse encodes a v11 fetch response body (after the correlation
// id) for topic "t" partition 0 holding batches.
func encodeResponse(t testing.TB, aborted []abortedTxn, batches ...[]byte) []byte {
	resp := kmsg.NewFetchResponse()
	resp.Version = 11
	other := kmsg.NewFetchResponseTopic()
	other.Topic = "other"
	op := kmsg.NewFetchResponseTopicPartition()
	op.RecordBatches = []byte("garbage that must not be decoded")
	other.Partitions = append(other.Partitions, op)
	rt := kmsg.NewFetchResponseTopic()
	rt.Topic = "t"
	rp := kmsg.NewFetchResponseTopicPartition()
	rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = 1000, 900, 3
	for _, a := range aborted {
		at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
		at.ProducerID, at.FirstOffset = a.producerID, a.firstOffset
		rp.AbortedTransactions = append(rp.AbortedTransactions, at)
	}
	rp.RecordBatches = slices.Concat(batches...)
	rt.Partitions = append(rt.Partitions, rp)
	resp.Topics = append(resp.Topics, other, rt)
	return resp.AppendTo(nil)
}

// decodeAll runs the decoder on body from position pos.
func decodeAll(t testing.TB, body []byte, pos int64) (*Batch, int64, error) {
	var d decoder
	b := new(Batch)
	b.reset("t", 0)
	p, found, err := d.parseResponse(body, 11, "t", 0)
	if err != nil {
		return b, pos, err
	}
	if !found {
		t.Fatal("partition not found")
	}
	if p.highWatermark != 1000 || p.lastStableOffset != 900 || p.logStartOffset != 3 {
		t.Fatalf("offsets %d/%d/%d", p.highWatermark, p.lastStableOffset, p.logStartOffset)
	}
	next, err := d.decodeRecords(b, &p, pos)
	return b, next, err
}

func offsets(b *Batch) []int64 {
	var o []int64
	for _, r := range b.Records {
		o = append(o, r.Offset)
	}
	return o
}

func span(from, to int64) []int64 {
	var o []int64
	for i := from; i <= to; i++ {
		o = append(o, i)
	}
	return o
}

func TestDecodeReadCommitted(t *testing.T) {
	// Producer 7 aborts a transaction that interleaves with producer 8's
	// committed one and with non-transactional writes; producer 7 then
	// commits a later transaction.
	batches := []tbatch{
		{base: 0, n: 2},                    // 0-1 plain
		{base: 2, pid: 7, txn: true, n: 3}, // 2-4 aborted
		{base: 5, pid: 8, txn: true, n: 2}, // 5-6 committed
		{base: 7, n: 1},                    // 7 plain
		{base: 8, pid: 7, txn: true, n: 2}, // 8-9 aborted
		{base: 10, pid: 8, control: true, commit: true},
		{base: 11, pid: 7, control: true},   // abort marker
		{base: 12, pid: 7, txn: true, n: 2}, // 12-13 committed
		{base: 14, pid: 7, control: true, commit: true},
		{base: 15, pid: 9, txn: true, n: 1}, // 15 aborted, pid 9
		{base: 16, pid: 9, control: true},
	}
	aborted := []abortedTxn{{producerID: 9, firstOffset: 15}, {producerID: 7, firstOffset: 2}} // unsorted on purpose
	want := slices.Concat(span(0, 1), span(5, 7), span(12, 13))

	for _, codec := range []compress.Compression{compress.None, compress.Gzip, compress.Snappy, compress.Lz4, compress.Zstd} {
		t.Run(codec.String(), func(t *testing.T) {
			var raws [][]byte
			for _, tb := range batches {
				if !tb.control {
					tb.codec = codec
				}
				raws = append(raws, encodeBatch(t, tb))
			}
			b, next, err := decodeAll(t, encodeResponse(t, aborted, raws...), 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := offsets(b); !slices.Equal(got, want) {
				t.Fatalf("offsets %v, want %v", got, want)
			}
			if next != 17 {
				t.Fatalf("next %d, want 17", next)
			}
			if b.Aborted != 6 || b.Markers != 4 {
				t.Fatalf("aborted %d markers %d, want 6 and 4", b.Aborted, b.Markers)
			}
			for _, r := range b.Records {
				if string(r.Key) != fmt.Sprintf("k%d", r.Offset) || !bytes.HasPrefix(r.Value, fmt.Appendf(nil, "v%d-", r.Offset)) {
					t.Fatalf("record %d: key %q value %q", r.Offset, r.Key, r.Value)
				}
				if r.Timestamp.UnixMilli() != 1_700_000_000_000+(r.Offset-firstOf(batches, r.Offset)) {
					t.Fatalf("record %d: timestamp %d", r.Offset, r.Timestamp.UnixMilli())
				}
				odd := (r.Offset-firstOf(batches, r.Offset))%2 == 1
				if odd != (len(r.Headers) == 2) {
					t.Fatalf("record %d: headers %v", r.Offset, r.Headers)
				}
				if odd && (r.Headers[0].Key != "h" || string(r.Headers[0].Value) != "x" || r.Headers[1].Key != "nil" || r.Headers[1].Value != nil) {
					t.Fatalf("record %d: headers %v", r.Offset, r.Headers)
				}
			}
		})
	}
}

func firstOf(bs []tbatch, off int64) int64 {
	for _, b := range bs {
		if off >= b.base && off <= b.last() {
			return b.base
		}
	}
	return -1
}

func TestDecodeAbortedBeforePosition(t *testing.T) {
	// The transaction of producer 7 started before the fetch position; the
	// broker still lists it, and its later batches must be dropped.
	body := encodeResponse(t, []abortedTxn{{7, 2}},
		encodeBatch(t, tbatch{base: 4, pid: 7, txn: true, n: 3}), // 4-6 aborted, position inside
		encodeBatch(t, tbatch{base: 7, n: 3}),                    // 7-9 plain
		encodeBatch(t, tbatch{base: 10, pid: 7, control: true}),
	)
	b, next, err := decodeAll(t, body, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got := offsets(b); !slices.Equal(got, span(7, 9)) || next != 11 {
		t.Fatalf("offsets %v next %d", got, next)
	}
	// A plain batch that starts before the position: records before it
	// were delivered already.
	b, next, err = decodeAll(t, encodeResponse(t, nil, encodeBatch(t, tbatch{base: 7, n: 3})), 8)
	if err != nil || !slices.Equal(offsets(b), span(8, 9)) || next != 10 {
		t.Fatalf("offsets %v next %d err %v", offsets(b), next, err)
	}
}

func TestDecodeSameProducerAbortThenCommit(t *testing.T) {
	// Two aborted transactions of one producer with a committed one in
	// between: the abort marker must end the first range.
	body := encodeResponse(t, []abortedTxn{{5, 0}, {5, 6}},
		encodeBatch(t, tbatch{base: 0, pid: 5, txn: true, n: 2}),
		encodeBatch(t, tbatch{base: 2, pid: 5, control: true}),
		encodeBatch(t, tbatch{base: 3, pid: 5, txn: true, n: 2}),
		encodeBatch(t, tbatch{base: 5, pid: 5, control: true, commit: true}),
		encodeBatch(t, tbatch{base: 6, pid: 5, txn: true, n: 1}),
		encodeBatch(t, tbatch{base: 7, pid: 5, control: true}),
	)
	b, next, err := decodeAll(t, body, 0)
	if err != nil || !slices.Equal(offsets(b), span(3, 4)) || next != 8 {
		t.Fatalf("offsets %v next %d err %v", offsets(b), next, err)
	}
}

func TestDecodeLogAppendTime(t *testing.T) {
	b, _, err := decodeAll(t, encodeResponse(t, nil, encodeBatch(t, tbatch{base: 0, n: 3, logAppend: true})), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range b.Records {
		if r.Timestamp.UnixMilli() != 1_700_000_000_000+2+1000 {
			t.Fatalf("record %d: timestamp %d, want the batch max timestamp", r.Offset, r.Timestamp.UnixMilli())
		}
	}
	if !b.AppendTime {
		t.Error("AppendTime not set for a LogAppendTime batch")
	}
	b, _, err = decodeAll(t, encodeResponse(t, nil, encodeBatch(t, tbatch{base: 0, n: 3})), 0)
	if err != nil || b.AppendTime {
		t.Errorf("create-time batch: AppendTime %v, err %v", b.AppendTime, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := encodeBatch(t, tbatch{base: 0, n: 3})
	corrupt := slices.Clone(good)
	corrupt[len(corrupt)-2] ^= 0xff
	v1 := slices.Clone(good)
	v1[batchMagic] = 1
	tests := []struct {
		name    string
		batches [][]byte
		pos     int64
		want    []int64
		next    int64
		err     string
	}{
		{name: "partial trailing batch", batches: [][]byte{good, encodeBatch(t, tbatch{base: 3, n: 2})[:40]}, want: span(0, 2), next: 3},
		{name: "only a partial batch", batches: [][]byte{good[:len(good)-1]}, err: "needs"},
		{name: "crc mismatch", batches: [][]byte{corrupt}, err: "crc"},
		{name: "message format v1", batches: [][]byte{v1}, err: "unsupported message format v1"},
		{name: "empty", next: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, next, err := decodeAll(t, encodeResponse(t, nil, tt.batches...), tt.pos)
			if tt.err != "" {
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.err)) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(offsets(b), tt.want) || next != tt.next {
				t.Fatalf("offsets %v next %d, want %v next %d", offsets(b), next, tt.want, tt.next)
			}
		})
	}
}

func TestParseResponseErrors(t *testing.T) {
	body := encodeResponse(t, nil, encodeBatch(t, tbatch{base: 0, n: 3}))
	var d decoder
	for cut := 0; cut < len(body)-1; cut += 7 {
		p, found, err := d.parseResponse(body[:cut], 11, "t", 0)
		if err == nil && found && len(p.records) > 0 {
			// Only a cut inside the record bytes of the last partition
			// can parse; then the records are whole.
			if cut < len(body)-len(p.records) {
				t.Fatalf("cut at %d parsed %d record bytes", cut, len(p.records))
			}
		}
		if err != nil && !errors.Is(err, errCorrupt) {
			t.Fatalf("cut at %d: error %v is not errCorrupt", cut, err)
		}
	}
	if _, found, err := d.parseResponse(body, 11, "t", 1); found || err != nil {
		t.Fatalf("partition 1: found %v err %v", found, err)
	}
	// A top-level error (v7+).
	resp := kmsg.NewFetchResponse()
	resp.Version = 11
	resp.ErrorCode = 70 // FETCH_SESSION_ID_NOT_FOUND
	if _, _, err := d.parseResponse(resp.AppendTo(nil), 11, "t", 0); err == nil {
		t.Fatal("top-level error code ignored")
	}
}

func TestDecodeAllocations(t *testing.T) {
	var raws [][]byte
	for i := int64(0); i < 50; i++ {
		raws = append(raws, encodeBatch(t, tbatch{base: i * 20, n: 20}))
	}
	body := encodeResponse(t, nil, raws...)
	var d decoder
	b := new(Batch)
	run := func() { decodeThousand(t, &d, b, body) }
	run() // grow the buffers
	if n := testing.AllocsPerRun(20, run); n != 0 {
		t.Fatalf("%v allocations per decode of 1000 records with headers, want 0", n)
	}
}

// FuzzDecode feeds arbitrary bytes to the response and record decoders: they
// must return an error or records inside the fetched range, never panic.
func FuzzDecode(f *testing.F) {
	f.Add(encodeResponse(f, nil, encodeBatch(f, tbatch{base: 0, n: 3})), int64(0))
	f.Add(encodeResponse(f, []abortedTxn{{7, 2}},
		encodeBatch(f, tbatch{base: 2, pid: 7, txn: true, n: 2}),
		encodeBatch(f, tbatch{base: 4, pid: 7, control: true}),
		encodeBatch(f, tbatch{base: 5, n: 2, codec: compress.Snappy})), int64(1))
	f.Fuzz(func(t *testing.T, body []byte, pos int64) {
		var d decoder
		b := new(Batch)
		b.reset("t", 0)
		p, found, err := d.parseResponse(body, 11, "t", 0)
		if err != nil || !found {
			return
		}
		next, err := d.decodeRecords(b, &p, pos)
		if err != nil {
			return
		}
		if next < pos {
			t.Fatalf("position moved back from %d to %d", pos, next)
		}
		for i, r := range b.Records {
			if r.Offset < pos || r.Offset >= next || (i > 0 && r.Offset <= b.Records[i-1].Offset) {
				t.Fatalf("record %d: offset %d outside [%d, %d) or out of order", i, r.Offset, pos, next)
			}
		}
	})
}

// FuzzRecords wraps arbitrary record bytes in a record batch with a valid
// header and CRC, so that the fuzzer reaches the record decoder that
// FuzzDecode's CRC check shields.
func FuzzRecords(f *testing.F) {
	seed := encodeBatch(f, tbatch{base: 10, n: 4})
	f.Add(seed[batchHeaderSize:], uint8(4), uint8(0), int64(10))
	f.Add(seed[batchHeaderSize:], uint8(9), uint8(attrTransactional), int64(12))
	f.Fuzz(func(t *testing.T, recs []byte, count, attrs uint8, pos int64) {
		b := kmsg.RecordBatch{
			FirstOffset:     10,
			Length:          int32(batchHeaderSize - batchLengthEnd + len(recs)),
			Magic:           2,
			Attributes:      int16(attrs &^ attrCompression),
			LastOffsetDelta: int32(count),
			ProducerID:      3,
			NumRecords:      int32(count),
			Records:         recs,
		}
		raw := b.AppendTo(nil)
		b.CRC = int32(crc32.Checksum(raw[batchAttributes:], crc32.MakeTable(crc32.Castagnoli)))
		raw = b.AppendTo(nil)
		var d decoder
		batch := new(Batch)
		batch.reset("t", 0)
		p := partitionData{records: raw, aborted: []abortedTxn{{3, 0}}}
		next, err := d.decodeRecords(batch, &p, pos)
		if err != nil {
			return
		}
		if next < pos || (next != pos && next != 11+int64(count)) {
			t.Fatalf("next %d from position %d, batch ends at %d", next, pos, 10+int64(count))
		}
		for i, r := range batch.Records {
			if r.Offset < pos || r.Offset >= next || (i > 0 && r.Offset <= batch.Records[i-1].Offset) {
				t.Fatalf("record %d: offset %d outside [%d, %d) or out of order", i, r.Offset, pos, next)
			}
		}
	})
}

func TestDecodeCommitMarkerIsNotAbort(t *testing.T) {
	// Producer 5 commits two transactions, aborts a third and commits a
	// fourth; producer 6 aborts one that spans producer 5's second commit
	// marker. AbortedTransactions lists only the aborted ranges: every
	// record of a committed transaction is returned, no marker is, and a
	// commit marker ends no aborted range (neither its own producer's nor
	// another's).
	batches := []tbatch{
		{base: 0, pid: 5, txn: true, n: 3}, // 0-2 committed
		{base: 3, pid: 5, control: true, commit: true},
		{base: 4, pid: 5, txn: true, n: 2}, // 4-5 committed
		{base: 6, pid: 6, txn: true, n: 2}, // 6-7 aborted
		{base: 8, pid: 5, control: true, commit: true},
		{base: 9, pid: 6, txn: true, n: 2}, // 9-10 aborted
		{base: 11, pid: 6, control: true},
		{base: 12, pid: 5, txn: true, n: 2}, // 12-13 aborted
		{base: 14, pid: 5, control: true},
		{base: 15, pid: 5, txn: true, n: 2}, // 15-16 committed
		{base: 17, pid: 5, control: true, commit: true},
	}
	var raws [][]byte
	for _, tb := range batches {
		raws = append(raws, encodeBatch(t, tb))
	}
	body := encodeResponse(t, []abortedTxn{{producerID: 6, firstOffset: 6}, {producerID: 5, firstOffset: 12}}, raws...)
	for _, c := range []struct {
		pos  int64
		want []int64
	}{
		{0, slices.Concat(span(0, 2), span(4, 5), span(15, 16))},
		{4, slices.Concat(span(4, 5), span(15, 16))},
		{15, span(15, 16)},
	} {
		b, next, err := decodeAll(t, body, c.pos)
		if err != nil {
			t.Fatal(err)
		}
		if got := offsets(b); !slices.Equal(got, c.want) || next != 18 {
			t.Errorf("from %d: offsets %v next %d, want %v next 18", c.pos, got, next, c.want)
		}
		if c.pos == 0 && (b.Aborted != 6 || b.Markers != 5) {
			t.Errorf("aborted %d markers %d, want 6 and 5", b.Aborted, b.Markers)
		}
		for _, r := range b.Records {
			if string(r.Key) != fmt.Sprintf("k%d", r.Offset) || !bytes.Equal(r.Value, fmt.Appendf(nil, "v%d-pid5", r.Offset)) {
				t.Errorf("from %d: record %d: key %q value %q", c.pos, r.Offset, r.Key, r.Value)
			}
		}
	}
}

// TestDecodeReservesOnce checks that a response's records and inflated
// bytes are given room before its batches are decoded: decoding 50 batches
// into a fresh Batch allocates no more than decoding the same records as
// one batch (batch-by-batch growth reallocated Records about log2(50)
// times), and with a compression ratio seen before, the inflated records
// fit a buffer sized once for them (growth by doubling leaves it up to
// twice too large).
func TestDecodeReservesOnce(t *testing.T) {
	var many [][]byte
	for i := int64(0); i < 50; i++ {
		many = append(many, encodeBatch(t, tbatch{base: i * 20, n: 20}))
	}
	one := encodeBatch(t, tbatch{base: 0, n: 1000})
	var d decoder
	decodeFresh := func(body []byte) *Batch {
		b := new(Batch)
		decodeThousand(t, &d, b, body)
		return b
	}
	manyBody, oneBody := encodeResponse(t, nil, many...), encodeResponse(t, nil, one)
	decodeFresh(oneBody) // the decoder's own tables
	allocsMany := testing.AllocsPerRun(10, func() { decodeFresh(manyBody) })
	allocsOne := testing.AllocsPerRun(10, func() { decodeFresh(oneBody) })
	if allocsMany > allocsOne {
		t.Errorf("a fresh batch allocates %v times for 1000 records in 50 batches, %v for them in one batch: records grown batch by batch", allocsMany, allocsOne)
	}

	for _, codec := range []compress.Compression{compress.Snappy, compress.Lz4, compress.Zstd, compress.Gzip} {
		var zs [][]byte
		for i := int64(0); i < 50; i++ {
			zs = append(zs, encodeBatch(t, tbatch{base: i * 20, n: 20, codec: codec}))
		}
		body := encodeResponse(t, nil, zs...)
		d = decoder{}
		first := decodeFresh(body) // learns the ratio
		b := decodeFresh(body)
		if n := len(b.dbuf); n == 0 || cap(b.dbuf) > n*5/4+64 || len(first.dbuf) != n {
			t.Errorf("%v: %d inflated bytes (first decode %d) in a buffer of %d: not sized for them once", codec, n, len(first.dbuf), cap(b.dbuf))
		}
	}
}

// TestDecodeReserveBounded: after records that compressed far beyond
// maxReserveRatio, the room reserved for a response is bounded by that
// ratio, not by the ratio seen, and the records still decode.
func TestDecodeReserveBounded(t *testing.T) {
	var d decoder
	d.zin, d.zout = 1, 1000 // as after a batch of zeros
	body := encodeResponse(t, nil, encodeBatch(t, tbatch{base: 0, n: 200, codec: compress.Zstd}))
	p, _, err := d.parseResponse(body, 11, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	b := new(Batch)
	b.reset("t", 0)
	if _, err := d.decodeRecords(b, &p, 0); err != nil || len(b.Records) != 200 {
		t.Fatalf("%d records, %v", len(b.Records), err)
	}
	if limit := len(p.records)*maxReserveRatio*9/8 + 64<<10; cap(b.dbuf) > limit {
		t.Errorf("%d bytes reserved for %d bytes of response, want at most %d", cap(b.dbuf), len(p.records), limit)
	}
}

// TestDecodeReserveTrustsCountsLittle: a batch header claiming a billion
// records (its CRC, checked later, fails) reserves no more records than the
// response's bytes could hold, and the response is refused.
func TestDecodeReserveTrustsCountsLittle(t *testing.T) {
	raw := encodeBatch(t, tbatch{base: 0, n: 50})
	binary.BigEndian.PutUint32(raw[batchRecordCount:], 1<<30)
	body := encodeResponse(t, nil, raw)
	var d decoder
	p, _, err := d.parseResponse(body, 11, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	b := new(Batch)
	b.reset("t", 0)
	if _, err := d.decodeRecords(b, &p, 0); !errors.Is(err, errCorrupt) {
		t.Errorf("decode of a batch with a corrupt count: %v, want a corrupt-response error", err)
	}
	if limit := len(p.records)/minRecordBytes + 16; cap(b.Records) > limit {
		t.Errorf("room for %d records reserved for %d bytes of response, want at most %d", cap(b.Records), len(p.records), limit)
	}
}

// decodeThousand decodes the response body of topic "t" partition 0 into b
// with d and fails t unless it holds 1000 records.
func decodeThousand(t *testing.T, d *decoder, b *Batch, body []byte) {
	t.Helper()
	b.reset("t", 0)
	p, _, err := d.parseResponse(body, 11, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.decodeRecords(b, &p, 0); err != nil {
		t.Fatal(err)
	}
	if len(b.Records) != 1000 {
		t.Fatalf("%d records", len(b.Records))
	}
}
