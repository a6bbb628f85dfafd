package statestore

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dedupstream/dedupstream/partition"
)

// BenchmarkLayout fills a store with LAYOUT_KEYS keys (default 1M; the
// sizes are comma-separated, e.g. LAYOUT_KEYS=1000000,10000000) in 10k-key
// commits, ten generations over the fill, in each candidate layout, and
// reports:
//
//   - keys/s and cpu-us/key over the whole fill and over its last tenth
//     (last-keys/s: the cost per key at that store size), background work
//     included (the fill ends with the store settled);
//   - confirm-cpu-ns: the CPU time of one confirming read of a present key
//     of a random generation (a duplicate), through one Reader per 2000
//     reads as the stage does; miss-cpu-ns: a read of an absent key (a
//     Bloom false positive).
//
// On a shared machine the CPU figures are the steady ones; keys/s is wall
// clock.
//
// Candidates: "memtable" is layout 1 (one Pebble key per hash, written
// through the memtable, leveled compaction), with its production options
// and with two cheap Pebble option variants; "runs" is layout 2, the store
// itself. Run with -benchtime 1x:
//
//	LAYOUT_KEYS=1000000,10000000 go test ./statestore/ -run '^$' -bench Layout -benchtime 1x
func BenchmarkLayout(b *testing.B) {
	sizes := []int{1_000_000}
	if v := os.Getenv("LAYOUT_KEYS"); v != "" {
		sizes = sizes[:0]
		for _, f := range splitComma(v) {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			sizes = append(sizes, n)
		}
	}
	variants := []struct {
		name string
		open func(b *testing.B) layoutStore
	}{
		{"runs", func(b *testing.B) layoutStore { return openRunsLayout(b, Options{}) }},
		{"pack1", func(b *testing.B) layoutStore { return openRunsLayout(b, Options{packKeys: 1}) }},
		{"pack16", func(b *testing.B) layoutStore { return openRunsLayout(b, Options{packKeys: 16}) }},
		{"pack64", func(b *testing.B) layoutStore { return openRunsLayout(b, Options{packKeys: 64}) }},
		{"pack256", func(b *testing.B) layoutStore { return openRunsLayout(b, Options{packKeys: 256}) }},
		{"pack64-block16k", func(b *testing.B) layoutStore {
			return openRunsLayout(b, Options{packKeys: 64, tune: blockSize(16 << 10)})
		}},
		{"memtable", func(b *testing.B) layoutStore { return openMemtableLayout(b, nil) }},
		{"memtable-l0-8-conc-2", func(b *testing.B) layoutStore {
			return openMemtableLayout(b, func(o *pebble.Options) {
				o.L0CompactionThreshold = 8
				o.CompactionConcurrencyRange = func() (int, int) { return 2, 2 }
			})
		}},
		{"memtable-conc-1", func(b *testing.B) layoutStore {
			return openMemtableLayout(b, func(o *pebble.Options) {
				o.CompactionConcurrencyRange = func() (int, int) { return 1, 1 }
			})
		}},
	}
	variants = pickNamed(os.Getenv("LAYOUT_VARIANTS"), variants, func(i int) string { return variants[i].name })
	for _, n := range sizes {
		for _, vr := range variants {
			b.Run(fmt.Sprintf("keys=%s/%s", countName(n), vr.name), func(b *testing.B) {
				for b.Loop() {
					ls := vr.open(b)
					layoutFill(b, ls, n)
				}
			})
		}
	}
}

