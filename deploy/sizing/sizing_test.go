package sizing

import (
	"testing"

	"github.com/dedupstream/dedupstream/config"
)

func cfg(cache, memtable config.ByteSize, keys uint, fpr float64) *config.Config {
	c := &config.Config{}
	c.State.CacheSize, c.State.MemTableSize = cache, memtable
	c.Dedup.ExpectedKeys, c.Dedup.FalsePositiveRate = keys, fpr
	c.ApplyDefaults()
	return c
}

// The worked examples of docs/deploy.md, computed by hand from the figures.
func TestSize(t *testing.T) {
	c := cfg(128<<20, 64<<20, 1_000_000, 0.01)
	// Per partition: 128 MiB + 3 x 64 MiB + 7.4 B x 1M = 342,944,320 B.
	if got := MemoryPerStage(c); got != 342_944_320 {
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
		// 64 MiB + 6 x 342,944,320 B = 2026.4 MiB -> 2027; x1.25 = 2533.75 -> 2534.
		// CPU 4 x 20k x 5.18 us = 0.415 cores -> 500m. Disk 12 x (1.25M x 22.6 x 2 + 192 MiB) = 2.88 GiB -> 3.
		{"group 12 on 3", Inputs{Partitions: 12, Replicas: 3, RecordsPerSecond: 20000}, 6, 4, 2027, 2534, 500, 3},
		// One replica: nobody to fail over to; sized for all 12.
		{"group 12 on 1", Inputs{Partitions: 12, Replicas: 1, RecordsPerSecond: 1000}, 12, 12, 3989, 4987, 100, 3},
		// More replicas than partitions: one partition each, two after a failure.
		{"group 4 on 6", Inputs{Partitions: 4, Replicas: 6, RecordsPerSecond: 100000}, 1, 1, 392, 490, 600, 1},
		// Static: the largest file; disk for the file only.
		{"static 4,4,4", Inputs{Partitions: 12, Replicas: 3, RecordsPerSecond: 20000, StaticShares: []int{4, 4, 4}}, 4, 4, 1373, 1717, 500, 1},
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
	// bits of 1 %, so 2.02 B/key becomes 3.03 B/key.
	if d := MemoryPerStage(cfg(128<<20, 64<<20, 1_000_000, 0.001)) - MemoryPerStage(c); d < 1_009_000 || d > 1_011_000 {
		t.Errorf("0.1%% instead of 1%%: %v more bytes per partition, want ~1.01M", d)
	}
	if _, err := Size(c, Inputs{Partitions: 0, Replicas: 1}); err == nil {
		t.Error("0 partitions accepted")
	}
}
