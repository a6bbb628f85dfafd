package filter

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/dedupstream/dedupstream/partition"
)

// The benchmarks use windows of 1M and 10M keys: 4 generations of 250k and
// 2.5M keys at a 1% target. Run with:
//
//	go test -run '^$' -bench . -benchmem ./filter/

const (
	benchGenerations = 4
	benchRate        = 0.01
	benchProbes      = 1 << 16
)

var benchWindows = []struct {
	name   string
	perGen uint
}{
	{"window=1M", 250_000},
	{"window=10M", 2_500_000},
}

func benchConfig(perGen uint) Config {
	return Config{KeysPerGeneration: perGen, FalsePositiveRate: benchRate, Generations: benchGenerations}
}

// filled caches full windows across benchmarks; they only read them.
var filled = map[uint]*Filter{}

func filledWindow(b *testing.B, perGen uint) *Filter {
	if f, ok := filled[perGen]; ok {
		return f
	}
	f := fillWindow(b, benchConfig(perGen))
	filled[perGen] = f
	return f
}

// probeKeys returns n hashes of namespace ns. Present keys are spread over
// all generations of a window of perGen*benchGenerations keys.
func probeKeys(ns byte, n int, window uint64) []partition.Hash {
	out := make([]partition.Hash, n)
	for i := range out {
		j := uint64(i)
		if ns == nsPresent {
			j = j * 7919 % window
		}
		out[i] = key(ns, j)
	}
	return out
}

func keyBytes(hs []partition.Hash) [][16]byte {
	out := make([][16]byte, len(hs))
	for i, h := range hs {
		h.Put(out[i][:])
	}
	return out
}

var sinkBool bool

func BenchmarkTest(b *testing.B) {
	for _, w := range benchWindows {
		f := filledWindow(b, w.perGen)
		for _, ns := range []struct {
			name string
			ns   byte
		}{{"absent", nsAbsent}, {"present", nsPresent}} {
			probes := probeKeys(ns.ns, benchProbes, uint64(w.perGen)*benchGenerations)
			b.Run(w.name+"/"+ns.name, func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					sinkBool = f.Test(probes[i&(benchProbes-1)])
				}
			})
		}
	}
}

func BenchmarkCandidates(b *testing.B) {
	for _, w := range benchWindows {
		f := filledWindow(b, w.perGen)
		for _, ns := range []struct {
			name string
			ns   byte
		}{{"absent", nsAbsent}, {"present", nsPresent}} {
			probes := probeKeys(ns.ns, benchProbes, uint64(w.perGen)*benchGenerations)
			b.Run(w.name+"/"+ns.name, func(b *testing.B) {
				b.ReportAllocs()
				dst := make([]uint64, 0, benchGenerations)
				for i := 0; b.Loop(); i++ {
					dst = f.Candidates(probes[i&(benchProbes-1)], dst[:0])
				}
			})
		}
	}
}

func BenchmarkAdd(b *testing.B) {
	for _, w := range benchWindows {
		b.Run(w.name, func(b *testing.B) {
			f := mustNew(b, benchConfig(w.perGen), 3)
			probes := probeKeys(nsAbsent, 1<<20, 0)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				f.Add(probes[i&(1<<20-1)])
			}
		})
	}
}

// BenchmarkTestOrAdd is the per-record operation of the pipeline for new keys
// (Test, then Add when absent), comparable to bloom's TestOrAdd below.
func BenchmarkTestOrAdd(b *testing.B) {
	for _, w := range benchWindows {
		b.Run(w.name, func(b *testing.B) {
			f := fillWindow(b, benchConfig(w.perGen))
			probes := probeKeys(nsAbsent, 1<<20, 0)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				h := probes[i&(1<<20-1)]
				if !f.Test(h) {
					f.Add(h)
				}
			}
		})
	}
}

