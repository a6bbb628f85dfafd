package partition

import (
	"strconv"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go/protocol"
)

// benchValue is a ~200-byte order event; the key sits two levels down,
// after a nested object and an array the scanner must skip.
var benchValue = []byte(`{"event":"order.paid","ts":"2025-11-29T18:04:00.123Z","meta":{"source":"checkout","region":"eu-west-1",` +
	`"tags":["web","promo"]},"order":{"id":"ORD-2025-0000042","status":"PAID","amount":129.90,"currency":"EUR"},"v":7}`)

var benchRecord = &Record{
	Key:   []byte("ORD-2025-0000042"),
	Value: benchValue,
	Headers: []protocol.Header{
		{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
		{Key: "event-id", Value: []byte("0f8fad5b-d9cb-469f-a165-70867728950e")},
	},
}

// flatRecord is the shape of the restore benchmark's output records: a
// small flat event, the key its first member.
var flatRecord = &Record{Value: []byte(`{"order_id":"o-4242424","msg_id":"m-4242424","amount":4242424}`)}

func BenchmarkExtract(b *testing.B) {
	// json_flat is the live path (the whole text validated), trusted the
	// restore's (ExtractTrusted), on the same record.
	for _, trusted := range []bool{false, true} {
		name := "json_flat"
		if trusted {
			name += "_trusted"
		}
		b.Run(name, func(b *testing.B) {
			e := mustExtractor(b, DefaultMaxKeyLen, "json:order_id")
			extract := e.Extract
			if trusted {
				extract = e.ExtractTrusted
			}
			dst := make([]byte, 0, 128)
			b.SetBytes(int64(len(flatRecord.Value)))
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if dst, err = extract(dst[:0], flatRecord); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	cases := []struct {
		name   string
		fields []string
	}{
		{"key", []string{"key"}},
		{"header", []string{"header:event-id"}},
		{"json_nested", []string{"json:order.id"}},
		{"composite", []string{"json:order.id", "json:order.status"}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			e := mustExtractor(b, DefaultMaxKeyLen, c.fields...)
			dst := make([]byte, 0, 128)
			if strings.HasPrefix(c.fields[0], "json:") {
				b.SetBytes(int64(len(benchValue)))
			}
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if dst, err = e.Extract(dst[:0], benchRecord); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkExtractUint(b *testing.B) {
	f := Field{Source: SourceJSON, Name: "v"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ExtractUint(benchRecord, f); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHashKey(b *testing.B) {
	for _, key := range []string{"ORD-2025-0000042", "0f8fad5b-d9cb-469f-a165-70867728950e"} {
		b.Run(strconv.Itoa(len(key)), func(b *testing.B) {
			k := []byte(key)
			b.SetBytes(int64(len(k)))
			b.ReportAllocs()
			for b.Loop() {
				HashKey(k)
			}
		})
	}
}

// BenchmarkPartition measures Murmur2Partition and the other partition
// functions, as called directly.
func BenchmarkPartition(b *testing.B) {
	key := []byte("ORD-2025-0000042")
	for _, c := range []struct {
		name string
		f    func([]byte, int) int
	}{
		{"murmur2", Murmur2Partition},
		{"fnv1a", FNV1aPartition},
		{"crc32", CRC32Partition},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(key)))
			b.ReportAllocs()
			for b.Loop() {
				c.f(key, 12)
			}
		})
	}
}
