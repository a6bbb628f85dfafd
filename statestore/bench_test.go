package statestore

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/dedupstream/dedupstream/partition"
)

// Benchmarks run on the real disk (b.TempDir) with the production defaults
// unless a name says otherwise:
//
//	go test ./statestore/ -run '^$' -bench . -benchmem

func benchOpen(b *testing.B, opts Options) *Store {
	b.Helper()
	s, err := Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := s.Close(); err != nil {
			b.Error(err)
		}
	})
	return s
}

// BenchmarkCommit commits batches of fresh keys into a growing store; the
// cost of the flushes and compactions they cause is included.
func BenchmarkCommit(b *testing.B) {
	for _, wal := range []bool{true, false} {
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("wal=%t/keys=%d", wal, n), func(b *testing.B) {
				s := benchOpen(b, Options{DisableWAL: !wal})
				benchCommit(b, s, n)
			})
		}
	}
}

// BenchmarkCommitOptions compares our Pebble options with Pebble's own LSM
// defaults (2 MiB L0 files, 64 MiB Lbase, L0 stop at 12, Snappy, one
// compaction at a time) and with Snappy alone. cpu-us/key is the process CPU
// time per key, background flushes and compactions included; on a shared
// machine it is steadier than keys/s. Use -benchtime=300x (3M keys).
func BenchmarkCommitOptions(b *testing.B) {
	snappy := func(o *pebble.Options) {
		for i := range o.Levels {
			o.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.SnappyCompression }
		}
	}
	pebbleShape := func(o *pebble.Options) {
		o.L0CompactionThreshold, o.L0StopWritesThreshold = 4, 12
		o.LBaseMaxBytes = 64 << 20
		o.TargetFileSizes[0] = 2 << 20
		for i := 1; i < len(o.TargetFileSizes); i++ {
			o.TargetFileSizes[i] = 2 * o.TargetFileSizes[i-1]
		}
		o.CompactionConcurrencyRange = func() (int, int) { return 1, 1 }
		snappy(o)
	}
	// l0-only never compacts for read amplification: flushes pile up in L0
	// and only expiry (DeleteRange) removes them.
	l0Only := func(o *pebble.Options) {
		o.L0CompactionThreshold, o.L0CompactionFileThreshold, o.L0StopWritesThreshold = 1000, 1_000_000, 2000
	}
	for _, c := range []struct {
		name string
		tune func(*pebble.Options)
	}{{"ours", nil}, {"pebble-lsm-defaults", pebbleShape}, {"snappy", snappy}, {"l0-only", l0Only}} {
		b.Run(c.name, func(b *testing.B) {
			s := benchOpen(b, Options{tune: c.tune})
			benchCommit(b, s, 10000)
		})
	}
}

// cpuTime is the CPU time of the whole process, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchCommit(b *testing.B, s *Store, n int) {
	batch := s.NewBatch()
	var i uint64
	checkpoint := make([]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), cpuTime()
	for range b.N {
		gen := i / 1_000_000 // a new generation every million keys
		for range n {
			batch.Put(gen, keyOf(1, i), i)
			i++
		}
		if _, err := s.Commit(batch, State{Generation: gen, Checkpoint: checkpoint}); err != nil {
			b.Fatal(err)
		}
	}
	keys := float64(b.N * n)
	b.ReportMetric(keys/time.Since(start).Seconds(), "keys/s")
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/keys, "cpu-us/key")
}

