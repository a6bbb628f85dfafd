package sink

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var t0 = time.UnixMilli(1_700_000_000_123)

// shapes covers null and empty keys and values, headers with null values,
// negative timestamp deltas and multi-byte varint lengths.
func shapes() []Record {
	return []Record{
		{Key: []byte("k0"), Value: []byte("v0"), Time: t0},
		{Value: []byte("value-1"), Headers: []Header{{Key: "h1", Value: []byte("x")}, {Key: "h2", Value: nil}}, Time: t0.Add(5 * time.Millisecond)},
		{Key: []byte("k2"), Time: t0.Add(-3 * time.Millisecond)},
		{Key: []byte{}, Value: []byte{}, Headers: []Header{{Key: "", Value: []byte{}}}, Time: t0.Add(time.Second)},
		{Key: bytes.Repeat([]byte("K"), 300), Value: bytes.Repeat([]byte("0123456789"), 2000), Time: t0.Add(2 * time.Millisecond)},
	}
}

// TestAppendBatchGolden pins the encoding of a small transactional batch
// byte by byte, field by field as the Kafka protocol documents it.
func TestAppendBatchGolden(t *testing.T) {
	recs := []Record{
		{Key: []byte("a"), Value: []byte("bc"), Time: time.UnixMilli(1000)},
		{Value: []byte("d"), Headers: []Header{{Key: "h", Value: nil}}, Time: time.UnixMilli(998)},
	}
	h := BatchHeader{ProducerID: 0x0102030405060708, ProducerEpoch: 3, BaseSequence: 7, Transactional: true}
	got, err := new(Encoder).AppendBatch(nil, h, recs)
	if err != nil {
		t.Fatal(err)
	}
	const crc = "________" // patched below: CRC-32C over attributes..end
	fields := []string{
		"0000000000000000", // base offset
		"00000046",         // length: 70 bytes follow
		"ffffffff",         // partition leader epoch -1
		"02",               // magic
		crc,                // CRC
		"0010",             // attributes: transactional, no compression, create time
		"00000001",         // last offset delta
		"00000000000003e8", // first timestamp 1000
		"00000000000003e8", // max timestamp 1000
		"0102030405060708", // producer id
		"0003",             // producer epoch
		"00000007",         // base sequence
		"00000002",         // record count
		// record 0
		"12",          // length 9 (zigzag)
		"00",          // attributes
		"00",          // timestamp delta 0
		"00",          // offset delta 0
		"02" + "61",   // key "a"
		"04" + "6263", // value "bc"
		"00",          // no headers
		// record 1
		"14",        // length 10
		"00",        // attributes
		"03",        // timestamp delta -2
		"02",        // offset delta 1
		"01",        // null key
		"02" + "64", // value "d"
		"02",        // 1 header
		"02" + "68", // header key "h"
		"01",        // null header value
	}
	want, err := hex.DecodeString(strings.Replace(strings.Join(fields, ""), crc, "00000000", 1))
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint32(want[17:], crc32.Checksum(want[21:], crc32.MakeTable(crc32.Castagnoli)))
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding differs\ngot  %x\nwant %x", got, want)
	}
	// Independent encoder: franz-go's kmsg builds the same bytes.
	if k := kmsgEncode(t, h, recs); !bytes.Equal(got, k) {
		t.Fatalf("differs from kmsg encoding\ngot  %x\nkmsg %x", got, k)
	}
}

// kmsgEncode encodes an uncompressed batch with franz-go's kmsg types.
func kmsgEncode(t *testing.T, h BatchHeader, recs []Record) []byte {
	t.Helper()
	var records []byte
	first := recs[0].Time.UnixMilli()
	maxTS := first
	for i, r := range recs {
		maxTS = max(maxTS, r.Time.UnixMilli())
		kr := kmsg.Record{
			TimestampDelta64: r.Time.UnixMilli() - first,
			OffsetDelta:      int32(i),
			Key:              r.Key,
			Value:            r.Value,
		}
		for _, hd := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: hd.Key, Value: hd.Value})
		}
		body := kr.AppendTo(nil) // with Length 0: one byte of length prefix
		kr.Length = int32(len(body) - 1)
		records = kr.AppendTo(records)
	}
	attrs := int16(h.Compression)
	if h.Transactional {
		attrs |= 0x10
	}
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           attrs,
		LastOffsetDelta:      int32(len(recs) - 1),
		FirstTimestamp:       first,
		MaxTimestamp:         maxTS,
		ProducerID:           h.ProducerID,
		ProducerEpoch:        h.ProducerEpoch,
		FirstSequence:        h.BaseSequence,
		NumRecords:           int32(len(recs)),
		Records:              records,
	}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return out
}

