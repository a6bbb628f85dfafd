package sizing

import (
	"testing"

	"github.com/dedupstream/dedupstream/config"
)

func cfg(memory, memtable config.ByteSize, keys uint, fpr float64) *config.Config {
	c := &config.Config{}
	c.State.Memory, c.State.MemTableSize = memory, memtable
	c.Dedup.ExpectedKeys, c.Dedup.FalsePositiveRate = keys, fpr
	c.ApplyDefaults()
	return c
}

// The worked examples of docs/deploy.md, computed by hand from the figures.
func TestSize(t *testing.T) {
	c := cfg(1<<30, 0, 1_000_000, 0.01)
	// Six stages under 1 GiB: memtables of 1 GiB / 2 / (3 x 6) rounded
	// down to 64 KiB = 29,818,880 B; per partition two indexes of that
	// size + 3.5 B x 1M = 63,137,760 B.
	if got := MemoryPerStage(c, 6); got != 63_137_760 {
		t.Fatalf("MemoryPerStage = %v", got)
	}
	for _, tc := range []struct {
		name                string
		in                  Inputs
		memStages, cpuStage int
		mem, limit          int64 // MiB
		cpu                 int64 // millicores
		disk                int64 // GiB
	}{
		// 64 MiB + 1 GiB + 6 x 63,137,760 B = 1449.27 MiB -> 1450; x1.25 = 1811.6 -> 1813 (of the exact bytes, rounded up).
		// CPU 4 x 20k x 5.18 us = 0.415 cores -> 500m.
		// Disk 12 x (1.25M x 22.6 x 2 + 3 x 29,818,880) = 1.77 GiB -> 2.
		{"group 12 on 3", Inputs{Partitions: 12, Replicas: 3, RecordsPerSecond: 20000}, 6, 4, 1450, 1813, 500, 2},
		// One replica: nobody to fail over to; sized for all 12 (memtables
		// 1 GiB / 72 -> 14,876,672 B): 1088 + 12 x (2 x 14,876,672 + 3.5M) B = 1468.55 -> 1469.
		{"group 12 on 1", Inputs{Partitions: 12, Replicas: 1, RecordsPerSecond: 1000}, 12, 12, 1469, 1837, 100, 2},
		// More replicas than partitions: one partition each, two after a
		// failure; sized for one stage (memtables 32 MiB, the cap):
		// 1088 + 1 x (64 MiB + 3.5M B) = 1155.3 MiB -> 1156.
		{"group 4 on 6", Inputs{Partitions: 4, Replicas: 6, RecordsPerSecond: 100000}, 1, 1, 1156, 1445, 600, 1},
		// Static: the largest file (memtables 1 GiB / 24 -> 44,695,552 B,
		// capped at 32 MiB): 1088 + 4 x (2 x 32 MiB + 3.5M B) = 1357.4 ->
		// 1358; disk for the file only.
		{"static 4,4,4", Inputs{Partitions: 12, Replicas: 3, RecordsPerSecond: 20000, StaticShares: []int{4, 4, 4}}, 4, 4, 1358, 1698, 500, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Size(c, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			got := []int64{int64(p.MemoryStages), int64(p.CPUStages), p.MemoryRequest >> 20, p.MemoryLimit >> 20, p.CPURequestMilli, p.DiskBytes >> 30}
			want := []int64{int64(tc.memStages), int64(tc.cpuStage), tc.mem, tc.limit, tc.cpu, tc.disk}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("plan %+v: field %d = %d, want %d", p, i, got[i], want[i])
				}
			}
		})
	}
	// A lower false-positive rate costs Bloom bytes: 0.1 % is 1.5x the
	// bits of 1 %, so 2.33 B/key becomes 3.495 B/key.
	if d := MemoryPerStage(cfg(1<<30, 0, 1_000_000, 0.001), 6) - MemoryPerStage(c, 6); d < 1_164_000 || d > 1_166_000 {
		t.Errorf("0.1%% instead of 1%%: %v more bytes per partition, want ~1.165M", d)
	}
	if _, err := Size(c, Inputs{Partitions: 0, Replicas: 1}); err == nil {
		t.Error("0 partitions accepted")
	}
}