// loadGens fills s with perGen keys in each of gens 1..ngen (key j of gen g
// is keyOf(g, j)) in batches of 10k, flushes the memtable and waits for
// compactions, so that reads see the steady-state LSM shape.
func loadGens(b testing.TB, s *Store, ngen, perGen int) {
	batch := s.NewBatch()
	for g := 1; g <= ngen; g++ {
		for j := 0; j < perGen; j++ {
			batch.Put(uint64(g), keyOf(uint64(g), uint64(j)), uint64(j))
			if batch.Len() == 10000 {
				if _, err := s.Commit(batch, State{Generation: uint64(g)}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	if _, err := s.Commit(batch, State{Generation: uint64(ngen)}); err != nil {
		b.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	for s.db.Metrics().Compact.NumInProgress > 0 {
		time.Sleep(50 * time.Millisecond)
	}
}

// BenchmarkRead reads a store of 1M keys in 5 generations.
func BenchmarkRead(b *testing.B) {
	const ngen, perGen = 5, 200_000
	s := benchOpen(b, Options{})
	loadGens(b, s, ngen, perGen)
	gens := []uint64{5, 4, 3, 2, 1} // newest first, as the stage passes them
	var sink uint64
	run := func(name string, fn func(i int) bool) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				if fn(i) {
					sink++
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
		})
	}
	get := func(gen uint64, h partition.Hash) bool {
		_, found, err := s.Get(gen, h)
		if err != nil {
			b.Fatal(err)
		}
		return found
	}
	lookup := func(h partition.Hash) bool {
		_, _, found, err := s.Lookup(h, gens)
		if err != nil {
			b.Fatal(err)
		}
		return found
	}
	run("get/hit", func(i int) bool { return get(uint64(1+i%ngen), keyOf(uint64(1+i%ngen), uint64(i*7919%perGen))) })
	run("get/miss", func(i int) bool { return get(uint64(1+i%ngen), keyOf(99, uint64(i))) })
	run("lookup5/hit-oldest", func(i int) bool { return lookup(keyOf(1, uint64(i*7919%perGen))) })
	run("lookup5/miss", func(i int) bool { return lookup(keyOf(99, uint64(i))) })
	_ = sink
}

// BenchmarkLookups confirms batches of 2000 present keys spread over 5
// generations, one Lookup (one iterator) each against one Reader per batch.
// Sorting a batch by key before reading measured no further gain.
func BenchmarkLookups(b *testing.B) {
	const ngen, perGen, batch = 5, 200_000, 2000
	s := benchOpen(b, Options{})
	loadGens(b, s, ngen, perGen)
	gens := make([]uint64, ngen+1)
	for g := range gens {
		gens[g] = uint64(g)
	}
	probe := func(round, i int) (partition.Hash, []uint64) {
		g := uint64(1 + (round*batch+i)%ngen)
		return keyOf(g, uint64((round*batch+i)*7919%perGen)), gens[g : g+1]
	}
	for _, mode := range []string{"lookup-each", "reader-per-batch"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			var rd Reader
			for round := range b.N {
				if mode == "reader-per-batch" {
					if err := s.OpenReader(&rd); err != nil {
						b.Fatal(err)
					}
				}
				for i := range batch {
					h, g := probe(round, i)
					var found bool
					var err error
					if mode == "lookup-each" {
						_, _, found, err = s.Lookup(h, g)
					} else {
						_, _, found, err = rd.Lookup(h, g)
					}
					if err != nil || !found {
						b.Fatalf("probe %d: found %v, err %v", i, found, err)
					}
				}
				if err := rd.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "keys/s")
		})
	}
}

// BenchmarkReadHandoff measures what handing every read to a goroutine of
// the store would cost the stage's hot path (see readpath.go): Reader.Lookup
// called directly, as the store does, against the same call served by a
// long-lived goroutine through a channel with a reused request (no
// allocation), and through worker.do (the write path's hand-off, which
// allocates its closures). Run it with -benchtime=200000x.
func BenchmarkReadHandoff(b *testing.B) {
	const ngen, perGen = 5, 200_000
	s := benchOpen(b, Options{})
	loadGens(b, s, ngen, perGen)
	type request struct {
		rd    *Reader
		h     partition.Hash
		gens  []uint64
		found bool
		err   error
		done  chan struct{}
	}
	requests := make(chan *request)
	go func() {
		for r := range requests {
			_, _, r.found, r.err = r.rd.Lookup(r.h, r.gens)
			r.done <- struct{}{}
		}
	}()
	defer close(requests)
	w := startWorker(s.fatal)
	defer w.stop()
	gens := []uint64{5, 4, 3, 2, 1}
	// Rounds interleave the modes, so that a shared machine's load changes
	// hit all of them alike: compare medians over the rounds. cpu-ns/op, the
	// process's CPU time per Lookup, is steadier than ns/op under load.
	for round := range 5 {
		for _, kind := range []string{"hit", "miss"} {
			for _, mode := range []string{"direct", "channel", "worker"} {
				b.Run(fmt.Sprintf("%s/%s/round=%d", kind, mode, round), func(b *testing.B) {
					var rd Reader
					if err := s.OpenReader(&rd); err != nil {
						b.Fatal(err)
					}
					defer rd.Close()
					req := &request{rd: &rd, gens: gens, done: make(chan struct{}, 1)}
					var found bool
					var err error
					b.ReportAllocs()
					cpu := cpuTime()
					defer func() { b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op") }()
					for i := range b.N {
						h := keyOf(1, uint64(i*7919%perGen)) // in the oldest of 5 generations
						if kind == "miss" {
							h = keyOf(99, uint64(i))
						}
						switch mode {
						case "direct":
							_, _, found, err = rd.Lookup(h, gens)
						case "channel":
							req.h = h
							requests <- req
							select {
							case <-req.done:
							case <-s.fatal.dead:
							}
							found, err = req.found, req.err
						case "worker":
							err = w.do(func() (err error) {
								_, _, found, err = rd.Lookup(h, gens)
								return err
							})
						}
						if err != nil || found != (kind == "hit") {
							b.Fatalf("found %v, err %v", found, err)
						}
					}
				})
			}
		}
	}
}
