package job

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/pipeline"
)

// TestGenMarks: a cycle ending in a newer generation adds a mark, one in
// the same generation does not; the generation of an output offset is
// that of the newest mark at or before it; live drops the marks of
// expired generations; the marks round-trip through the offsets'
// metadata, which stays within its bound with 65 marks of the largest
// numbers and a topic name of Kafka's longest.
func TestGenMarks(t *testing.T) {
	var m genMarks
	m = m.note(10, 0)
	m = m.note(10, 40) // same generation: no mark
	m = m.note(12, 90)
	m = m.note(13, 90) // a cycle without output: the same offset
	m = m.note(15, 200)
	want := genMarks{{10, 0}, {12, 90}, {13, 90}, {15, 200}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("marks %v, want %v", m, want)
	}
	for _, tc := range []struct {
		off  int64
		gen  uint64
		okay bool
	}{{0, 10, true}, {89, 10, true}, {90, 13, true}, {199, 13, true}, {200, 15, true}, {math.MaxInt64, 15, true}} {
		if g, ok := m.genAt(tc.off); g != tc.gen || ok != tc.okay {
			t.Errorf("genAt(%d) = %d, %t; want %d, %t", tc.off, g, ok, tc.gen, tc.okay)
		}
	}
	if g, ok := m.live(12).genAt(50); ok {
		t.Errorf("offset 50 of expired generation 10 still has a generation (%d) once 12 is the oldest live", g)
	}
	if got := m.live(14); !reflect.DeepEqual(got, genMarks{{15, 200}}) {
		t.Errorf("live(14) = %v", got)
	}
	if got := m.live(16); got != nil {
		t.Errorf("live(16) = %v, want none", got)
	}
	if got := parseOffsetMeta(offsetMeta(4, "o", 250, m, 900_000)).marks; !reflect.DeepEqual(got, m) {
		t.Errorf("round trip: %v, want %v", got, m)
	}

	var big genMarks
	for i := range uint64(65) {
		big = append(big, GenMark{math.MaxUint64 - 64 + i, math.MaxInt64 - 64 + int64(i)})
	}
	topic := strings.Repeat("t", 249)
	meta := offsetMeta(math.MaxInt32, topic, math.MaxInt64, big, math.MaxInt64)
	if got := parseOffsetMeta(meta).marks; len(meta) > maxOffsetMetaLen || !reflect.DeepEqual(got, big) {
		t.Errorf("65 marks of the largest numbers: %d bytes of metadata (bound %d), %d marks read back", len(meta), maxOffsetMetaLen, len(got))
	}
	var huge genMarks
	for i := range int64(200) {
		huge = append(huge, GenMark{math.MaxUint64 - 199 + uint64(i), math.MaxInt64 - 199 + i})
	}
	meta = offsetMeta(4, topic, 1, huge, math.MaxInt64)
	got := parseOffsetMeta(meta).marks
	if len(meta) > maxOffsetMetaLen || len(got) == 0 || got[len(got)-1] != huge[len(huge)-1] {
		t.Errorf("200 marks: %d bytes of metadata (bound %d), kept %d ending %v: want the newest kept within the bound", len(meta), maxOffsetMetaLen, len(got), got[len(got)-1:])
	}
}

// TestGenMarksInSpan: marks read in another generation span name the
// start of their old generation's time, rounded down to the new span's
// generation; marks falling into one new generation keep the first
// offset; the same span leaves them as they are, and a generation whose
// start overflows Unix milliseconds drops them all.
func TestGenMarksInSpan(t *testing.T) {
	m := genMarks{{10, 0}, {11, 40}, {13, 90}}
	for _, tc := range []struct {
		name     string
		from, to int64
		want     genMarks
	}{
		{"same span", 900, 900, m},
		{"span doubled", 900, 1800, genMarks{{5, 0}, {6, 90}}},
		{"span halved", 900, 450, genMarks{{20, 0}, {22, 40}, {26, 90}}},
		{"span 15m to 10m", 15, 10, genMarks{{15, 0}, {16, 40}, {19, 90}}},
		{"overflow", math.MaxInt64 / 11, 1, nil},
	} {
		if got := m.inSpan(tc.from, tc.to); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: inSpan(%d, %d) = %v, want %v", tc.name, tc.from, tc.to, got, tc.want)
		}
		// Every mark stays a lower bound: its new generation starts at or
		// before its old one.
		for i, k := range m.inSpan(tc.from, tc.to) {
			if g, ok := m.genAt(k.Offset); !ok || int64(k.Gen)*tc.to > int64(g)*tc.from {
				t.Errorf("%s: mark %d (%v) starts after the old mark at its offset", tc.name, i, k)
			}
		}
	}
}

