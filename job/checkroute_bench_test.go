package job

import (
	"testing"

	"github.com/dedupstream/dedupstream/bench/workload"
	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/pipeline"
)

// routeBatch returns a batch of n records keyed as the e2e workload's
// (16-36 bytes), every one on partition p of parts by murmur2.
func routeBatch(n, parts, p int) *fetch.Batch {
	b := &fetch.Batch{}
	for id := uint64(0); len(b.Records) < n; id++ {
		k := workload.AppendKey(nil, id)
		if partition.Murmur2Partition(k, parts) == p {
			b.Records = append(b.Records, fetch.Record{Offset: int64(len(b.Records)), Key: k, Value: make([]byte, 84)})
		}
	}
	return b
}

// BenchmarkConvertRoute: the stage's input conversion with the partitioner
// check of input mode, as two passes over the batch (convert, then murmur2
// of every key: the runner before) and fused in one (convertRouted); CPU
// per record of a 45k-record batch (a 1 MiB fetch of the e2e workload's
// records inflates to about that many).
func BenchmarkConvertRoute(b *testing.B) {
	const n = 45_000
	batch := routeBatch(n, 4, 1)
	var recs []pipeline.Record
	b.Run("two-passes", func(b *testing.B) {
		var m uint64
		start := cpuTime()
		for b.Loop() {
			recs = convert(recs, batch)
			for i := range batch.Records {
				if k := batch.Records[i].Key; len(k) > 0 && partition.Murmur2Partition(k, 4) != 1 {
					m++
				}
			}
		}
		b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N)/n, "cpu-ns/record")
		if m != 0 {
			b.Fatal(m)
		}
	})
	b.Run("fused", func(b *testing.B) {
		var m uint64
		start := cpuTime()
		for b.Loop() {
			var k uint64
			recs, k = convertRouted(recs, batch, partition.Murmur2Partition, 4, 1)
			m += k
		}
		b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N)/n, "cpu-ns/record")
		if m != 0 {
			b.Fatal(m)
		}
	})
	b.Run("convert-only", func(b *testing.B) {
		start := cpuTime()
		for b.Loop() {
			recs = convert(recs, batch)
		}
		b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N)/n, "cpu-ns/record")
	})
}

// TestConvertRoutedCounts: convertRouted converts every record as convert
// does and counts exactly the keyed records murmur2 sends elsewhere.
func TestConvertRoutedCounts(t *testing.T) {
	b := &fetch.Batch{}
	want := uint64(0)
	for id := range uint64(1000) {
		k := workload.AppendKey(nil, id)
		if id%10 == 0 {
			k = nil // no key: never counted
		} else if partition.Murmur2Partition(k, 6) != 2 {
			want++
		}
		b.Records = append(b.Records, fetch.Record{Offset: int64(id), Key: k, Value: []byte("v")})
	}
	recs, got := convertRouted(nil, b, partition.Murmur2Partition, 6, 2)
	if got != want || want == 0 {
		t.Errorf("misrouted %d, want %d", got, want)
	}
	plain := convert(nil, b)
	if len(recs) != len(plain) {
		t.Fatalf("%d records, convert gives %d", len(recs), len(plain))
	}
	for i := range recs {
		if string(recs[i].Key) != string(plain[i].Key) || recs[i].TimestampMs != plain[i].TimestampMs {
			t.Fatalf("record %d differs from convert's", i)
		}
	}
}
