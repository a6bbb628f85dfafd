package statestore

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

func TestExpireDropsBuckets(t *testing.T) {
	const ngen, perGen = 10, 30_000 // 300k keys
	opts := testOptions(vfs.NewMem())
	opts.MemTableSize = 4 << 20
	s := mustOpen(t, "db", opts)
	defer mustClose(t, s)
	loadGens(t, s, ngen, perGen)
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	before := s.DiskUsage()
	tablesBefore := s.db.Metrics().Table.Local.LiveSize

	gens, err := s.Generations()
	if err != nil {
		t.Fatal(err)
	}
	if len(gens) != ngen {
		t.Fatalf("Generations before expiry: %d buckets, want %d", len(gens), ngen)
	}
	for _, g := range gens {
		// After a full compaction every key lives in an sstable exactly once.
		if g.Keys < perGen*9/10 || g.Keys > perGen*11/10 || g.Bytes == 0 {
			t.Errorf("gen %d: Keys %d Bytes %d, want ~%d keys", g.Gen, g.Keys, g.Bytes, perGen)
		}
	}

	if err := s.Expire(8); err != nil {
		t.Fatal(err)
	}
	// Expired keys are invisible at once, before any compaction.
	if _, found, err := s.Get(7, keyOf(7, 0)); err != nil || found {
		t.Fatalf("Get in expired gen 7 = %t, %v", found, err)
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	// Pebble deletes obsolete files in the background after a compaction.
	after := s.DiskUsage()
	for deadline := time.Now().Add(5 * time.Second); after > before/2 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		after = s.DiskUsage()
	}
	m := s.db.Metrics()
	t.Logf("disk usage: %d bytes before Expire(8), %d after compaction (WAL %d+%d, tables %d+%d obsolete, %d before)", before, after,
		m.WAL.PhysicalSize, m.WAL.ObsoletePhysicalSize, m.Table.Local.LiveSize, m.Table.Local.ObsoleteSize, tablesBefore)
	// 3 of 10 buckets remain: the sstables shrink to ~30 %, the whole
	// store (with a recycled WAL and the manifest) to ~40 %.
	if after > before*45/100 {
		t.Errorf("disk usage dropped from %d to only %d", before, after)
	}
	if tables := m.Table.Local.LiveSize; tables > tablesBefore*33/100 {
		t.Errorf("sstables shrank from %d to only %d bytes", tablesBefore, tables)
	}

	for g := uint64(1); g <= ngen; g++ {
		var n int
		if err := s.ScanGeneration(g, func(partition.Hash, uint64) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		want := 0
		if g >= 8 {
			want = perGen
		}
		if n != want {
			t.Errorf("gen %d holds %d keys, want %d", g, n, want)
		}
		for j := uint64(0); j < perGen; j += 997 {
			_, found, err := s.Get(g, keyOf(g, j))
			if err != nil || found != (g >= 8) {
				t.Fatalf("Get(gen %d, key %d) = %t, %v; want %t", g, j, found, err, g >= 8)
			}
		}
	}
	gens, err = s.Generations()
	if err != nil {
		t.Fatal(err)
	}
	if len(gens) != 3 || gens[0].Gen != 8 || gens[2].Gen != 10 {
		t.Fatalf("Generations after Expire(8) = %+v, want 8..10", gens)
	}
}