// pickNamed keeps the elements of vs whose names (name(i) of vs[i]) the
// comma list list names, in their order in vs; all of vs when list is
// empty. Benchmarks select their variants with it from the environment.
func pickNamed[T any](list string, vs []T, name func(i int) string) []T {
	if list == "" {
		return vs
	}
	var keep []T
	for i := range vs {
		if slices.Contains(splitComma(list), name(i)) {
			keep = append(keep, vs[i])
		}
	}
	return keep
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

func countName(n int) string {
	switch {
	case n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// layoutStore is what the fill needs of a candidate layout.
type layoutStore interface {
	commit(gen uint64, hs []partition.Hash) error
	settle() error // finish background work
	openReader() error
	lookup(gen uint64, h partition.Hash) (bool, error)
	closeReader() error
}

func layoutFill(b *testing.B, ls layoutStore, n int) {
	const commitKeys = 10_000
	perGen := max(n/10, commitKeys)
	hs := make([]partition.Hash, commitKeys)
	runtime.GC()
	start, cpu := time.Now(), cpuTime()
	var lastStart time.Time
	var lastCPU time.Duration
	for i := 0; i < n; i += commitKeys {
		if i >= n-n/10 && lastStart.IsZero() {
			lastStart, lastCPU = time.Now(), cpuTime()
		}
		gen := uint64(i / perGen)
		for j := range hs {
			hs[j] = keyOf(1, uint64(i+j))
		}
		if err := ls.commit(gen, hs); err != nil {
			b.Fatal(err)
		}
	}
	if err := ls.settle(); err != nil {
		b.Fatal(err)
	}
	el, elCPU := time.Since(start), cpuTime()-cpu
	last, lastC := time.Since(lastStart), cpuTime()-lastCPU
	b.ReportMetric(float64(n)/el.Seconds(), "keys/s")
	b.ReportMetric(float64(elCPU.Nanoseconds())/1e3/float64(n), "cpu-us/key")
	b.ReportMetric(float64(n/10)/last.Seconds(), "last-keys/s")
	b.ReportMetric(float64(lastC.Nanoseconds())/1e3/float64(n/10), "last-cpu-us/key")
	if rl, ok := ls.(*runsLayout); ok {
		b.ReportMetric(runDiskBytes(rl.s, n), "disk-B/key")
		reopenBlocks(b, rl.s, n)
	}

	const reads, perReader = 20_000, 2000
	// Each pass reads its own keys (offset), so that no pass finds the
	// blocks an earlier one read in the block cache.
	probe := func(absent bool, offset uint64) time.Duration {
		if rl, ok := ls.(*runsLayout); ok && os.Getenv("LAYOUT_COLD") != "" {
			evictRuns(b, rl.s)
		}
		start := cpuTime()
		for i := 0; i < reads; i++ {
			if i%perReader == 0 {
				if i > 0 {
					if err := ls.closeReader(); err != nil {
						b.Fatal(err)
					}
				}
				if err := ls.openReader(); err != nil {
					b.Fatal(err)
				}
			}
			j := (uint64(i)*7919 + offset) % uint64(n)
			gen, h := j/uint64(perGen), keyOf(1, j)
			if absent {
				h = keyOf(99, j)
			}
			found, err := ls.lookup(gen, h)
			if err != nil {
				b.Fatal(err)
			}
			if found == absent {
				b.Fatalf("key %d of gen %d: found %t", j, gen, found)
			}
		}
		if err := ls.closeReader(); err != nil {
			b.Fatal(err)
		}
		return (cpuTime() - start) / reads
	}
	b.ReportMetric(float64(probe(false, 0).Nanoseconds()), "confirm-cpu-ns")
	b.ReportMetric(float64(probe(true, 0).Nanoseconds()), "miss-cpu-ns")
}

// reopenBlocks reports what Open spends reading the fences of every run
// (open-blocks-cpu-ms: index blocks read and decoded, files opened) and
// what the fences hold (fences-B/key).
func reopenBlocks(b *testing.B, s *Store, n int) {
	rs := s.runs.Load().clone()
	for _, runs := range rs.gens {
		for i := range runs {
			runs[i].blocks = nil
		}
	}
	start := cpuTime()
	if err := s.loadBlocks(rs); err != nil {
		b.Fatal(err)
	}
	el := cpuTime() - start
	mem := 0
	for _, runs := range rs.gens {
		for _, r := range runs {
			if r.blocks == nil {
				b.Fatalf("run %d of generation %d: no blocks", r.id, r.gen)
			}
			mem += r.blocks.mem
			r.blocks.drop()
		}
	}
	b.ReportMetric(float64(el.Microseconds())/1e3, "open-blocks-cpu-ms")
	b.ReportMetric(float64(mem)/float64(n), "fences-B/key")
}

// evictRuns drops the cached pages of s's sstables (LAYOUT_COLD=1), so
// that the reads after it find their blocks on disk as the reads of a
// store larger than the page cache do.
func evictRuns(b *testing.B, s *Store) {
	dir := s.opts.FS.PathJoin(s.dir, "db")
	names, err := s.opts.FS.List(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range names {
		if !strings.HasSuffix(n, ".sst") {
			continue
		}
		f, err := s.opts.FS.Open(s.opts.FS.PathJoin(dir, n))
		if err != nil {
			continue // removed since the listing
		}
		fadvise(f, fadvDontNeed)
		_ = f.Close()
	}
}

func openRunsLayout(b *testing.B, o Options) *runsLayout {
	l := &runsLayout{s: benchOpen(b, o)}
	b.Cleanup(func() { _ = l.rd.Close() }) // before the store's Close
	return l
}

// blockSize sets the sstable block size of the runs.
func blockSize(n int) func(*pebble.Options) {
	return func(po *pebble.Options) {
		for i := range po.Levels {
			po.Levels[i].BlockSize = n
		}
	}
}

// runDiskBytes is the bytes of the live runs' sstables per key of n.
func runDiskBytes(s *Store, n int) float64 {
	var total uint64
	for _, runs := range s.runs.Load().gens {
		for _, r := range runs {
			total += r.bytes
		}
	}
	return float64(total) / float64(n)
}

// runsLayout is the store itself (layout 3: runs in packs; packKeys 1 is
// a pack per hash, like layout 2).
type runsLayout struct {
	s     *Store
	batch *Batch
	rd    Reader
	gens  [1]uint64
}

func (l *runsLayout) commit(gen uint64, hs []partition.Hash) error {
	if l.batch == nil {
		l.batch = l.s.NewBatch()
	}
	for _, h := range hs {
		l.batch.Put(gen, h, 0)
	}
	_, err := l.s.Commit(l.batch, State{Generation: gen, Checkpoint: make([]byte, 64)})
	return err
}

func (l *runsLayout) settle() error {
	l.s.wmu.Lock()
	defer l.s.wmu.Unlock()
	// Write the keys in memory as runs, then wait for the merges that
	// started.
	if err := l.s.handOver(false); err != nil {
		return err
	}
	if err := l.s.awaitFlush(); err != nil {
		return err
	}
	return l.s.settle()
}

// openReader refreshes the long-lived Reader, as the stage does per batch;
// it is closed with the store.
func (l *runsLayout) openReader() error {
	return l.s.OpenReader(&l.rd)
}
func (l *runsLayout) closeReader() error { return nil }
func (l *runsLayout) lookup(gen uint64, h partition.Hash) (bool, error) {
	l.gens[0] = gen
	_, _, found, err := l.rd.Lookup(h, l.gens[:])
	return found, err
}

// memtableLayout is layout 1, kept here to measure against: 25-byte keys
// 0x01+gen+hash in a Pebble batch per commit, sorted, with the state key.
type memtableLayout struct {
	db   *pebble.DB
	pb   *pebble.Batch
	es   []memEntry
	tmp  []memEntry
	cnt  []int
	key  [25]byte
	it   *pebble.Iterator
	iopt pebble.IterOptions
}

func openMemtableLayout(b *testing.B, tune func(*pebble.Options)) *memtableLayout {
	o := Options{tune: tune}
	o.applyDefaults()
	cache := pebble.NewCache(o.pebbleCacheSize())
	defer cache.Unref()
	po := o.pebbleOptions(cache, newFatalState(o.Logger), nil)
	db, err := pebble.Open(b.TempDir(), po)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	return &memtableLayout{db: db, pb: db.NewBatch(), iopt: pebble.IterOptions{UseL6Filters: true}}
}

func (l *memtableLayout) putKey(gen uint64, h partition.Hash) {
	l.key[0] = prefixBucket
	binary.BigEndian.PutUint64(l.key[1:9], gen)
	h.Put(l.key[9:25])
}

func (l *memtableLayout) commit(gen uint64, hs []partition.Hash) error {
	l.es = l.es[:0]
	for _, h := range hs {
		l.es = append(l.es, memEntry{gen: gen, h: h})
	}
	l.tmp, l.cnt = sortHashes(l.es, l.tmp, l.cnt)
	l.pb.Reset()
	for i := range l.es {
		l.putKey(l.es[i].gen, l.es[i].h)
		_ = l.pb.Set(l.key[:], nil, nil)
	}
	_ = l.pb.Set(metaStateKey, make([]byte, 64), nil)
	return l.pb.Commit(pebble.NoSync)
}

func (l *memtableLayout) settle() error {
	if err := l.db.Flush(); err != nil {
		return err
	}
	for l.db.Metrics().Compact.NumInProgress > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

func (l *memtableLayout) openReader() (err error) {
	l.it, err = l.db.NewIter(&l.iopt)
	return err
}

func (l *memtableLayout) closeReader() error { return l.it.Close() }

func (l *memtableLayout) lookup(gen uint64, h partition.Hash) (bool, error) {
	l.putKey(gen, h)
	ok := l.it.SeekPrefixGE(l.key[:])
	return ok, l.it.Error()
}
