package job

import (
	"testing"

	"github.com/dedupstream/dedupstream/fetch"
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