// BenchmarkAdvance moves the newest generation by one per iteration and
// adds a key to it: one generation's bitset, which holds a key, is cleared
// for reuse. Bytes/s is the clearing speed. The empty variant adds no key,
// as in a young window (a new job) rotating into generations that never
// held one: their bitsets are left as they are.
func BenchmarkAdvance(b *testing.B) {
	for _, w := range benchWindows {
		for _, empty := range []bool{false, true} {
			name := w.name
			if empty {
				name += "/empty"
			}
			b.Run(name, func(b *testing.B) {
				f := mustNew(b, benchConfig(w.perGen), 3)
				b.SetBytes(int64(f.m / 8))
				b.ReportAllocs()
				gen := f.Current()
				for b.Loop() {
					gen++
					f.Advance(gen)
					if !empty {
						f.Add(key(nsPresent, gen))
					}
				}
			})
		}
	}
}

func BenchmarkWriteTo(b *testing.B) {
	f := filledWindow(b, 2_500_000)
	b.Run("window=10M", func(b *testing.B) {
		b.SetBytes(f.snapshotSize())
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.WriteTo(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkReadFrom(b *testing.B) {
	f := filledWindow(b, 2_500_000)
	var buf bytes.Buffer
	if _, err := f.WriteTo(&buf); err != nil {
		b.Fatal(err)
	}
	b.Run("window=10M", func(b *testing.B) {
		b.SetBytes(int64(buf.Len()))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ReadFrom(bytes.NewReader(buf.Bytes()), f.Config()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSaveLoadFile measures a snapshot to disk (with fsyncs) and a
// restore from the page cache: the restart path.
func BenchmarkSaveLoadFile(b *testing.B) {
	f := filledWindow(b, 2_500_000)
	path := filepath.Join(b.TempDir(), "f.bloom")
	b.Run("window=10M/SaveFile", func(b *testing.B) {
		b.SetBytes(f.snapshotSize())
		for b.Loop() {
			if err := SaveFile(path, f); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("window=10M/LoadFile", func(b *testing.B) {
		b.SetBytes(f.snapshotSize())
		for b.Loop() {
			if _, err := LoadFile(path, f.Config()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReference measures a single plain bloom/v3 filter sized for the
// whole window at the same target, fed the 16 hash bytes: the baseline.
func BenchmarkReference(b *testing.B) {
	for _, w := range benchWindows {
		window := w.perGen * benchGenerations
		bf := bloom.NewWithEstimates(window, benchRate)
		var kb [16]byte
		for i := range uint64(window) {
			key(nsPresent, i).Put(kb[:])
			bf.Add(kb[:])
		}
		absent := keyBytes(probeKeys(nsAbsent, 1<<20, 0))
		present := keyBytes(probeKeys(nsPresent, benchProbes, uint64(window)))
		b.Run(w.name+"/bloom.Test/absent", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				sinkBool = bf.Test(absent[i&(benchProbes-1)][:])
			}
		})
		b.Run(w.name+"/bloom.Test/present", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				sinkBool = bf.Test(present[i&(benchProbes-1)][:])
			}
		})
		b.Run(w.name+"/bloom.TestOrAdd", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				sinkBool = bf.TestOrAdd(absent[i&(1<<20-1)][:])
			}
		})
	}
}

// BenchmarkProbe compares the two ways of probing G generations with a
// precomputed 128-bit hash:
//
//   - doublehash: k positions derived from Hi/Lo, bits read from the bitset
//     words directly (what Filter does);
//   - bloombytes: the 16 hash bytes fed to each generation's bloom Test/Add,
//     which hashes them again with murmur3 and reduces with a modulo.
func BenchmarkProbe(b *testing.B) {
	for _, w := range benchWindows {
		f := filledWindow(b, w.perGen)
		gens := make([]*bloom.BloomFilter, benchGenerations)
		var kb [16]byte
		var n uint64
		for g := range gens {
			gens[g] = bloom.New(uint(f.m), uint(f.k))
			for range w.perGen {
				key(nsPresent, n).Put(kb[:])
				gens[g].Add(kb[:])
				n++
			}
		}
		for _, ns := range []struct {
			name string
			ns   byte
		}{{"absent", nsAbsent}, {"present", nsPresent}} {
			probes := probeKeys(ns.ns, benchProbes, n)
			b.Run(fmt.Sprintf("%s/test-%s/doublehash", w.name, ns.name), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					sinkBool = f.Test(probes[i&(benchProbes-1)])
				}
			})
			b.Run(fmt.Sprintf("%s/test-%s/bloombytes", w.name, ns.name), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					sinkBool = bytesTest(gens, probes[i&(benchProbes-1)])
				}
			})
		}
		probes := probeKeys(nsOther, 1<<20, 0)
		b.Run(w.name+"/add/doublehash", func(b *testing.B) {
			g := mustNew(b, f.Config(), 3)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				g.Add(probes[i&(1<<20-1)])
			}
		})
		b.Run(w.name+"/add/bloombytes", func(b *testing.B) {
			bf := bloom.New(uint(f.m), uint(f.k))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				bytesAdd(bf, probes[i&(1<<20-1)])
			}
		})
	}
}

// bytesTest is Test done the other way: the hash bytes go to bloom's Test.
func bytesTest(gens []*bloom.BloomFilter, h partition.Hash) bool {
	var kb [16]byte
	h.Put(kb[:])
	for _, bf := range gens {
		if bf.Test(kb[:]) {
			return true
		}
	}
	return false
}

func bytesAdd(bf *bloom.BloomFilter, h partition.Hash) {
	var kb [16]byte
	h.Put(kb[:])
	bf.Add(kb[:])
}

// BenchmarkMaskAll probes a batch of 256 keys (the stage's chunk) key by key
// with Mask and in one MaskAll call, on the same filled windows; cpu-ns/key
// is the process CPU per key.
func BenchmarkMaskAll(b *testing.B) {
	const chunk = 256
	for _, w := range benchWindows {
		f := filledWindow(b, w.perGen)
		for _, ns := range []struct {
			name string
			ns   byte
		}{{"absent", nsAbsent}, {"present", nsPresent}} {
			probes := probeKeys(ns.ns, benchProbes, uint64(w.perGen)*benchGenerations)
			masks := make([]uint64, chunk)
			for _, v := range []struct {
				name string
				fn   func(hs []partition.Hash)
			}{
				{"mask", func(hs []partition.Hash) {
					for i, h := range hs {
						masks[i] = f.Mask(h)
					}
				}},
				{"maskall", func(hs []partition.Hash) { f.MaskAll(hs, masks) }},
			} {
				b.Run(w.name+"/"+ns.name+"/"+v.name, func(b *testing.B) {
					b.ReportAllocs()
					cpu := cpuTime()
					keys := 0
					for i := 0; b.Loop(); i++ {
						lo := (i * chunk) & (benchProbes - 1)
						v.fn(probes[lo : lo+chunk])
						keys += chunk
					}
					b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(keys), "cpu-ns/key")
				})
			}
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAddAll adds batches of 4096 keys (a restore's batch) into the
// newest generation of a filter sized for 16M keys per generation (20 MB,
// larger than the caches, as a restore's is), key by key with Add and in
// one AddAll call; cpu-ns/key is the process CPU per key. The same 2^20
// keys come round again: the filter does not grow.
func BenchmarkAddAll(b *testing.B) {
	const batch = 4096
	probes := probeKeys(nsAbsent, 1<<20, 0)
	for _, v := range []struct {
		name string
		fn   func(f *Filter, hs []partition.Hash)
	}{
		{"add", func(f *Filter, hs []partition.Hash) {
			for _, h := range hs {
				f.Add(h)
			}
		}},
		{"addall", func(f *Filter, hs []partition.Hash) { f.AddAll(hs) }},
	} {
		b.Run(v.name, func(b *testing.B) {
			f := mustNew(b, benchConfig(16<<20), 3)
			b.ReportAllocs()
			cpu, keys := cpuTime(), 0
			for i := 0; b.Loop(); i++ {
				lo := (i * batch) & (1<<20 - 1)
				v.fn(f, probes[lo:lo+batch])
				keys += batch
			}
			b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(keys), "cpu-ns/key")
		})
	}
}
