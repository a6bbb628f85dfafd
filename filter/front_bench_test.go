package filter

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/dedupstream/dedupstream/partition"
)

// BenchmarkFront100M compares, in one run, ways of probing the front of a
// 100M-key window (4 generations of 25M keys at 1 %, about 165 MB of
// bitsets, the dsbench sweep's largest size) with keys whose blocks are
// far beyond the caches. It fills the window once (about half a minute),
// so it runs only with FILTER_BENCH_100M=1; FILTER_BENCH_ROUNDS (default 5)
// repeats every variant, round after round, so that a loaded machine
// slows all of them alike. Compare the medians of cpu-ns/key:
//
//	FILTER_BENCH_100M=1 go test -run '^$' -bench Front100M -benchtime 20000x ./filter/
//
// Variants: heap and huge are the same filter with its bitsets in the Go
// heap (4 KiB pages) and mapped with huge pages (mapBitsets); maskall is
// Filter.MaskAll; emit is MaskAll over a chunk of 256 keys then Add of
// each; new-emit and new-fused add new keys into an empty newest
// generation (MaskAll then Add, against MaskAllAdd, what the stage calls).
// The variants measured and dropped in earlier sessions (loads instead of
// prefetches, generations in adjacent lines, one 512-bit block per
// generation) are in docs/benchmarks.md.
func BenchmarkFront100M(b *testing.B) {
	if os.Getenv("FILTER_BENCH_100M") == "" {
		b.Skip("set FILTER_BENCH_100M=1 (fills a 165 MB window)")
	}
	rounds := 5
	if v, err := strconv.Atoi(os.Getenv("FILTER_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	const perGen = 25_000_000
	const nkeys = 1 << 22 // 4M keys x 4 generations: 1 GB of block reads
	cfg := benchConfig(perGen)
	heap := fillHeap(b, cfg)
	var buf bytes.Buffer
	if _, err := heap.WriteTo(&buf); err != nil {
		b.Fatal(err)
	}
	snap := bytes.Clone(buf.Bytes())
	huge, err := ReadFrom(&buf, cfg)
	if err != nil {
		b.Fatal(err)
	}
	buf = bytes.Buffer{}
	b.Logf("huge: %d bytes mapped; %s", huge.mem.mapped(), anonHuge(b))
	absent := probeKeys(nsAbsent, nkeys, 0)
	// Keys of the newest generation: Add sets no new bit, so nothing grows.
	newest := make([]partition.Hash, nkeys)
	for i := range newest {
		newest[i] = key(nsPresent, uint64(3*perGen)+uint64(i)*5%perGen)
	}
	const chunk = 256
	masks := make([]uint64, chunk)
	type variant struct {
		name string
		keys []partition.Hash
		fn   func(hs []partition.Hash)
	}
	emit := func(f *Filter, maskAll func([]partition.Hash)) func([]partition.Hash) {
		return func(hs []partition.Hash) {
			maskAll(hs)
			for _, h := range hs {
				f.Add(h)
			}
		}
	}
	vs := []variant{
		{"heap/maskall", absent, func(hs []partition.Hash) { heap.MaskAll(hs, masks) }},
		{"huge/maskall", absent, func(hs []partition.Hash) { huge.MaskAll(hs, masks) }},
		{"huge/emit", newest, emit(huge, func(hs []partition.Hash) { huge.MaskAll(hs, masks) })},
	}
	// New keys into an empty newest generation, as the stage's timed
	// records meet it (the oldest generation dropped): "new-emit" probes a
	// chunk with MaskAll and then Adds every key whose mask is 0, as the
	// stage did before MaskAllAdd; "new-fused" is MaskAllAdd. Each call
	// takes keys never added before, so both insert every key they probe
	// (15M at most over 3 rounds: the generation never grows).
	fresh, err := ReadFrom(bytes.NewReader(snap), cfg)
	if err != nil {
		b.Fatal(err)
	}
	fresh.Advance(fresh.Current() + 1)
	var nextNew uint64
	newKeys := make([]partition.Hash, chunk)
	freshChunk := func() []partition.Hash {
		for i := range newKeys {
			newKeys[i] = key(nsOther, nextNew)
			nextNew++
		}
		return newKeys
	}
	vs = append(vs,
		variant{"huge/new-emit", nil, func([]partition.Hash) {
			hs := freshChunk()
			fresh.MaskAll(hs, masks)
			for i, h := range hs {
				if masks[i] == 0 {
					fresh.Add(h)
				}
			}
		}},
		variant{"huge/new-fused", nil, func([]partition.Hash) {
			hs := freshChunk()
			fresh.MaskAllAdd(hs, masks)
			for i, h := range hs {
				if masks[i] != 0 {
					fresh.Add(h)
				}
			}
		}},
	)
	for r := range rounds {
		for _, v := range vs {
			b.Run(fmt.Sprintf("%s/round=%d", v.name, r), func(b *testing.B) {
				b.ReportAllocs()
				cpu, n := cpuTime(), 0
				for i := 0; b.Loop(); i++ {
					if v.keys == nil {
						v.fn(nil)
					} else {
						lo := (i * chunk) & (nkeys - 1)
						v.fn(v.keys[lo : lo+chunk])
					}
					n += chunk
				}
				b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(n), "cpu-ns/key")
			})
		}
	}
	// The layouts must agree, and the window keep its rate.
	want, got := make([]uint64, chunk), make([]uint64, chunk)
	var pos int
	for lo := 0; lo < 1<<20; lo += chunk {
		heap.MaskAll(absent[lo:lo+chunk], want)
		huge.MaskAll(absent[lo:lo+chunk], got)
		if !slicesEqual(want, got) {
			b.Fatalf("heap and huge disagree: %x vs %x", want[:8], got[:8])
		}
		for _, m := range got {
			if m != 0 {
				pos++
			}
		}
	}
	if fp := float64(pos) / (1 << 20); fp > 1.5*benchRate {
		b.Fatalf("false positives of absent keys: %.4f, target %g", fp, benchRate)
	} else {
		b.Logf("false positives of absent keys: %.4f, target %g", fp, benchRate)
	}
}

func slicesEqual(a, b []uint64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fillHeap is fillWindow with the bitsets in the Go heap.
func fillHeap(b *testing.B, cfg Config) *Filter {
	mapBitsets = false
	defer func() { mapBitsets = true }()
	return fillWindow(b, cfg)
}

// anonHuge returns the process's AnonHugePages line of smaps_rollup.
func anonHuge(b *testing.B) string {
	data, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return err.Error()
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("AnonHugePages:")) {
			return string(bytes.Join(bytes.Fields(line), []byte(" ")))
		}
	}
	return "no AnonHugePages line"
}
