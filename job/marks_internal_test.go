package job

import (
	"math"
	"reflect"
	"strings"
	"testing"
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
		big = append(big, genMark{math.MaxUint64 - 64 + i, math.MaxInt64 - 64 + int64(i)})
	}
	topic := strings.Repeat("t", 249)
	meta := offsetMeta(math.MaxInt32, topic, math.MaxInt64, big, math.MaxInt64)
	if got := parseOffsetMeta(meta).marks; len(meta) > maxOffsetMetaLen || !reflect.DeepEqual(got, big) {
		t.Errorf("65 marks of the largest numbers: %d bytes of metadata (bound %d), %d marks read back", len(meta), maxOffsetMetaLen, len(got))
	}
	var huge genMarks
	for i := range int64(200) {
		huge = append(huge, genMark{math.MaxUint64 - 199 + uint64(i), math.MaxInt64 - 199 + i})
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
			if g, ok := m.genAt(k.off); !ok || int64(k.gen)*tc.to > int64(g)*tc.from {
				t.Errorf("%s: mark %d (%v) starts after the old mark at its offset", tc.name, i, k)
			}
		}
	}
}
