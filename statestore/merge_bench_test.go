package statestore

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/partition"
)

// BenchmarkMergePolicy compares merge policies on one scaled-down shape of
// the 100M-key sweep: MERGE_KEYS keys (default 4M) in 10k-key commits over
// 4 generations, 2 MiB indexes (43.7k keys per leaf run, so a generation
// is ~23 leaves; the sweep's 100M keys in 64 MiB indexes is ~18) and a
// 16 MiB block cache (the sweep's cache holds about a tenth of its data;
// this one about an eighth). Per variant it reports:
//
//   - keys/s: wall clock over the fill, and stall-ms: how long its Commits
//     waited at handovers for the previous index's flush;
//   - cpu-us/key: process CPU per key over the fill, flushes and merges
//     included (the fill ends with the store settled), and last-cpu-us/key
//     over its last tenth;
//   - rewrites/key: keys written by merges per key stored;
//   - runs: the runs the store holds at the end;
//   - confirm-cpu-ns / miss-cpu-ns: CPU per Reader.Lookup of a present key
//     of a random generation, and of an absent one (a Bloom false positive
//     of the front), one Reader refreshed per 2000 reads as the stage does.
//
// Variants (MERGE_VARIANTS=name,... selects): fanout 4 (the default), 8 and
// 16; fanout 4 with merged runs capped at 16 leaves' worth ("cap16"); fanout
// 4 with merged runs written as sstables of at most 4 leaves' worth
// ("split4"), and fanout 8 so ("fanout8-split4"); fanout 8 with excised
// inputs on the merger ("fanout8-excise", the default) and with the merges
// run by the flusher between flushes ("fanout8-inline"). Run them interleaved,
// one process per variant and round (-count repeats each variant in a row):
//
//	for r in 1 2 3; do for v in fanout4 fanout8; do
//	  MERGE_VARIANTS=$v go test ./statestore/ -run '^$' -bench MergePolicy -benchtime 1x
//	done; done
func BenchmarkMergePolicy(b *testing.B) {
	n := 4_000_000
	if v := os.Getenv("MERGE_KEYS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	// RUN_FILTER_BITS sets the run filters' bits per key (default 10).
	if v := os.Getenv("RUN_FILTER_BITS"); v != "" {
		bitsPerKey, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		defer func(old uint64) { runFilterBitsPerKey = old }(runFilterBitsPerKey)
		runFilterBitsPerKey = bitsPerKey
	}
	const memTable = 2 << 20
	base := (&Options{MemTableSize: memTable}).memKeys()
	variants := []struct {
		name      string
		p         mergePolicy
		packKeys  int // 0: the default
		blockSize int // 0: the default
	}{
		{"fanout4", mergePolicy{fanout: 4}, 0, 0},
		{"fanout8", mergePolicy{fanout: 8}, 0, 0},
		{"fanout16", mergePolicy{fanout: 16}, 0, 0},
		{"fanout32", mergePolicy{fanout: 32, excise: true}, 0, 0},
		{"cap16", mergePolicy{fanout: 4, maxKeys: 16 * base}, 0, 0},
		{"split4", mergePolicy{fanout: 4, splitKeys: 4 * base}, 0, 0},
		{"fanout8-split4", mergePolicy{fanout: 8, splitKeys: 4 * base}, 0, 0},
		{"fanout8-excise", mergePolicy{fanout: 8, excise: true}, 0, 0},
		{"fanout8-inline", mergePolicy{fanout: 8, excise: true, inline: true}, 0, 0},
		{"leaves", mergePolicy{fanout: 8, excise: true, maxKeys: base}, 0, 0},
		// The default policy in packs of 1 (a Pebble KV per hash, like
		// layout 2), 16, 64 (the default) and 256 hashes, and 64 in 16, 2
		// and 1 KiB blocks; fanout 32 (no merge in a generation of the
		// sweep's shape). Sessions 14-15 measured the last three, not kept
		// (docs/benchmarks.md).
		{"pack1", mergePolicy{fanout: 8, excise: true}, 1, 0},
		{"pack16", mergePolicy{fanout: 8, excise: true}, 16, 0},
		{"pack64", mergePolicy{fanout: 8, excise: true}, 64, 0},
		{"pack256", mergePolicy{fanout: 8, excise: true}, 256, 0},
		{"pack64-block16k", mergePolicy{fanout: 8, excise: true}, 64, 16 << 10},
		{"pack64-block1k", mergePolicy{fanout: 8, excise: true}, 64, 1 << 10},
		{"pack64-block2k", mergePolicy{fanout: 8, excise: true}, 64, 2 << 10},
		// Run sstables written through Pebble's 4 KiB file buffer.
		{"pack64-buf4k", mergePolicy{fanout: 8, excise: true}, 64, 0},
	}
	variants = pickNamed(os.Getenv("MERGE_VARIANTS"), variants, func(i int) string { return variants[i].name })
	for _, vr := range variants {
		b.Run(fmt.Sprintf("keys=%s/%s", countName(n), vr.name), func(b *testing.B) {
			for b.Loop() {
				o := Options{MemTableSize: memTable, CacheSize: 16 << 20, merge: vr.p, packKeys: vr.packKeys}
				if vr.name == "pack64-buf4k" {
					o.runWriteBuf = 4096
				}
				if vr.blockSize > 0 {
					o.tune = blockSize(vr.blockSize)
				}
				s := benchOpen(b, o)
				mergeFill(b, s, n, 4)
			}
		})
	}
}

func mergeFill(b *testing.B, s *Store, n, gens int) {
	l := &runsLayout{s: s}
	defer func() { _ = l.rd.Close() }()
	const commitKeys = 10_000
	perGen := (n + gens - 1) / gens
	hs := make([]partition.Hash, commitKeys)
	runtime.GC()
	cpu, wall := cpuTime(), time.Now()
	var lastCPU time.Duration
	for i := 0; i < n; i += commitKeys {
		if i >= n-n/10 && lastCPU == 0 {
			lastCPU = cpuTime()
		}
		for j := range hs {
			hs[j] = keyOf(1, uint64(i+j))
		}
		if err := l.commit(uint64(i/perGen), hs); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.settle(); err != nil {
		b.Fatal(err)
	}
	end := cpuTime()
	b.ReportMetric(float64(n)/time.Since(wall).Seconds(), "keys/s")
	b.ReportMetric(float64(s.stallNanos.Load())/1e6, "stall-ms")
	b.ReportMetric(float64((end-cpu).Nanoseconds())/1e3/float64(n), "cpu-us/key")
	b.ReportMetric(float64((end-lastCPU).Nanoseconds())/1e3/float64(n/10), "last-cpu-us/key")
	b.ReportMetric(float64(s.mergedKeys)/float64(n), "rewrites/key")
	runs := 0
	for _, rs := range s.runs.Load().gens {
		runs += len(rs)
	}
	b.ReportMetric(float64(runs), "runs")
	b.ReportMetric(runDiskBytes(s, n), "disk-B/key")
	// Pebble's own compactions (layout 2 means to leave it nothing to
	// compact), and quiet before the reads so that their CPU is theirs.
	time.Sleep(100 * time.Millisecond)
	for s.db.Metrics().Compact.NumInProgress > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	var compacted uint64
	for _, lv := range s.db.Metrics().Levels {
		compacted += lv.TableBytesCompacted
	}
	b.ReportMetric(float64(compacted)/float64(n), "compacted-B/key")
	runtime.GC()

	const reads, perReader = 20_000, 2000
	rng := rand.New(rand.NewPCG(1, 2))
	probe := func(absent bool) time.Duration {
		start, wall := cpuTime(), time.Now()
		defer func() {
			name := "confirm-wall-ns"
			if absent {
				name = "miss-wall-ns"
			}
			b.ReportMetric(float64(time.Since(wall).Nanoseconds()/reads), name)
		}()
		for i := 0; i < reads; i++ {
			if i%perReader == 0 {
				if err := l.openReader(); err != nil {
					b.Fatal(err)
				}
			}
			j := rng.Uint64N(uint64(n))
			h := keyOf(1, j)
			if absent {
				h = keyOf(99, j)
			}
			found, err := l.lookup(j/uint64(perGen), h)
			if err != nil {
				b.Fatal(err)
			}
			if found == absent {
				b.Fatalf("key %d: found %t", j, found)
			}
		}
		return (cpuTime() - start) / reads
	}
	// MERGE_READPROF=file profiles the reads alone.
	if f := os.Getenv("MERGE_READPROF"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			b.Fatal(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = out.Close()
		}()
	}
	b.ReportMetric(float64(probe(false).Nanoseconds()), "confirm-cpu-ns")
	b.ReportMetric(float64(probe(true).Nanoseconds()), "miss-cpu-ns")
}