func TestAppendBatchMatchesKmsg(t *testing.T) {
	for _, txn := range []bool{false, true} {
		h := BatchHeader{ProducerID: 42, ProducerEpoch: 1, BaseSequence: 1 << 30, Transactional: txn}
		got, err := new(Encoder).AppendBatch(nil, h, shapes())
		if err != nil {
			t.Fatal(err)
		}
		if want := kmsgEncode(t, h, shapes()); !bytes.Equal(got, want) {
			t.Fatalf("transactional=%v: differs from kmsg encoding", txn)
		}
	}
}

var codecs = []compress.Compression{compress.None, compress.Gzip, compress.Snappy, compress.Lz4, compress.Zstd}

// TestAppendBatchDecode decodes batches with kafka-go's protocol decoder and
// with franz-go's kmsg, for every codec, and checks every field.
func TestAppendBatchDecode(t *testing.T) {
	var enc Encoder
	for _, c := range codecs {
		for _, txn := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/txn=%v", c, txn), func(t *testing.T) {
				h := BatchHeader{ProducerID: 9_000_000_001, ProducerEpoch: 12, BaseSequence: 345, Transactional: txn, Compression: c}
				recs := shapes()
				b, err := enc.AppendBatch([]byte("prefix"), h, recs)
				if err != nil {
					t.Fatal(err)
				}
				if string(b[:6]) != "prefix" {
					t.Fatalf("prefix overwritten: %q", b[:6])
				}
				b = b[6:]
				checkKmsg(t, b, h, recs)
				checkKafkaGo(t, b, h, recs)
			})
		}
	}
}

// checkKmsg decodes batch with franz-go's kmsg and compares every field.
func checkKmsg(t testing.TB, batch []byte, h BatchHeader, recs []Record) {
	t.Helper()
	var kb kmsg.RecordBatch
	if err := kb.ReadFrom(batch); err != nil {
		t.Fatalf("kmsg: %v", err)
	}
	first, maxTS := recs[0].Time.UnixMilli(), int64(-1<<63)
	for _, r := range recs {
		maxTS = max(maxTS, r.Time.UnixMilli())
	}
	wantAttrs := int16(h.Compression)
	if h.Transactional {
		wantAttrs |= 0x10
	}
	crc := int32(crc32.Checksum(batch[21:], crc32.MakeTable(crc32.Castagnoli)))
	for _, f := range []struct {
		name      string
		got, want int64
	}{
		{"first offset", kb.FirstOffset, 0},
		{"length", int64(kb.Length), int64(len(batch) - 12)},
		{"partition leader epoch", int64(kb.PartitionLeaderEpoch), -1},
		{"magic", int64(kb.Magic), 2},
		{"crc", int64(kb.CRC), int64(crc)},
		{"attributes", int64(kb.Attributes), int64(wantAttrs)},
		{"last offset delta", int64(kb.LastOffsetDelta), int64(len(recs) - 1)},
		{"first timestamp", kb.FirstTimestamp, first},
		{"max timestamp", kb.MaxTimestamp, maxTS},
		{"producer id", kb.ProducerID, h.ProducerID},
		{"producer epoch", int64(kb.ProducerEpoch), int64(h.ProducerEpoch)},
		{"first sequence", int64(kb.FirstSequence), int64(h.BaseSequence)},
		{"num records", int64(kb.NumRecords), int64(len(recs))},
	} {
		if f.got != f.want {
			t.Errorf("kmsg: %s = %d, want %d", f.name, f.got, f.want)
		}
	}
	raw := kb.Records
	if h.Compression != compress.None {
		r := h.Compression.Codec().NewReader(bytes.NewReader(raw))
		var err error
		raw, err = io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatalf("decompress %v: %v", h.Compression, err)
		}
	}
	for i, want := range recs {
		l, n := binary.Varint(raw)
		if n <= 0 || int(l)+n > len(raw) {
			t.Fatalf("record %d: bad length prefix", i)
		}
		var kr kmsg.Record
		if err := kr.ReadFrom(raw[:n+int(l)]); err != nil {
			t.Fatalf("record %d: kmsg: %v", i, err)
		}
		raw = raw[n+int(l):]
		if kr.Attributes != 0 || kr.OffsetDelta != int32(i) || kr.TimestampDelta64 != want.Time.UnixMilli()-first {
			t.Errorf("record %d: attributes %d, offset delta %d, timestamp delta %d", i, kr.Attributes, kr.OffsetDelta, kr.TimestampDelta64)
		}
		checkBytes(t, fmt.Sprintf("record %d key", i), kr.Key, want.Key)
		checkBytes(t, fmt.Sprintf("record %d value", i), kr.Value, want.Value)
		if len(kr.Headers) != len(want.Headers) {
			t.Fatalf("record %d: %d headers, want %d", i, len(kr.Headers), len(want.Headers))
		}
		for j, hd := range want.Headers {
			if kr.Headers[j].Key != hd.Key {
				t.Errorf("record %d header %d key %q, want %q", i, j, kr.Headers[j].Key, hd.Key)
			}
			checkBytes(t, fmt.Sprintf("record %d header %d value", i, j), kr.Headers[j].Value, hd.Value)
		}
	}
	if len(raw) != 0 {
		t.Errorf("%d bytes after the last record", len(raw))
	}
}

