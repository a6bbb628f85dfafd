//go:build spike

package statestore

// A measurement spike, not part of the store and not built by make test: a
// bucketed layout where each commit writes one Pebble Merge operand per
// touched (generation, bucket) instead of one key per hash. It cut ingest
// CPU per key 6-11x but made reads of unflushed buckets 4-14x slower; see
// the closing note of the dedup-engine issue. Kept so the figures can be
// reproduced before the layout is built for real.
//
//	key:     0x01 gen(8 BE) bucket(2 BE)          (bucket = top bits of Hi)
//	operand: count(4 LE) then count sorted 16-byte BE hashes ("a run")
//	value:   one or more runs back to back
//
// Two mergers: "concat" appends runs (set semantics make the merge
// commutative, so MergeOlder appends too); "sort" merges all runs into one
// sorted, de-duplicated run in Finish.
//
//	go test -tags spike -run Spike ./statestore/
//	go test -tags spike -run '^$' -bench Spike -benchtime 1x ./statestore/

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dedupstream/dedupstream/partition"
)

const (
	spikeKeyLen  = 1 + 8 + 2
	spikeRunHdr  = 4
	spikeEntrySz = 16
)

// ---- merger ----

type spikeValueMerger struct {
	sorted bool
	pool   *sync.Pool
	buf    []byte           // runs as received (copied: Pebble keeps ownership)
	ha, hb []partition.Hash // scratch for the merge sort
	out    []byte
	bounds []int
	nb     []int
}

func (m *spikeValueMerger) add(v []byte) error {
	if err := spikeCheckValue(v); err != nil {
		return err
	}
	m.buf = append(m.buf, v...)
	return nil
}

func (m *spikeValueMerger) MergeNewer(v []byte) error { return m.add(v) }

// MergeOlder appends as well: the value is a set of runs, order is
// irrelevant, so no prepend copy (pebble.AppendValueMerger reallocates here).
func (m *spikeValueMerger) MergeOlder(v []byte) error { return m.add(v) }

func (m *spikeValueMerger) Finish(includesBase bool) ([]byte, io.Closer, error) {
	if !m.sorted {
		return m.buf, m, nil
	}
	return m.mergeRuns(), m, nil
}

// Close returns the merger and its buffers to the pool once Pebble is done
// with the value.
func (m *spikeValueMerger) Close() error {
	m.buf = m.buf[:0]
	m.pool.Put(m)
	return nil
}

func spikeCheckValue(v []byte) error {
	for len(v) > 0 {
		if len(v) < spikeRunHdr {
			return errors.New("spike: truncated run header")
		}
		n := int(binary.LittleEndian.Uint32(v))
		sz := spikeRunHdr + n*spikeEntrySz
		if len(v) < sz {
			return errors.New("spike: truncated run")
		}
		v = v[sz:]
	}
	return nil
}

func spikeLess(x, y []byte) int {
	xh, yh := binary.BigEndian.Uint64(x), binary.BigEndian.Uint64(y)
	if xh != yh {
		if xh < yh {
			return -1
		}
		return 1
	}
	xl, yl := binary.BigEndian.Uint64(x[8:]), binary.BigEndian.Uint64(y[8:])
	switch {
	case xl < yl:
		return -1
	case xl > yl:
		return 1
	}
	return 0
}

