package statestore

import (
	"runtime"
	"testing"

	"github.com/dedupstream/dedupstream/partition"
)

// TestBatchGrow: after Grow(n) the next n Puts allocate nothing, on a new
// batch and on one a Commit reset.
func TestBatchGrow(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	defer s.Close()
	const n = 5000
	var i uint64
	puts := func(b *Batch) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			i++
			b.Put(1, partition.Hash{Hi: i, Lo: ^i}, 0)
		}
		runtime.ReadMemStats(&after)
		return after.Mallocs - before.Mallocs
	}
	b := s.NewBatch()
	b.Grow(n)
	if allocs := puts(b); allocs != 0 {
		t.Fatalf("%d Puts after Grow(%d): %d allocations, want 0", n, n, allocs)
	}
	if b.Len() != n {
		t.Fatalf("Len = %d, want %d", b.Len(), n)
	}
	if _, err := s.Commit(b, State{Generation: 1}); err != nil {
		t.Fatal(err)
	}
	b.Grow(2 * n)
	if allocs := puts(b) + puts(b); allocs != 0 {
		t.Fatalf("%d Puts after a Commit and Grow(%d): %d allocations, want 0", 2*n, 2*n, allocs)
	}
}