// checkBytes compares contents and null-ness.
func checkBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
		t.Errorf("%s = %q (nil %v), want %q (nil %v)", what, trunc(got), got == nil, trunc(want), want == nil)
	}
}

func trunc(b []byte) []byte { return b[:min(len(b), 16)] }

// checkKafkaGo decodes batch with kafka-go's protocol decoder, which reads a
// record set preceded by its size and verifies the CRC.
func checkKafkaGo(t testing.TB, batch []byte, h BatchHeader, recs []Record) {
	t.Helper()
	in := binary.BigEndian.AppendUint32(nil, uint32(len(batch)))
	in = append(in, batch...)
	var rs protocol.RecordSet
	if _, err := rs.ReadFrom(bytes.NewReader(in)); err != nil {
		t.Fatalf("kafka-go: %v", err)
	}
	stream, ok := rs.Records.(*protocol.RecordStream)
	if !ok || len(stream.Records) != 1 {
		t.Fatalf("kafka-go: records %T, want one batch", rs.Records)
	}
	rb, ok := stream.Records[0].(*protocol.RecordBatch)
	if !ok {
		t.Fatalf("kafka-go: batch is %T", stream.Records[0])
	}
	if rs.Version != 2 || rb.BaseOffset != 0 || rb.PartitionLeaderEpoch != -1 || rb.ProducerID != h.ProducerID ||
		rb.ProducerEpoch != h.ProducerEpoch || rb.BaseSequence != h.BaseSequence ||
		rb.Attributes.Compression() != h.Compression || rb.Attributes.Transactional() != h.Transactional || rb.Attributes.Control() {
		t.Errorf("kafka-go: batch header %+v, version %d", rb, rs.Version)
	}
	for i, want := range recs {
		r, err := rb.ReadRecord()
		if err != nil {
			t.Fatalf("kafka-go: record %d: %v", i, err)
		}
		if r.Offset != int64(i) || !r.Time.Equal(want.Time.Truncate(time.Millisecond)) {
			t.Errorf("kafka-go: record %d offset %d time %v, want %d %v", i, r.Offset, r.Time, i, want.Time)
		}
		checkBytes(t, fmt.Sprintf("kafka-go record %d key", i), readAll(t, r.Key), want.Key)
		checkBytes(t, fmt.Sprintf("kafka-go record %d value", i), readAll(t, r.Value), want.Value)
		if len(r.Headers) != len(want.Headers) {
			t.Fatalf("kafka-go: record %d: %d headers, want %d", i, len(r.Headers), len(want.Headers))
		}
		for j, hd := range want.Headers {
			if r.Headers[j].Key != hd.Key || !bytes.Equal(r.Headers[j].Value, hd.Value) {
				t.Errorf("kafka-go: record %d header %d = %+v, want %+v", i, j, r.Headers[j], hd)
			}
		}
	}
	if _, err := rb.ReadRecord(); err != io.EOF {
		t.Errorf("kafka-go: after the last record: %v, want EOF", err)
	}
}

