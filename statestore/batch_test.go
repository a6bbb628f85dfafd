package statestore

import (
	"runtime"
	"testing"

	"github.com/dedupstream/dedupstream/partition"
)

// TestBatchGrow: after Grow(n) the next n Puts allocate nothing, on a new
// batch and on one a Commit reset. The count is the process's, so the
// store's own goroutines may add to it: the fewest of three tries counts.
func TestBatchGrow(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	defer s.Close()
	const n = 5000
	var i uint64
	// puts grows b by k*n, then puts k*n keys, and returns the
	// allocations of the puts.
	puts := func(b *Batch, k int) uint64 {
		b.Reset()
		b.Grow(k * n)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range k * n {
			i++
			b.Put(1, partition.Hash{Hi: i, Lo: ^i}, 0)
		}
		runtime.ReadMemStats(&after)
		return after.Mallocs - before.Mallocs
	}
	fewest := func(try func() uint64) uint64 {
		m := try()
		for range 2 {
			m = min(m, try())
		}
		return m
	}
	if allocs := fewest(func() uint64 { return puts(s.NewBatch(), 1) }); allocs != 0 {
		t.Fatalf("%d Puts after Grow(%d) on a new batch: %d allocations, want 0", n, n, allocs)
	}
	b := s.NewBatch()
	puts(b, 1)
	if b.Len() != n {
		t.Fatalf("Len = %d, want %d", b.Len(), n)
	}
	if _, err := s.Commit(b, State{Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if allocs := fewest(func() uint64 { return puts(b, 3) }); allocs != 0 {
		t.Fatalf("%d Puts after a Commit and Grow(%d): %d allocations, want 0", 3*n, 3*n, allocs)
	}
}
