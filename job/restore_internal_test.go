package job

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/pipeline"
)

// openKeyStage opens a stage keyed by the JSON member "k", closed when t
// ends.
func openKeyStage(t testing.TB) *pipeline.Stage {
	t.Helper()
	cfg := pipeline.Config{Window: time.Hour, Generations: 4, Key: []partition.Field{{Source: partition.SourceJSON, Name: "k"}}}
	cfg.ApplyDefaults()
	s, err := pipeline.Open(t.TempDir(), cfg, pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSplitKeyer: keying a batch on two goroutines gives exactly what one
// RestoreKeyer gives (hashes, versions, times, in order), for batches
// below and above splitKeyMin and reusing the batch; a record that cannot
// be keyed is marked as one keyer marks it, whichever half holds it.
func TestSplitKeyer(t *testing.T) {
	s := openKeyStage(t)
	recs := func(n, bad int) []pipeline.Record {
		out := make([]pipeline.Record, n)
		for i := range out {
			v := fmt.Appendf(nil, `{"k":"o-%d-%d"}`, n, i)
			if i == bad {
				v = []byte(`{"other":1}`)
			}
			out[i] = pipeline.Record{Record: partition.Record{Value: v}, TimestampMs: int64(1000 + i)}
		}
		return out
	}
	k := newSplitKeyer(context.Background(), s, nil)
	defer k.close()
	one := s.NewRestoreKeyer()
	var got, want pipeline.Restored
	for _, n := range []int{1, splitKeyMin - 1, splitKeyMin, 5001, 300} {
		in := recs(n, -1)
		k.key(in, &got)
		one.Key(in, &want)
		if got.Len() != n || got.Unkeyed() != 0 || !reflect.DeepEqual(&got, &want) {
			t.Fatalf("%d records: the split keyer's batch (%d records) differs from one keyer's", n, got.Len())
		}
	}
	// keyBatch: each half keys its fetched records in place; the result is
	// that of convert's records keyed, unkeyed records included.
	fetched := func(n, bad int) *fetch.Batch {
		fb := &fetch.Batch{}
		for i, r := range recs(n, bad) {
			fb.Records = append(fb.Records, fetch.Record{Offset: int64(i), Key: []byte(fmt.Sprint(i)), Value: r.Value, Timestamp: time.UnixMilli(r.TimestampMs + int64(n))})
		}
		return fb
	}
	for _, c := range []struct{ n, bad int }{{1, -1}, {splitKeyMin - 1, -1}, {splitKeyMin, -1}, {5001, -1}, {300, -1}, {5001, 10}, {5001, 4000}, {100, 7}} {
		fb := fetched(c.n, c.bad)
		k.keyBatch(fb, &got)
		one.Key(convert(nil, fb), &want)
		if got.Len() != c.n || !reflect.DeepEqual(&got, &want) {
			t.Fatalf("%d fetched records, unkeyable %d: the split keyer's batch (%d records, %d unkeyed) differs from one keyer's (%d unkeyed)", c.n, c.bad, got.Len(), got.Unkeyed(), want.Unkeyed())
		}
		if wantBad := min(1, c.bad+1); got.Unkeyed() != wantBad {
			t.Fatalf("%d fetched records, unkeyable %d: %d marked unkeyed, want %d", c.n, c.bad, got.Unkeyed(), wantBad)
		}
	}
	for _, bad := range []int{10, 4000} {
		in := recs(5001, bad)
		k.key(in, &got)
		one.Key(in, &want)
		if got.Unkeyed() != 1 || !reflect.DeepEqual(&got, &want) {
			t.Errorf("record %d unkeyable: the split keyer marked %d records unkeyed, or differs from one keyer", bad, got.Unkeyed())
		}
	}
}

// TestSplitKeyerAllocatesNothing: keying a fetched batch on the two
// goroutines allocates nothing once its Restored has grown, per record or
// per batch.
func TestSplitKeyerAllocatesNothing(t *testing.T) {
	s := openKeyStage(t)
	k := newSplitKeyer(context.Background(), s, nil)
	defer k.close()
	fb := &fetch.Batch{}
	for i := range 5001 {
		fb.Records = append(fb.Records, fetch.Record{Offset: int64(i), Value: fmt.Appendf(nil, `{"k":"o-%d","n":%d}`, i, i), Timestamp: time.UnixMilli(int64(i))})
	}
	var b pipeline.Restored
	run := func() { k.keyBatch(fb, &b) }
	run()
	if n := testing.AllocsPerRun(20, run); n != 0 {
		t.Fatalf("%.1f allocations per batch of %d records, want 0", n, len(fb.Records))
	}
	if b.Len() != len(fb.Records) || b.Unkeyed() != 0 {
		t.Fatalf("keyed %d of %d records, %d unkeyed", b.Len(), len(fb.Records), b.Unkeyed())
	}
}

// BenchmarkRestoreKeyAt keys fetched records of BenchmarkRestore's shape
// on one goroutine, as each half of the split keyer does (splitWork.run):
// the extraction, the hash and the batch's stores, cpu-ns per record.
func BenchmarkRestoreKeyAt(b *testing.B) {
	s := openKeyStage(b)
	rk := s.NewRestoreKeyer()
	from := make([]fetch.Record, 4096)
	for i := range from {
		id := "o-" + strconv.Itoa(i)
		from[i] = fetch.Record{Offset: int64(i), Key: []byte(id), Value: fmt.Appendf(nil, `{"k":%q,"msg_id":"m-%d","amount":%d}`, id, i, i), Timestamp: time.UnixMilli(int64(i))}
	}
	var rb pipeline.Restored
	rb.SetLen(len(from))
	w := splitWork{from: from, b: &rb}
	start := cpuTime()
	for b.Loop() {
		w.run(rk)
	}
	b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N*len(from)), "cpu-ns/record")
}

// TestEmitTimesLimit: a restore counts the records up to an offset no
// later than the end of the generation of the newest mark at or before it
// (in the span the marks were written in); before every mark, or past the
// milliseconds a time can hold, there is no limit.
func TestEmitTimesLimit(t *testing.T) {
	e := &emitTimes{marks: genMarks{{10, 5}, {12, 90}}, spanMs: 1000}
	for _, tc := range []struct {
		last, want int64
	}{{4, math.MaxInt64}, {5, 10_999}, {89, 10_999}, {90, 12_999}, {1 << 40, 12_999}} {
		if got := e.limit(tc.last); got != tc.want {
			t.Errorf("limit(%d) = %d, want %d", tc.last, got, tc.want)
		}
	}
	// Marks committed with the output up to 200 say nothing of the
	// records from there on (emitted by later commits).
	e.upTo = 200
	if got, got2 := e.limit(199), e.limit(200); got != 12_999 || got2 != math.MaxInt64 {
		t.Errorf("marks up to offset 200: limit(199) = %d, limit(200) = %d, want 12999 and none", got, got2)
	}
	huge := &emitTimes{marks: genMarks{{math.MaxUint64 / 2, 0}}, spanMs: 1000}
	if got := huge.limit(1); got != math.MaxInt64 {
		t.Errorf("a generation past the time range: limit %d, want none", got)
	}
}