// mergeRuns decodes the runs in m.buf into native (Hi, Lo) pairs, merges
// them bottom-up, pairwise, dropping duplicates, and encodes one run.
func (m *spikeValueMerger) mergeRuns() []byte {
	v := m.buf
	if n := int(binary.LittleEndian.Uint32(v)); spikeRunHdr+n*spikeEntrySz == len(v) {
		return v // already a single run
	}
	m.ha = m.ha[:0]
	m.bounds = m.bounds[:0]
	for len(v) > 0 {
		n := int(binary.LittleEndian.Uint32(v))
		for i := range n {
			m.ha = append(m.ha, partition.HashFromBytes(v[spikeRunHdr+i*spikeEntrySz:]))
		}
		m.bounds = append(m.bounds, len(m.ha))
		v = v[spikeRunHdr+n*spikeEntrySz:]
	}
	m.hb = slices.Grow(m.hb[:0], len(m.ha))[:len(m.ha)]
	src, dst := m.ha, m.hb
	for len(m.bounds) > 1 {
		m.nb = m.nb[:0]
		out, start := 0, 0
		for i := 0; i < len(m.bounds); i += 2 {
			p, q, pe, qe := start, m.bounds[i], m.bounds[i], m.bounds[i]
			if i+1 < len(m.bounds) {
				qe = m.bounds[i+1]
			}
			for p < pe && q < qe {
				x, y := src[p], src[q]
				switch {
				case x.Hi < y.Hi || (x.Hi == y.Hi && x.Lo < y.Lo):
					dst[out] = x
					p++
				case x == y:
					dst[out] = x
					p++
					q++
				default:
					dst[out] = y
					q++
				}
				out++
			}
			out += copy(dst[out:], src[p:pe])
			out += copy(dst[out:], src[q:qe])
			m.nb = append(m.nb, out)
			start = qe
		}
		m.bounds = append(m.bounds[:0], m.nb...)
		src, dst = dst, src
	}
	m.ha, m.hb = src, dst
	n := m.bounds[0]
	m.out = slices.Grow(m.out[:0], spikeRunHdr+n*spikeEntrySz)[:spikeRunHdr+n*spikeEntrySz]
	binary.LittleEndian.PutUint32(m.out, uint32(n))
	for i, h := range src[:n] {
		h.Put(m.out[spikeRunHdr+i*spikeEntrySz:])
	}
	return m.out
}

func spikeMerger(sorted bool) *pebble.Merger {
	pool := &sync.Pool{}
	pool.New = func() any { return &spikeValueMerger{sorted: sorted, pool: pool} }
	name := "dedupstream.spike.concat"
	if sorted {
		name = "dedupstream.spike.sort"
	}
	return &pebble.Merger{
		Name: name,
		Merge: func(key, value []byte) (pebble.ValueMerger, error) {
			m := pool.Get().(*spikeValueMerger)
			if err := m.add(value); err != nil {
				m.Close()
				return nil, err
			}
			return m, nil
		},
	}
}

