package statestore

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

// TestMergeScan: merges read their inputs' blocks themselves and, at a
// block they cannot decode, hand the rest of the run to a Pebble iterator
// placed after the last pack read (forced here after 0, 1, 2 and 5
// blocks of every input; -1: never). Every key stays findable, and a scan
// of the generation yields each one once, in hash order.
func TestMergeScan(t *testing.T) {
	for _, after := range []int{-1, 0, 1, 2, 5} {
		t.Run(fmt.Sprintf("pebble-after=%d", after), func(t *testing.T) {
			defer func(old int) { scanPebbleAfter = old }(scanPebbleAfter)
			scanPebbleAfter = after
			s := mustOpen(t, "s", testOptions(vfs.NewMem()))
			defer mustClose(t, s)
			keys := fillIndexes(t, s, 1, 0, 3*s.merge.fanout)
			if err := s.settle(); err != nil {
				t.Fatal(err)
			}
			blocks, handovers := s.scannedBlocks.Load(), s.scanHandovers.Load()
			t.Logf("merged keys %d, blocks scanned %d, runs handed over %d", s.mergedKeys, blocks, handovers)
			if s.mergedKeys == 0 {
				t.Fatal("no merge ran")
			}
			if (handovers > 0) != (after >= 0) || (blocks > 0) != (after != 0) {
				t.Fatalf("blocks scanned %d, runs handed over %d with the handover after %d blocks", blocks, handovers, after)
			}
			mustFind(t, s, 1, keys, "after the merges")
			var got []partition.Hash
			if err := s.ScanGeneration(1, func(h partition.Hash, _ uint64) error {
				got = append(got, h)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(keys)
			slices.SortFunc(want, func(x, y partition.Hash) int {
				if c := cmpU64(x.Hi, y.Hi); c != 0 {
					return c
				}
				return cmpU64(x.Lo, y.Lo)
			})
			if !slices.Equal(got, want) {
				t.Fatalf("scan: %d keys, want %d (sorted, each once)", len(got), len(want))
			}
		})
	}
}
