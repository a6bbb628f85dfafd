package filter

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

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
// Filter.MaskAll; loads=8 is MaskAll before it prefetched (loads 8 keys
// ahead: heap/loads=8 is main's front before huge pages); emit is MaskAll
// over a chunk of 256 keys then Add of each, as the stage does for new
// keys. FILTER_BENCH_AHEAD=8,16 adds MaskAll prefetching that many keys
// ahead; new-emit and new-fused add new keys into an empty newest
// generation (MaskAll then Add, against MaskAllAdd); FILTER_BENCH_ILV=1 adds the generations' blocks of one block
// index interleaved (adjacent cache lines; a copy of the window, 165 MB
// more) instead of one bitset per generation.
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
	var ilv *interleaved
	if os.Getenv("FILTER_BENCH_ILV") != "" {
		ilv = interleave(huge)
	}
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
	loads := func(f *Filter) func([]partition.Hash) {
		return func(hs []partition.Hash) { maskAllAhead(f, hs, masks, 8) }
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
		{"heap/loads=8", absent, loads(heap)},
		{"heap/maskall", absent, func(hs []partition.Hash) { heap.MaskAll(hs, masks) }},
		{"huge/loads=8", absent, loads(huge)},
		{"huge/maskall", absent, func(hs []partition.Hash) { huge.MaskAll(hs, masks) }},
		{"heap/emit-loads=8", newest, emit(heap, loads(heap))},
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
	for _, d := range aheads() {
		vs = append(vs, variant{fmt.Sprintf("huge/prefetch=%d", d), absent, func(hs []partition.Hash) { maskAllPrefetch(huge, hs, masks, d) }})
	}
	if os.Getenv("FILTER_BENCH_ILV") != "" {
		vs = append(vs,
			variant{"huge/ilv+loads=8", absent, func(hs []partition.Hash) { ilv.maskAll(hs, masks, false) }},
			variant{"huge/ilv+prefetch=16", absent, func(hs []partition.Hash) { ilv.maskAll(hs, masks, true) }},
		)
	}
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
	// The variants must agree.
	want, got := make([]uint64, chunk), make([]uint64, chunk)
	heap.MaskAll(absent[:chunk], want)
	for _, fn := range []func([]partition.Hash, []uint64){
		huge.MaskAll,
		func(hs []partition.Hash, m []uint64) { maskAllAhead(huge, hs, m, 4) },
		func(hs []partition.Hash, m []uint64) { maskAllPrefetch(huge, hs, m, 16) },
	} {
		fn(absent[:chunk], got)
		if !slicesEqual(want, got) {
			b.Fatalf("variants disagree: %x vs %x", want[:8], got[:8])
		}
	}
	if ilv != nil {
		ilv.maskAll(absent[:chunk], got, true)
		if !slicesEqual(want, got) {
			b.Fatalf("interleaved layout disagrees: %x vs %x", want[:8], got[:8])
		}
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

// maskAllAhead is MaskAll as it was before it prefetched: loading the
// first word of the blocks d keys ahead.
func maskAllAhead(f *Filter, hs []partition.Hash, masks []uint64, d int) {
	var sink uint64
	for i := range hs {
		if j := i + d; j < len(hs) {
			off := blockAt(hs[j], f.nblocks)
			idx := f.head
			for range f.nlive {
				sink += f.slots[idx].words[off]
				idx = f.prev(idx)
			}
		}
		masks[i] = f.match(hs[i], false)
	}
	sinkBool = sink == 1
}

// aheads returns the distances of FILTER_BENCH_AHEAD (comma list), none
// by default.
func aheads() []int {
	var out []int
	for _, f := range strings.Split(os.Getenv("FILTER_BENCH_AHEAD"), ",") {
		if d, err := strconv.Atoi(f); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// maskAllPrefetch is MaskAll prefetching (PREFETCHT0, which retires at
// once) d keys ahead instead of loading.
func maskAllPrefetch(f *Filter, hs []partition.Hash, masks []uint64, d int) {
	for i := range hs {
		if j := i + d; j < len(hs) {
			off := blockAt(hs[j], f.nblocks)
			idx := f.head
			for range f.nlive {
				prefetch(uintptr(unsafe.Pointer(&f.slots[idx].words[off])))
				idx = f.prev(idx)
			}
		}
		masks[i] = f.match(hs[i], false)
	}
}

// interleaved is the first sub-filters of a filter without growth laid out
// block index by block index: the block of index b of age a is at words
// (b*G+a)*blockWords, so a key's blocks in all generations are adjacent
// cache lines.
type interleaved struct {
	words   []uint64
	nblocks uint64
	k       uint64
	g       int
}

func interleave(f *Filter) *interleaved {
	g := f.nlive
	il := &interleaved{words: f.mem.alloc(len(f.slots[0].words) * g), nblocks: f.nblocks, k: f.k, g: g}
	idx := f.head
	for a := range g {
		src := f.slots[idx].words
		for blk := uint64(0); blk < f.nblocks; blk++ {
			copy(il.words[(blk*uint64(g)+uint64(a))*blockWords:][:blockWords], src[blk*blockWords:])
		}
		idx = f.prev(idx)
	}
	return il
}

func (il *interleaved) maskAll(hs []partition.Hash, masks []uint64, pf bool) {
	var sink uint64
	for i := range hs {
		if j := i + maskAhead; !pf && j < len(hs) {
			off := blockAt(hs[j], il.nblocks) * uint64(il.g)
			for a := range il.g {
				sink += il.words[off+uint64(a)*blockWords]
			}
		}
		if j := i + 16; pf && j < len(hs) {
			off := blockAt(hs[j], il.nblocks) * uint64(il.g)
			for a := range il.g {
				prefetch(uintptr(unsafe.Pointer(&il.words[off+uint64(a)*blockWords])))
			}
		}
		p := makePattern(hs[i], il.k)
		off := blockAt(hs[i], il.nblocks) * uint64(il.g)
		var mask uint64
		for a := range il.g {
			if covers((*[blockWords]uint64)(il.words[off+uint64(a)*blockWords:]), &p) {
				mask |= 1 << a
			}
		}
		masks[i] = mask
	}
	sinkBool = sink == 1
}