// spikeSearch reports whether h is in one of the runs of v.
func spikeSearch(v []byte, h partition.Hash) (found bool, runs int) {
	for len(v) >= spikeRunHdr {
		n := int(binary.LittleEndian.Uint32(v))
		run := v[spikeRunHdr : spikeRunHdr+n*spikeEntrySz]
		v = v[spikeRunHdr+n*spikeEntrySz:]
		runs++
		lo, hi := 0, n
		for lo < hi {
			mid := int(uint(lo+hi) >> 1)
			e := run[mid*spikeEntrySz:]
			eh, el := binary.BigEndian.Uint64(e), binary.BigEndian.Uint64(e[8:])
			if eh < h.Hi || (eh == h.Hi && el < h.Lo) {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		if lo < n {
			e := run[lo*spikeEntrySz:]
			if binary.BigEndian.Uint64(e) == h.Hi && binary.BigEndian.Uint64(e[8:]) == h.Lo {
				return true, runs
			}
		}
	}
	return false, runs
}

// ---- store ----

type spikeStore struct {
	db     *pebble.DB
	bits   uint
	sorted bool
	dir    string
	mem    uint64

	pb     *pebble.Batch
	tmp    []partition.Hash
	counts []int
	key    [spikeKeyLen]byte
	state  []byte
	seq    uint64
}

func openSpike(tb testing.TB, dir string, bits uint, sorted bool, memTable uint64) *spikeStore {
	tb.Helper()
	o := Options{MemTableSize: memTable}
	if memTable < 1<<20 { // tests only
		o.CacheSize = 8 << 20
	}
	o.applyDefaults()
	fatal := newFatalState(o.Logger)
	cache := pebble.NewCache(o.pebbleCacheSize())
	defer cache.Unref()
	po := o.pebbleOptions(cache, fatal) // exactly the production options
	po.Merger = spikeMerger(sorted)
	db, err := pebble.Open(dir, po)
	if err != nil {
		tb.Fatal(err)
	}
	s := &spikeStore{db: db, bits: bits, sorted: sorted, dir: dir, mem: memTable}
	s.pb = db.NewBatch(pebble.WithMaxRetainedSizeBytes(batchRetainBytes))
	return s
}

func (s *spikeStore) putKey(k []byte, gen uint64, bucket int) {
	k[0] = prefixBucket
	binary.BigEndian.PutUint64(k[1:9], gen)
	binary.BigEndian.PutUint16(k[9:11], uint16(bucket))
}

// Commit writes hs (all of generation gen) and the state in one batch.
func (s *spikeStore) Commit(gen uint64, hs []partition.Hash, checkpoint []byte) error {
	shift := 64 - s.bits
	nb := 1 << s.bits
	if cap(s.counts) < nb+1 {
		s.counts = make([]int, nb+1)
	}
	counts := s.counts[:nb+1]
	clear(counts)
	for _, h := range hs {
		counts[1+int(h.Hi>>shift)]++
	}
	for i := 1; i <= nb; i++ {
		counts[i] += counts[i-1]
	}
	s.tmp = slices.Grow(s.tmp[:0], len(hs))[:len(hs)]
	for _, h := range hs {
		d := int(h.Hi >> shift)
		s.tmp[counts[d]] = h
		counts[d]++
	}
	// counts[d] is now the end of bucket d; its start is counts[d-1] (0 for d=0).
	start := 0
	for d := 0; d < nb; d++ {
		end := counts[d]
		run := s.tmp[start:end]
		start = end
		if len(run) == 0 {
			continue
		}
		for i := 1; i < len(run); i++ { // tiny runs: insertion sort
			for j := i; j > 0 && (run[j-1].Hi > run[j].Hi || (run[j-1].Hi == run[j].Hi && run[j-1].Lo > run[j].Lo)); j-- {
				run[j-1], run[j] = run[j], run[j-1]
			}
		}
		op := s.pb.MergeDeferred(spikeKeyLen, spikeRunHdr+len(run)*spikeEntrySz)
		s.putKey(op.Key, gen, d)
		binary.LittleEndian.PutUint32(op.Value, uint32(len(run)))
		for i, h := range run {
			h.Put(op.Value[spikeRunHdr+i*spikeEntrySz:])
		}
		if err := op.Finish(); err != nil {
			return err
		}
	}
	s.seq++
	s.state = appendState(s.state[:0], State{Seq: s.seq, Generation: gen, Checkpoint: checkpoint})
	_ = s.pb.Set(metaStateKey, s.state, nil)
	err := s.pb.Commit(pebble.NoSync)
	s.pb.Reset()
	return err
}

// Get reports whether h was committed in generation gen.
func (s *spikeStore) Get(gen uint64, h partition.Hash) (bool, error) {
	kp := spikeKeyPool.Get().(*[spikeKeyLen]byte)
	defer spikeKeyPool.Put(kp)
	s.putKey(kp[:], gen, int(h.Hi>>(64-s.bits)))
	v, closer, err := s.db.Get(kp[:])
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	found, _ := spikeSearch(v, h)
	return found, closer.Close()
}

var spikeKeyPool = sync.Pool{New: func() any { return new([spikeKeyLen]byte) }}

// runs returns the number of runs a read of (gen, bucket) sees.
func (s *spikeStore) runs(gen uint64, bucket int) int {
	var k [spikeKeyLen]byte
	s.putKey(k[:], gen, bucket)
	v, closer, err := s.db.Get(k[:])
	if err != nil {
		return 0
	}
	_, r := spikeSearch(v, partition.Hash{})
	closer.Close()
	return r
}

// Expire drops every generation below oldest with one DeleteRange.
func (s *spikeStore) Expire(oldest uint64) error {
	return s.db.DeleteRange(bucketsStart, genStart(oldest), pebble.NoSync)
}

func (s *spikeStore) Close() error { return s.db.Close() }

func spikeSettle(db *pebble.DB) error {
	if err := db.Flush(); err != nil {
		return err
	}
	for db.Metrics().Compact.NumInProgress > 0 {
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// ---- correctness ----

func TestSpikeBucketCorrectness(t *testing.T) {
	for _, c := range []struct {
		bits   uint
		sorted bool
	}{{6, false}, {6, true}, {10, false}, {10, true}} {
		t.Run(fmt.Sprintf("fanout=%d/sorted=%t", 1<<c.bits, c.sorted), func(t *testing.T) {
			spikeCorrectness(t, c.bits, c.sorted)
		})
	}
}

func spikeCorrectness(t *testing.T, bits uint, sorted bool) {
	dir := t.TempDir()
	const mem = 256 << 10 // small memtables: flushes and compactions happen
	s := openSpike(t, dir, bits, sorted, mem)
	rng := rand.New(rand.NewPCG(1, uint64(bits)))
	want := map[partition.Hash]uint64{}
	var all []partition.Hash
	for gen := uint64(0); gen < 4; gen++ {
		for c := 0; c < 20; c++ {
			hs := make([]partition.Hash, 1+rng.IntN(3000))
			for i := range hs {
				if len(all) > 0 && rng.IntN(50) == 0 {
					// re-commit an existing hash of this generation
					if old := all[rng.IntN(len(all))]; want[old] == gen {
						hs[i] = old
						continue
					}
				}
				hs[i] = partition.Hash{Hi: rng.Uint64(), Lo: rng.Uint64()}
			}
			for _, h := range hs {
				if _, ok := want[h]; !ok {
					all = append(all, h)
				}
				want[h] = gen
			}
			if err := s.Commit(gen, hs, []byte("cp")); err != nil {
				t.Fatal(err)
			}
		}
	}
	absent := make([]partition.Hash, 20000)
	for i := range absent {
		absent[i] = partition.Hash{Hi: rng.Uint64(), Lo: rng.Uint64()}
	}
	check := func(stage string, minGen uint64) {
		t.Helper()
		for h, gen := range want {
			ok, err := s.Get(gen, h)
			if err != nil {
				t.Fatal(err)
			}
			if ok != (gen >= minGen) {
				t.Fatalf("%s: Get(%d, %v) = %t", stage, gen, h, ok)
			}
			if ok, _ := s.Get(gen^1, h); ok && want[h] != gen^1 {
				t.Fatalf("%s: %v found in wrong generation %d", stage, h, gen^1)
			}
		}
		for i, h := range absent {
			if _, ok := want[h]; ok {
				continue
			}
			if ok, err := s.Get(uint64(i%4), h); err != nil || ok {
				t.Fatalf("%s: absent %v found=%t err=%v", stage, h, ok, err)
			}
		}
	}
	check("hot", 0)
	m := s.db.Metrics()
	t.Logf("keys=%d flushes=%d compactions=%d", len(want), m.Flush.Count, m.Compact.Count)
	if err := s.db.Compact(context.Background(), bucketsStart, bucketsEnd, false); err != nil {
		t.Fatal(err)
	}
	check("compacted", 0)
	if r := s.runs(3, 5); sorted && r != 1 {
		t.Fatalf("sorted merger: %d runs after full compaction, want 1", r)
	} else {
		t.Logf("runs in (gen 3, bucket 5) after full compaction: %d", r)
	}
	// Reopen: the merger name is checked against the OPTIONS file.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openSpike(t, dir, bits, sorted, mem)
	v, closer, err := s.db.Get(metaStateKey)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := decodeState(v); err != nil || st.Seq != 80 || st.Generation != 3 {
		t.Fatalf("state after reopen: %+v %v", st, err)
	}
	closer.Close()
	check("reopened", 0)
	// A merger of another name must be refused.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	{
		o := Options{MemTableSize: mem}
		o.applyDefaults()
		cache := pebble.NewCache(64 << 20)
		po := o.pebbleOptions(cache, newFatalState(o.Logger))
		po.Merger = spikeMerger(!sorted)
		if db, err := pebble.Open(dir, po); err == nil {
			db.Close()
			t.Fatal("opened with another merger")
		} else {
			t.Logf("other merger refused: %v", err)
		}
		cache.Unref()
	}
	s = openSpike(t, dir, bits, sorted, mem)
	// Expiry by DeleteRange; then more merges into a surviving generation.
	if err := s.Expire(2); err != nil {
		t.Fatal(err)
	}
	check("expired<2", 2)
	more := make([]partition.Hash, 5000)
	for i := range more {
		more[i] = partition.Hash{Hi: rng.Uint64(), Lo: rng.Uint64()}
		want[more[i]] = 3
	}
	if err := s.Commit(3, more, nil); err != nil {
		t.Fatal(err)
	}
	if err := spikeSettle(s.db); err != nil {
		t.Fatal(err)
	}
	check("expired+more", 2)
	if err := s.db.Compact(context.Background(), bucketsStart, bucketsEnd, false); err != nil {
		t.Fatal(err)
	}
	check("expired+compacted", 2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// ---- benchmarks ----

const (
	spikeTotal  = 3_000_000
	spikeCommit = 10_000
	spikePerGen = 1_000_000
	spikeReads  = 50_000
)

type spikeVariant struct {
	name   string
	commit func(gen uint64, hs []partition.Hash) error
	get    func(gen uint64, h partition.Hash) (bool, error)
	db     func() *pebble.DB
}

// BenchmarkSpike ingests 3M keys in 10k-key commits (a new generation every
// 1M keys, as benchCommit) into each layout, then reads hits and misses in
// three LSM states: right after ingest (hot), after Flush and quiescent
// compactions (settled), after a full manual compaction (compacted).
func BenchmarkSpike(b *testing.B) {
	variants := []func(b *testing.B) spikeVariant{
		func(b *testing.B) spikeVariant {
			s := benchOpen(b, Options{})
			batch := s.NewBatch()
			cp := make([]byte, 64)
			return spikeVariant{
				name: "current",
				commit: func(gen uint64, hs []partition.Hash) error {
					for _, h := range hs {
						batch.Put(gen, h, 0)
					}
					_, err := s.Commit(batch, State{Generation: gen, Checkpoint: cp})
					return err
				},
				get: func(gen uint64, h partition.Hash) (bool, error) {
					_, ok, err := s.Get(gen, h)
					return ok, err
				},
				db: func() *pebble.DB { return s.db },
			}
		},
	}
	type cfg struct {
		bits   uint
		sorted bool
		mem    uint64
	}
	names := []string{"current"}
	for _, c := range []cfg{
		{10, false, DefaultMemTableSize}, {10, true, DefaultMemTableSize},
		{12, false, DefaultMemTableSize}, {12, true, DefaultMemTableSize},
		// smaller memtables bound the operands per hot bucket
		{10, false, 8 << 20}, {10, true, 8 << 20},
		{8, false, 8 << 20}, {8, true, 8 << 20},
		{10, false, 2 << 20}, {10, true, 2 << 20},
	} {
		name := "concat"
		if c.sorted {
			name = "sort"
		}
		name = fmt.Sprintf("bucket%d-%s-mem%dM", 1<<c.bits, name, c.mem>>20)
		names = append(names, name)
		variants = append(variants, func(b *testing.B) spikeVariant {
			s := openSpike(b, b.TempDir(), c.bits, c.sorted, c.mem)
			b.Cleanup(func() {
				if err := s.Close(); err != nil {
					b.Error(err)
				}
			})
			cp := make([]byte, 64)
			return spikeVariant{
				name:   name,
				commit: func(gen uint64, hs []partition.Hash) error { return s.Commit(gen, hs, cp) },
				get:    s.Get,
				db:     func() *pebble.DB { return s.db },
			}
		})
	}
	for vi, mk := range variants {
		b.Run(names[vi], func(b *testing.B) {
			v := mk(b)
			hs := make([]partition.Hash, spikeCommit)
			ingest := func(from, to int) {
				for i := from; i < to; i += spikeCommit {
					gen := uint64(i / spikePerGen)
					for j := range hs {
						hs[j] = keyOf(1, uint64(i+j))
					}
					if err := v.commit(gen, hs); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.Run("ingest", func(b *testing.B) {
				runtime.GC()
				start, cpu := time.Now(), cpuTime()
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				ingest(0, spikeTotal)
				el, elCPU := time.Since(start), cpuTime()-cpu
				runtime.ReadMemStats(&ms1)
				m := v.db().Metrics()
				flushes, compactions := m.Flush.Count, m.Compact.Count
				// Background debt: flush the memtable and wait until
				// compactions are quiescent, so that every layout pays for
				// its flushes and compactions.
				if err := spikeSettle(v.db()); err != nil {
					b.Fatal(err)
				}
				elAll, cpuAll := time.Since(start), cpuTime()-cpu
				b.ReportMetric(spikeTotal/el.Seconds(), "fg-keys/s")
				b.ReportMetric(float64(elCPU.Nanoseconds())/1e3/spikeTotal, "fg-cpu-us/key")
				b.ReportMetric(spikeTotal/elAll.Seconds(), "keys/s")
				b.ReportMetric(float64(cpuAll.Nanoseconds())/1e3/spikeTotal, "cpu-us/key")
				b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/(spikeTotal/spikeCommit), "allocs/commit")
				b.ReportMetric(float64(flushes), "fg-flushes")
				b.ReportMetric(float64(compactions), "fg-compactions")
				b.ReportMetric(float64(v.db().Metrics().Compact.Count), "compactions")
			})
			// hot: one more generation (3) of 1M keys, read right away
			// while its operands are in the memtable / L0.
			ingest(spikeTotal, spikeTotal+spikePerGen)
			for _, state := range []string{"hot", "settled", "compacted"} {
				switch state {
				case "settled":
					if err := spikeSettle(v.db()); err != nil {
						b.Fatal(err)
					}
				case "compacted":
					if err := v.db().Compact(context.Background(), bucketsStart, bucketsEnd, false); err != nil {
						b.Fatal(err)
					}
				}
				for _, hit := range []bool{true, false} {
					name := state + "/miss"
					if hit {
						name = state + "/hit"
					}
					b.Run(name, func(b *testing.B) {
						var ms0, ms1 runtime.MemStats
						runtime.GC()
						runtime.ReadMemStats(&ms0)
						start := time.Now()
						for i := range spikeReads {
							var gen uint64
							var h partition.Hash
							switch {
							case hit && state == "hot":
								j := spikeTotal + uint64(i)*7919%spikePerGen
								gen, h = j/spikePerGen, keyOf(1, j)
							case hit:
								j := uint64(i) * 7919 % (spikeTotal + spikePerGen)
								gen, h = j/spikePerGen, keyOf(1, j)
							case state == "hot":
								gen, h = 3, keyOf(99, uint64(i))
							default:
								gen, h = uint64(i%4), keyOf(99, uint64(i))
							}
							ok, err := v.get(gen, h)
							if err != nil {
								b.Fatal(err)
							}
							if ok != hit {
								b.Fatalf("get %v gen %d: %t", h, gen, ok)
							}
						}
						el := time.Since(start)
						runtime.ReadMemStats(&ms1)
						b.ReportMetric(float64(el.Nanoseconds())/spikeReads, "ns/get")
						b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/spikeReads, "allocs/get")
						b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/spikeReads, "B/get")
						m := v.db().Metrics()
						b.ReportMetric(float64(m.DiskSpaceUsage())/(1<<20), "MiB-disk")
						b.ReportMetric(float64(m.Levels[0].TablesCount), "L0-tables")
					})
				}
			}
		})
	}
}