// TestStoreMarks: a recovery whose offsets carry no marks takes the
// store's only from a checkpoint of the job's output topic, only those of
// the output before its output offset (known up to it), and in the span
// in force; otherwise none, known nowhere.
func TestStoreMarks(t *testing.T) {
	ck := Checkpoint{Output: 200, OutputTopic: "o", Marks: []GenMark{{10, 0}, {12, 90}, {15, 200}, {16, 250}}, MarksSpan: 900}
	other, unknown, empty, first := ck, ck, ck, ck
	other.OutputTopic, unknown.OutputTopic, empty.Marks, first.Output = "p", "", nil, 0
	for _, tc := range []struct {
		name   string
		ck     Checkpoint
		spanMs int64
		want   genMarks
		end    int64
	}{
		{"this output", ck, 900, genMarks{{10, 0}, {12, 90}}, 200},
		{"span doubled", ck, 1800, genMarks{{5, 0}, {6, 90}}, 200},
		{"another output", other, 900, nil, math.MaxInt64},
		{"output unknown", unknown, 900, nil, math.MaxInt64},
		{"no marks", empty, 900, nil, math.MaxInt64},
		{"none before the output offset", first, 900, nil, math.MaxInt64},
	} {
		if got, end := storeMarks(tc.ck, "o", tc.spanMs); !reflect.DeepEqual(got, tc.want) || end != tc.end {
			t.Errorf("%s: storeMarks = %v, %d; want %v, %d", tc.name, got, end, tc.want, tc.end)
		}
	}
}

// TestTailMarks: past the marks known, a restore notes a mark for each
// record whose time on the stage clock is in a newer generation than the
// newest mark's (a record stamped past max_future_skew counts as the wall
// clock, as the stage counts it), and none before its first offset nor
// for a record without a business key (the restore leaves it out).
func TestTailMarks(t *testing.T) {
	pc := pipeline.Config{Window: time.Hour, Generations: 4, MaxFutureSkew: time.Minute}
	pc.ApplyDefaults()
	wall := time.UnixMilli(100 * 900_000)
	at := func(gen int64) time.Time { return time.UnixMilli(gen*900_000 + 1) }
	tm := &tailMarks{pc: &pc, clock: func() time.Time { return wall }, spanMs: pc.SpanMs(), from: 5, gen: 10}
	b := &fetch.Batch{Records: []fetch.Record{
		{Offset: 3, Timestamp: at(20)}, // before the tail: the store's marks say
		{Offset: 5, Timestamp: at(10)},
		{Offset: 6, Timestamp: at(12)},
		{Offset: 7, Timestamp: at(11)}, // late: the clock stays in 12
		{Offset: 8, Timestamp: at(14)}, // no business key
		{Offset: 9, Timestamp: at(13)},
		{Offset: 10, Timestamp: at(500)}, // stamped ahead: counts as the wall clock
	}, NextOffset: 11}
	all := func(int) bool { return true }
	want := []GenMark{{12, 6}, {13, 9}, {100, 10}}
	if got := tm.note(nil, b, func(i int) bool { return b.Records[i].Offset != 8 }); !reflect.DeepEqual(got, want) {
		t.Errorf("marks %v, want %v", got, want)
	}
	if got := tm.note(nil, &fetch.Batch{Records: []fetch.Record{{Offset: 11, Timestamp: at(99)}}, NextOffset: 12}, all); got != nil {
		t.Errorf("marks %v after the clock reached generation 100, want none", got)
	}
	none := &tailMarks{pc: &pc, clock: tm.clock, spanMs: pc.SpanMs(), from: math.MaxInt64}
	if got := none.note(nil, b, all); got != nil {
		t.Errorf("marks %v with the marks known for the whole output, want none", got)
	}
}

// TestCommittedMarks: of the metadata committed with a stage's inputs, the
// one with the newest marks counts, wherever it is in the list: an input
// put back into input.topics carries the marks of the last commit that
// included it (TestRawTopicReadded).
func TestCommittedMarks(t *testing.T) {
	stale := offsetMeta(4, "o", 40, genMarks{{10, 0}, {11, 30}}, 900_000)
	current := offsetMeta(4, "o", 900, genMarks{{11, 30}, {14, 700}}, 900_000)
	migrated := offsetMeta(4, "o", -1, genMarks{{11, 30}, {14, 700}}, 900_000)
	for _, tc := range []struct {
		name string
		meta []string
		want int64 // the newest mark's offset; -1: none
	}{
		{"stale first", []string{stale, current}, 700},
		{"stale last", []string{current, stale}, 700},
		{"reset beside", []string{"", stale}, 30},
		{"migrated and stale", []string{stale, migrated}, 700},
		{"none", []string{"", "other"}, -1},
	} {
		om, ok := committedMarks(tc.meta)
		got := int64(-1)
		if ok {
			got = om.marks[len(om.marks)-1].Offset
		}
		if got != tc.want {
			t.Errorf("%s: newest mark at %d, want %d", tc.name, got, tc.want)
		}
	}
}
