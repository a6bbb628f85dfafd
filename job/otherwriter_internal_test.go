package job

import (
	"testing"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/sink"
)

// TestForeignBatch: between a stage's own records only another
// producer's record batches count as another writer; transaction markers
// pass, whoever wrote them (a coordinator that failed over writes a
// commit's markers again), and so do batches of the stage's own producer id.
func TestForeignBatch(t *testing.T) {
	const pid = 7
	marker := func(off, p int64) fetch.BatchHead {
		return fetch.BatchHead{BaseOffset: off, LastOffset: off, ProducerID: p, Control: true}
	}
	data := func(off, p int64) fetch.BatchHead {
		return fetch.BatchHead{BaseOffset: off, LastOffset: off + 2, ProducerID: p}
	}
	for _, tc := range []struct {
		name  string
		heads []fetch.BatchHead
		want  int64 // base offset of the foreign batch, -1: none
	}{
		{"nothing read", nil, -1},
		{"our marker twice", []fetch.BatchHead{marker(10, pid), marker(11, pid)}, -1},
		{"another producer's marker", []fetch.BatchHead{marker(10, 3)}, -1},
		{"our own records", []fetch.BatchHead{data(10, pid)}, -1},
		{"records without a producer id", []fetch.BatchHead{marker(9, pid), data(10, -1)}, 10},
		{"another producer's records after a marker", []fetch.BatchHead{marker(9, pid), data(10, 3), data(13, 4)}, 10},
	} {
		h, ok := foreignBatch(tc.heads, pid)
		if got := map[bool]int64{true: h.BaseOffset, false: -1}[ok]; got != tc.want {
			t.Errorf("%s: foreign batch at %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestOwnTailReadsTheMarkerSlot: the gap a cycle's records leave after the
// last commit is read from that commit's marker slot, so that a record
// another writer appended between the commit's last batch and its marker
// (which then lands one further) is in the range read; after recovery the
// range starts at the partition's end. Records landing right at the tail
// leave no gap.
func TestOwnTailReadsTheMarkerSlot(t *testing.T) {
	span := func(first, next int64) sink.Span {
		return sink.Span{First: first, Next: next, Exact: true, ForeignFrom: -1, ForeignTo: -1}
	}
	var tail ownTail
	tail.committed(span(838, 873), true) // records 838-872, the marker expected at 873
	if _, _, gap := tail.check(span(874, 900)); gap {
		t.Errorf("records right after the marker: a gap")
	}
	// A foreign record took 873, the marker went to 874.
	if from, to, gap := tail.check(span(875, 900)); !gap || from != 873 || to != 875 {
		t.Errorf("records after a displaced marker: gap %v [%d, %d), want [873, 875)", gap, from, to)
	}
	tail.recovered(fetch.Offsets{Latest: 950, LastStable: 950})
	if from, to, gap := tail.check(span(952, 960)); !gap || from != 950 || to != 952 {
		t.Errorf("after recovery: gap %v [%d, %d), want [950, 952)", gap, from, to)
	}
	tail.forget()
	if _, _, gap := tail.check(span(990, 999)); gap {
		t.Errorf("unknown tail: a gap")
	}
}
