package pipeline

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/partition"
)

func openTestStage(t *testing.T, cfg Config, clock func() time.Time) *Stage {
	t.Helper()
	s, err := Open(t.TempDir(), cfg, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestProcessSteadyStateAllocatesNothing: once maps and buffers have grown,
// deciding a batch (new keys, in-batch repeats in one probe chunk and
// across chunks, history repeats, DLQ) and committing it allocates nothing
// per record.
func TestProcessSteadyStateAllocatesNothing(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	s := openTestStage(t, Config{Key: []partition.Field{{Source: partition.SourceJSON, Name: "id"}}}, func() time.Time { return now })
	const n = 2000
	in := make([]Record, n)
	next := 0
	fill := func() {
		for i := range in {
			switch {
			case i%10 == 0: // a repeat of a committed key
				in[i].Value = fmt.Appendf(in[i].Value[:0], `{"id":"k%d"}`, next-n+i/2)
			case i%10 == 1: // a repeat inside the batch
				in[i].Value = append(in[i].Value[:0], in[i-1].Value...)
			case i%10 == 2 && i >= probeChunk: // a repeat of the previous probe chunk
				in[i].Value = append(in[i].Value[:0], in[i-probeChunk+1].Value...)
			case i%97 == 0:
				in[i].Value = append(in[i].Value[:0], `{"id":`...)
			default:
				in[i].Value = fmt.Appendf(in[i].Value[:0], `{"id":"k%d"}`, next)
				next++
			}
			in[i].TimestampMs = now.UnixMilli()
		}
	}
	out := make([]Decision, 0, n)
	run := func() {
		var err error
		if out, _, err = s.Process(in, out[:0]); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(nil); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // grow the maps and buffers
		fill()
		run()
	}
	// The first commit expired everything below the window: a range
	// deletion that costs Pebble one iterator allocation per read while it
	// sits in the memtable (the store flushes it within 10s; here at once).
	if err := s.store.Compact(); err != nil {
		t.Fatal(err)
	}
	fill()
	perBatch := testing.AllocsPerRun(5, func() {
		run()
	})
	// A dead-lettered record allocates its error (once); Pebble's commit a
	// few objects per batch. Nothing else may allocate per record.
	dlq := 0
	for i := range in {
		if i%97 == 0 && i%10 > 1 && (i%10 != 2 || i < probeChunk) {
			dlq++
		}
	}
	if limit := float64(dlq + 8); perBatch > limit {
		t.Fatalf("%.1f allocations per batch of %d records (%d to the DLQ), want <= %.0f", perBatch, n, dlq, limit)
	}
}

// TestGenStarts: a batch whose records move the clock across generations
// says where its emits entered each one: its first emit, then the first
// emitted in each newer generation, also when a record that is not emitted
// (a repeat, a poison record) moved the clock and a late record stamped
// before it is the next emit.
func TestGenStarts(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	s := openTestStage(t, Config{Key: []partition.Field{{Source: partition.SourceJSON, Name: "id"}}, Window: 4 * time.Hour, Generations: 4}, func() time.Time { return now })
	hour := time.Hour.Milliseconds()
	t0 := now.UnixMilli() - 3*hour - hour/2
	rec := func(id string, at int64) Record {
		return Record{Record: partition.Record{Value: []byte(`{"id":"` + id + `"}`)}, TimestampMs: at}
	}
	in := []Record{
		{Record: partition.Record{Value: []byte("poison")}, TimestampMs: t0}, // 0: dead letter
		rec("a", t0),          // 1: first emit
		rec("b", t0+10),       // 2
		rec("a", t0+hour),     // 3: a repeat moves the clock a generation on
		rec("late", t0),       // 4: the first emit in it
		rec("c", t0+2*hour),   // 5: the next generation
		rec("d", t0+2*hour+1), // 6
	}
	out, _, err := s.Process(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out[3].Verdict != DropBatch || out[4].Verdict != Emit {
		t.Fatalf("decisions %+v", out)
	}
	g := func(ms int64) uint64 { return uint64(ms / hour) }
	want := []GenStart{{1, g(t0)}, {4, g(t0 + hour)}, {5, g(t0 + 2*hour)}}
	if got := s.GenStarts(); !slices.Equal(got, want) {
		t.Errorf("GenStarts %v, want %v", got, want)
	}
	if _, _, err := s.Process(in[5:], nil); err != nil {
		t.Fatal(err)
	}
	if got := s.GenStarts(); len(got) != 0 {
		t.Errorf("a batch of repeats only: GenStarts %v, want none", got)
	}
}

// TestDecisionsAndCounts checks each verdict, reason and counter once on a
// hand-made stream.
func TestDecisionsAndCounts(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	s := openTestStage(t, Config{Key: []partition.Field{{Source: partition.SourceJSON, Name: "order.id"}}, MaxRecordBytes: 64}, func() time.Time { return now })
	rec := func(v string) Record {
		return Record{Record: partition.Record{Value: []byte(v)}, TimestampMs: now.UnixMilli()}
	}
	first := []Record{
		rec(`{"order":{"id":"A"}}`),
		rec(`{"order":{"id":"A"},"resent":true}`), // producer resend: same key, new bytes
		rec(`{"order":{"id":"B"}}`),
		rec(`not json`),
		rec(`{"order":{}}`),
		rec(`{"order":{"id":"C"},"pad":"` + strings.Repeat("x", 64) + `"}`),
	}
	got, c, err := s.Process(first, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Decision{{Verdict: Emit}, {Verdict: DropBatch}, {Verdict: Emit},
		{Verdict: DeadLetter, Reason: "not_json"}, {Verdict: DeadLetter, Reason: "field_missing"},
		{Verdict: DeadLetter, Reason: ReasonRecordTooLarge}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if c.In != 6 || c.Emitted != 2 || c.DroppedBatch != 1 || c.DeadLettered != 3 || c.In != c.Emitted+c.DroppedBatch+c.DroppedHistory+c.DeadLettered {
		t.Errorf("counts %+v", c)
	}
	if err := s.Commit([]byte("cp-1")); err != nil {
		t.Fatal(err)
	}
	got, c, err = s.Process([]Record{rec(`{"order":{"id":"B"}}`), rec(`{"order":{"id":"D"}}`)}, got[:0])
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Verdict != DropHistory || got[1].Verdict != Emit || c.DroppedHistory != 1 || c.StoreReads < 1 {
		t.Errorf("second batch: %+v, counts %+v", got, c)
	}
	if string(s.State().Checkpoint) != "cp-1" {
		t.Errorf("checkpoint %q, want cp-1", s.State().Checkpoint)
	}
}

// TestWindowHoldsAcrossWideBatches: a repeat 0.8 windows after its first
// record must be dropped even when its fetched batch reaches far beyond it
// in record time (a backlog read in large batches). Each record is decided
// at its own time, not at the newest time of its batch.
func TestWindowHoldsAcrossWideBatches(t *testing.T) {
	const windowMs = 4_000
	base := time.UnixMilli(1_700_000_000_000)
	s := openTestStage(t, Config{
		Key:         []partition.Field{{Source: partition.SourceJSON, Name: "id"}},
		Window:      windowMs * time.Millisecond,
		Generations: 4,
	}, func() time.Time { return base.Add(time.Hour) })
	rec := func(id string, atMs int64) Record {
		return Record{Record: partition.Record{Value: fmt.Appendf(nil, `{"id":%q}`, id)}, TimestampMs: base.UnixMilli() + atMs}
	}
	if _, _, err := s.Process([]Record{rec("K", 0)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(nil); err != nil {
		t.Fatal(err)
	}
	// One batch: the repeat of K at 0.8 windows, then records up to two
	// windows later.
	batch := []Record{rec("K", windowMs*8/10)}
	for i := range 10 {
		batch = append(batch, rec(fmt.Sprintf("x%d", i), windowMs+int64(i)*windowMs/10))
	}
	// And K again in the same batch after two windows: a new occurrence.
	batch = append(batch, rec("K", 2*windowMs+windowMs/2))
	out, _, err := s.Process(batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Verdict != DropHistory {
		t.Errorf("repeat of K 0.8 windows later: %v, want %v", out[0].Verdict, DropHistory)
	}
	if last := out[len(out)-1]; last.Verdict != Emit {
		t.Errorf("K 2.5 windows after its first record: %v, want %v (a new window)", last.Verdict, Emit)
	}
}

// TestCycleRepeatsAtEveryDistance: a key repeated inside the open cycle is
// dropped as DropBatch whether the repeat falls in the same probe chunk as
// its first record, in a later chunk of the batch, or in a later batch of
// the cycle, in record and in ingest time, also across a generation
// rotation inside the chunk; and the collapse set is asked only for the
// records the Bloom front or the chunk's own emits name, not for every
// new key.
func TestCycleRepeatsAtEveryDistance(t *testing.T) {
	for _, base := range []TimeBase{RecordTime, ProcessingTime} {
		t.Run(base.String(), func(t *testing.T) {
			now := time.UnixMilli(1_700_000_000_000)
			const windowMs = 400_000
			s := openTestStage(t, Config{
				Key:          []partition.Field{{Source: partition.SourceJSON, Name: "id"}},
				Window:       windowMs * time.Millisecond,
				Generations:  4,
				TimeBase:     base,
				ExpectedKeys: 1_000_000,
			}, func() time.Time { return now })
			at := now.UnixMilli()
			rec := func(id string) Record {
				at++
				return Record{Record: partition.Record{Value: fmt.Appendf(nil, `{"id":%q}`, id)}, TimestampMs: at}
			}
			const n = 3 * probeChunk
			var batch []Record
			wantDrop := map[int]bool{}
			for i := range n {
				switch {
				case i%probeChunk == 5: // 3 records after its first, same chunk
					batch = append(batch, rec(fmt.Sprintf("new%d", i-3)))
					wantDrop[i] = true
				case i >= probeChunk && i%probeChunk == 9: // a key of the previous chunk
					batch = append(batch, rec(fmt.Sprintf("new%d", i-probeChunk+1)))
					wantDrop[i] = true
				case i == probeChunk+100 || i == probeChunk+120:
					// On record time the next generation starts inside the
					// chunk, between a key's first record and its repeat:
					// the repeat meets the first in an older generation.
					if i == probeChunk+100 {
						at += windowMs / 3
					}
					batch = append(batch, rec(fmt.Sprintf("new%d", probeChunk+50)))
					wantDrop[i] = true
				default:
					batch = append(batch, rec(fmt.Sprintf("new%d", i)))
				}
			}
			g0 := s.Generation()
			out, c, err := s.Process(batch, nil)
			if err != nil {
				t.Fatal(err)
			}
			if base == RecordTime && s.Generation() == g0 {
				t.Fatal("the window did not rotate inside the batch: the test must cover a rotation")
			}
			for i, d := range out {
				if want := map[bool]Verdict{true: DropBatch, false: Emit}[wantDrop[i]]; d.Verdict != want {
					t.Fatalf("record %d (%s): %v, want %v", i, batch[i].Value, d.Verdict, want)
				}
			}
			if s.cycleGets > uint64(len(wantDrop))+n/4 {
				t.Errorf("%d collapse-set lookups for %d records of which %d repeat the cycle: the masks should spare the new keys", s.cycleGets, n, len(wantDrop))
			}
			// A later batch of the same cycle repeats the first batch's
			// keys: all in the Bloom front now.
			again := []Record{rec("new0"), rec("new300"), rec("brand-new")}
			out, _, err = s.Process(again, out[:0])
			if err != nil {
				t.Fatal(err)
			}
			if out[0].Verdict != DropBatch || out[1].Verdict != DropBatch || out[2].Verdict != Emit {
				t.Fatalf("second batch of the cycle: %+v, want DropBatch, DropBatch, Emit", out)
			}
			if c.DroppedBatch != uint64(len(wantDrop)) {
				t.Errorf("DroppedBatch %d, want %d", c.DroppedBatch, len(wantDrop))
			}
		})
	}
}