func readAll(t testing.TB, b protocol.Bytes) []byte {
	t.Helper()
	if b == nil {
		return nil
	}
	out, err := protocol.ReadAll(b)
	if err != nil {
		t.Fatal(err)
	}
	if out == nil {
		out = []byte{}
	}
	return out
}

// TestAppendBatchCorruptionDetected makes sure the decoders above would
// notice a wrong CRC: flip one byte after the CRC.
func TestAppendBatchCorruptionDetected(t *testing.T) {
	b, err := new(Encoder).AppendBatch(nil, BatchHeader{ProducerID: 1, BaseSequence: 0}, shapes()[:2])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 1
	in := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	var rs protocol.RecordSet
	if _, err := rs.ReadFrom(bytes.NewReader(append(in, b...))); err == nil || !strings.Contains(err.Error(), "crc32") {
		t.Fatalf("kafka-go accepted a corrupt batch: %v", err)
	}
}

func TestAppendBatchErrors(t *testing.T) {
	var enc Encoder
	if _, err := enc.AppendBatch(nil, BatchHeader{}, nil); err == nil {
		t.Error("empty batch accepted")
	}
	if _, err := enc.AppendBatch(nil, BatchHeader{Compression: 7}, shapes()); err == nil {
		t.Error("unknown codec accepted")
	}
}

// TestAppendBatchZeroTime: records without a time get the encoding time.
func TestAppendBatchZeroTime(t *testing.T) {
	before := time.Now().UnixMilli()
	b, err := new(Encoder).AppendBatch(nil, BatchHeader{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]Record{{Value: []byte("x")}, {Value: []byte("y"), Time: time.UnixMilli(5)}})
	if err != nil {
		t.Fatal(err)
	}
	var kb kmsg.RecordBatch
	if err := kb.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	if kb.FirstTimestamp < before || kb.FirstTimestamp > time.Now().UnixMilli() || kb.MaxTimestamp != kb.FirstTimestamp {
		t.Fatalf("first %d max %d, want about now (%d)", kb.FirstTimestamp, kb.MaxTimestamp, before)
	}
}

func TestAppendBatchAllocs(t *testing.T) {
	var enc Encoder
	recs := benchRecords(1000, 100)
	buf := make([]byte, 0, 256<<10)
	allocs := testing.AllocsPerRun(20, func() {
		var err error
		if buf, err = enc.AppendBatch(buf[:0], BatchHeader{ProducerID: 1, Transactional: true}, recs); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per uncompressed batch, want 0", allocs)
	}
}

func benchRecords(n, valueSize int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{
			Key:   fmt.Appendf(nil, "order-%08d", i),
			Value: bytes.Repeat([]byte{'v'}, valueSize),
			Time:  t0.Add(time.Duration(i) * time.Microsecond),
		}
	}
	return recs
}

func BenchmarkAppendBatch(b *testing.B) {
	recs := benchRecords(1000, 100)
	for _, c := range codecs {
		b.Run(c.String(), func(b *testing.B) {
			var enc Encoder
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if buf, err = enc.AppendBatch(buf[:0], BatchHeader{ProducerID: 1, Transactional: true, Compression: c}, recs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// FuzzBatchRoundTrip encodes records cut from the fuzzer's bytes and checks
// that kmsg and kafka-go decode exactly what went in.
func FuzzBatchRoundTrip(f *testing.F) {
	f.Add([]byte("\x03key\x05value"), int64(1), int16(0), int32(0), uint8(0), true, int64(1_700_000_000_000))
	f.Add([]byte{}, int64(-1), int16(-1), int32(-1), uint8(1), false, int64(0))
	f.Add(bytes.Repeat([]byte{0xff, 0x00, 0x80}, 200), int64(1<<62), int16(32767), int32(1<<31-1), uint8(4), true, int64(-5))
	var enc Encoder
	f.Fuzz(func(t *testing.T, data []byte, pid int64, epoch int16, seq int32, codec uint8, txn bool, ts int64) {
		// Keep timestamps within what time.UnixMilli round-trips.
		ts %= 1 << 50
		recs := recordsFromBytes(data, ts)
		h := BatchHeader{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, Transactional: txn,
			Compression: codecs[int(codec)%len(codecs)]}
		b, err := enc.AppendBatch(nil, h, recs)
		if err != nil {
			t.Fatal(err)
		}
		checkKmsg(t, b, h, recs)
		checkKafkaGo(t, b, h, recs)
	})
}

// recordsFromBytes cuts data into 1..8 records: each takes a control byte
// choosing null key/value and header count, then length-prefixed slices.
func recordsFromBytes(data []byte, ts int64) []Record {
	take := func() []byte {
		if len(data) == 0 {
			return []byte{}
		}
		n := min(int(data[0]), len(data)-1)
		out := data[1 : 1+n]
		data = data[1+n:]
		return out
	}
	n := 1
	if len(data) > 0 {
		n = int(data[0])%8 + 1
		data = data[1:]
	}
	recs := make([]Record, n)
	for i := range recs {
		var ctl byte
		if len(data) > 0 {
			ctl, data = data[0], data[1:]
		}
		r := &recs[i]
		r.Time = time.UnixMilli(ts + int64(int8(ctl)))
		if ctl&1 == 0 {
			r.Key = take()
		}
		if ctl&2 == 0 {
			r.Value = take()
		}
		for j := 0; j < int(ctl>>2&3); j++ {
			hd := Header{Key: string(take())}
			if ctl&0x10 == 0 {
				hd.Value = take()
			}
			r.Headers = append(r.Headers, hd)
		}
	}
	return recs
}

// TestEncodeBatchSizedOnce: batchSize's bound holds every uncompressed
// batch it sizes (records with and without keys, values and headers, large
// and small), so encodeBatch fills a fresh buffer with one allocation and
// never grows it; a buffer with room is reused without any, and one a
// little too small at least doubles.
func TestEncodeBatchSizedOnce(t *testing.T) {
	var recs []Record
	for i := range 3000 {
		r := Record{Key: fmt.Appendf(nil, "k-%d", i), Value: bytes.Repeat([]byte{'v'}, i%300), Time: t0.Add(time.Duration(i) * time.Hour)}
		switch i % 7 {
		case 0:
			r.Key = nil
		case 1:
			r.Value = nil
		case 2:
			r.Headers = []Header{{Key: "h", Value: []byte("x")}, {Key: "", Value: nil}}
		case 3:
			r.Time = time.Time{}
		case 4:
			r.Value = bytes.Repeat([]byte{'w'}, 20_000)
		}
		recs = append(recs, r)
	}
	p := &Producer{cfg: Config{MaxBatchBytes: 64 << 10}, pid: 7}
	batches := 0
	for rest := recs; len(rest) > 0; batches++ {
		n, bound := p.batchSize(rest)
		if n != p.batchLen(rest) {
			t.Fatalf("batchSize's n %d, batchLen %d", n, p.batchLen(rest))
		}
		var buf []byte
		allocs := testing.AllocsPerRun(1, func() {
			var err error
			if buf, err = p.encodeBatch(nil, 0, rest[:n], bound); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 1 || len(buf) > cap(buf) || cap(buf) != 4+bound {
			t.Fatalf("batch %d (%d records): %.0f allocations, %d bytes in a buffer of %d, bound %d: want one allocation of 4+bound holding the batch", batches, n, allocs, len(buf), cap(buf), bound)
		}
		if allocs := testing.AllocsPerRun(3, func() {
			if _, err := p.encodeBatch(buf, 0, rest[:n], bound); err != nil {
				t.Fatal(err)
			}
		}); allocs != 0 {
			t.Fatalf("batch %d: %.0f allocations into a buffer with room, want 0", batches, allocs)
		}
		rest = rest[n:]
	}
	if batches < 5 {
		t.Fatalf("%d batches: the test must split the records into several", batches)
	}
	// A batch a little larger than the buffer (a slowly growing stream)
	// still at least doubles it: one allocation per batch would be worse
	// than appending.
	small := recs[5:6] // 5 % 7 == 5: a plain record
	_, bound := p.batchSize(small)
	prev := make([]byte, 0, bound) // 4 bytes short
	buf, err := p.encodeBatch(prev, 0, small, bound)
	if err != nil {
		t.Fatal(err)
	}
	if cap(buf) < 2*cap(prev) {
		t.Fatalf("a buffer of %d bytes grew to %d for a batch bound of %d, want at least double", cap(prev), cap(buf), bound)
	}
}
