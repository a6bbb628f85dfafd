package statestore

import (
	"encoding/binary"
	"hash/fnv"
	"math/bits"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"

	"github.com/dedupstream/dedupstream/internal/prefetch"
	"github.com/dedupstream/dedupstream/partition"
)

// runFilter is the sstable filter of a run: a blocked Bloom filter (each
// key sets runFilterProbes bits in one 64-byte block) sized, when the run's
// writer is created, for the keys the run will hold, so that keys set their
// bits as they are written.
//
// Pebble's own Bloom writer keeps a 4-byte hash of every key until the
// table is finished and only then sizes and fills the filter: a merge into
// a run of 25M keys (one generation at 100M keys) held 100 MB of hashes,
// which the Go runtime then kept as heap headroom. This one holds only the
// filter itself: runFilterBitsPerKey, 8 bits (1 byte) per key, about
// 2.5 % false positives (10 bits, 1 %, until session 7), or
// runFilterBitsLarge, 4 bits, for runs larger than leaves (runFilterBits).
// It reads a run key's hash bits directly (they are uniform), other keys
// through FNV-1a.
//
// A run key's block is the high bits of its hash (v2): runs are written in
// hash order, so the writer sets its bits block after block instead of at
// a random cache line per key (v1 mixed both hash words into the block
// number; at 30M keys setting the bits was 41 % of the sstable writer's CPU,
// most of it cache misses). The probes inside the block still come from a
// mix of the low word, independent of the bits the stage's Bloom front
// takes from it (TestRunFilterBesideFront).
//
// Encoding: the blocks, then a uint32 little-endian trailer: the number
// of blocks in its low 28 bits and the probes per key in its top 4 (0:
// runFilterProbes, the only count before layout 4; runFilterProbesFor).
// Tables written before it keep their filter, v1 or Pebble's, which
// Options.Filters still names, so all are read.
type runFilter struct {
	keys uint64 // keys the writer is sized for (reads ignore it)
	bits uint64 // bits per key the writer gives them (0: runFilterBitsPerKey)
	v1   bool   // the filter of tables written before v2 (reads only)
	// keep, when set, receives the finished filter, which the writer
	// builds in memory of its own (the run's writer keeps it: see
	// memFilter).
	keep **memFilter
}

const (
	runFilterName       = "dedupstream.runbloom.v2"
	runFilterNameV1     = "dedupstream.runbloom.v1"
	runFilterBlockBytes = 64
	runFilterBlockBits  = runFilterBlockBytes * 8
	runFilterProbes     = 7 // ln 2 x 10 bits per key; near the best for 8 (6) too
	runFilterTrailer    = 4
	runFilterBlocksMask = 1<<28 - 1 // of the trailer: the blocks; above them the probes
)

// runFilterProbesFor is the probes per key of a filter of bits bits per
// key: the fewest with a false-positive rate within 3 % of the best a
// blocked filter of 64-byte blocks reaches at that size (Poisson model of
// the block loads): 3 at 4 bits (14.8 %; 26 % with 7), 4 at 5-6 (9.3 and
// 5.8 %), 5 at 7, and runFilterProbes from 8 bits on (2.5 % at 8, where
// 6 would give 2.3 %: the leaves' filters stay as layout 3 wrote them).
func runFilterProbesFor(bits uint64) uint64 {
	switch {
	case bits >= 8:
		return runFilterProbes
	case bits >= 7:
		return 5
	case bits >= 5:
		return 4
	case bits >= 3:
		return 3
	}
	return 2
}

// runFilterShape decodes the trailer of filter f: its blocks and probes;
// ok is false if f is no filter this code wrote.
func runFilterShape(f []byte) (blocks, probes uint64, ok bool) {
	if len(f) < runFilterBlockBytes+runFilterTrailer {
		return 0, 0, false
	}
	t := uint64(binary.LittleEndian.Uint32(f[len(f)-runFilterTrailer:]))
	blocks, probes = t&runFilterBlocksMask, t>>28
	if probes == 0 {
		probes = runFilterProbes
	}
	if blocks == 0 || probes > runFilterProbes || blocks*runFilterBlockBytes != uint64(len(f)-runFilterTrailer) {
		return 0, 0, false
	}
	return blocks, probes, true
}

var _ pebble.FilterPolicy = runFilter{}

// Name implements pebble.FilterPolicy.
func (f runFilter) Name() string {
	if f.v1 {
		return runFilterNameV1
	}
	return runFilterName
}

// runFilterBitsPerKey is the size of a run's filter per key it is written
// for: 8 bits, 1 byte per key of memory (the store keeps its runs'
// filters in memory), ~2.5 % false positives with runFilterProbes probes.
// Until session 7 it was 10 bits (1.25 bytes, ~1 %). Measured with
// BenchmarkMergePolicy (4M keys, 16 runs; RUN_FILTER_BITS varies it), CPU
// per read, two interleaved rounds on a loaded machine: a miss (every run
// of the generation probed) 2.42 and 2.33 us at 10 bits, 3.39 and 3.22 at
// 8; a confirming read 24.3 and 26.6 us at 10 bits, 22.0 and 26.8 at 8.
// The stage reads the store for ~2.7 % of its records, most of them
// confirming (a miss is a false positive of its front, ~0.7 % of new
// keys): under 0.01 us per record, for 0.25 bytes per key less. A filter
// records its own size, so filters of every size are read. It is the
// size of a leaf run's filter (runFilterBits); larger runs get
// runFilterBitsLarge.
var runFilterBitsPerKey uint64 = 8

// runFilterBitsLarge is the size per key of the filter of a run of more
// than runFilterLargeLeaves leaves' keys (a merge's output, a bulk load's
// run): 4 bits with 3 probes (runFilterProbesFor), ~15 % false positives,
// where a leaf's 8 bits give 2.5 %. Since session 10 (layout 4).
//
// A generation's runs are probed newest first and a merge takes the
// oldest runs of a tier, so the large runs are the generation's oldest:
// a read reaches them only when the key is in one of them or in none
// (a false positive of the stage's front). Their filters hold most of the
// keys (at 100M keys in 4 generations, 2 merged runs of ~9.6M keys per
// generation beside a few leaves of 1.2M: ~77 % of the keys) and serve
// the fewest probes, so their bits per key buy the least: at 4 bits the
// store keeps ~0.37 bytes per key less (~35 MiB at 100M keys) and pays a
// data block read (~13 us since reads pread one block, blocks.go) for
// ~12 % more of the probes those runs see: by a model of the 100M sweep
// (0.0065 front false positives per record probing ~2 large runs, 0.0075
// hours-old repeats found in them), ~0.002 block reads, ~0.02-0.03 us of
// CPU per record. docs/benchmarks.md, "RSS at 100M keys, session 10", has
// the measured figures. A filter records its size and probes, so stores
// written before keep their filters.
var runFilterBitsLarge uint64 = 4

// runFilterLargeLeaves is how many leaves' keys a run holds at most and
// still gets a leaf's filter (runFilterBits): a leaf holds up to memFull's
// 1.2 x memKeys (the last Commit's overshoot), so 2 keeps every flush's
// run a leaf's and every merge's (at least fanout leaves) a large one's.
const runFilterLargeLeaves = 2

// runFilterBits is the bits per key of the filter of a run of keys keys in
// a store whose leaves hold leafKeys (memKeys): runFilterBitsPerKey for a
// leaf, runFilterBitsLarge for a larger run.
func runFilterBits(keys, leafKeys uint64) uint64 {
	if keys > runFilterLargeLeaves*leafKeys {
		return runFilterBitsLarge
	}
	return runFilterBitsPerKey
}

// runFilterBlocks is the filter size, in blocks, for n keys at bits per key
// (0: runFilterBitsPerKey).
func runFilterBlocks(n, bits uint64) uint64 {
	if bits == 0 {
		bits = runFilterBitsPerKey
	}
	return max(1, (n*bits+runFilterBlockBits-1)/runFilterBlockBits)
}

// filterHash returns the two hashes of key: which block (mapped onto the
// blocks by its high bits), and the probes inside it.
func filterHash(key []byte, v1 bool) (block, probes uint64) {
	var a, b uint64
	if len(key) == bucketKeyLen && key[0] == prefixBucket {
		a, b = binary.BigEndian.Uint64(key[17:25]), binary.BigEndian.Uint64(key[25:33])
		if !v1 {
			return runKeyFilterHash(partition.Hash{Hi: a, Lo: b})
		}
	} else {
		f := fnv.New64a()
		_, _ = f.Write(key)
		a = f.Sum64()
		b = a ^ 0x9E3779B97F4A7C15
	}
	// Mix, so that the bits chosen here are independent of those the
	// stage's Bloom front takes from the same hash.
	return mix64(a ^ bits.RotateLeft64(b, 29)), mix64(b + 0x632BE59BD9B4E019)
}

// runKeyFilterHash is filterHash (v2) of the run key of hash h.
func runKeyFilterHash(h partition.Hash) (block, probes uint64) {
	return h.Hi, mix64(h.Lo + 0x632BE59BD9B4E019)
}

// runFilterBlockAt is the byte offset, in a filter of n blocks, of the
// block of a key whose block hash (filterHash) is block: the hash mapped
// onto the blocks by its high bits (multiply-shift, no division).
func runFilterBlockAt(block, n uint64) uint64 {
	hi, _ := bits.Mul64(block, n)
	return hi * runFilterBlockBytes
}

func mix64(x uint64) uint64 {
	x ^= x >> 31
	x *= 0x7FB5D329728EA185
	x ^= x >> 27
	x *= 0x81DADEF4BC2DD44D
	x ^= x >> 33
	return x
}

// MayContain implements pebble.FilterPolicy.
func (rf runFilter) MayContain(_ pebble.FilterType, f, key []byte) bool {
	n, k, ok := runFilterShape(f)
	if !ok {
		return true // not a filter this code wrote: no answer
	}
	block, probes := filterHash(key, rf.v1)
	off := runFilterBlockAt(block, n)
	blk := f[off : off+runFilterBlockBytes]
	for range k {
		bit := probes & (runFilterBlockBits - 1)
		if blk[bit>>3]&(1<<(bit&7)) == 0 {
			return false
		}
		probes >>= 9
	}
	return true
}

// NewWriter implements pebble.FilterPolicy: a writer whose filter is
// allocated now, for f.keys keys.
func (f runFilter) NewWriter(pebble.FilterType) pebble.FilterWriter {
	return f.newWriter()
}

// newWriter is NewWriter's writer, as its own type (packWriter's addHash).
func (f runFilter) newWriter() *runFilterWriter {
	bits := f.bits
	if bits == 0 {
		bits = runFilterBitsPerKey
	}
	n := min(runFilterBlocks(f.keys, bits), runFilterBlocksMask)
	size := int(n*runFilterBlockBytes + runFilterTrailer)
	w := &runFilterWriter{blocks: n, probes: runFilterProbesFor(bits), v1: f.v1, keep: f.keep}
	if f.keep != nil {
		w.mf = newMemFilter(size)
		w.buf = w.mf.f
	} else {
		w.buf = make([]byte, size)
	}
	return w
}

type runFilterWriter struct {
	buf    []byte // the blocks, then room for the trailer
	blocks uint64
	probes uint64
	v1     bool
	keep   **memFilter
	mf     *memFilter // owns buf when keep is set
	// pending holds the hashes of the last keys, whose bits are set
	// together: each key's block is a cache miss in a large filter, and
	// the misses of a group overlap where one key at a time, between the
	// table writer's own work, waited for each (the writer's CPU per key
	// halved).
	pending [runFilterPending][2]uint64
	n       int
	touched byte // keeps setPending's reads
}

const runFilterPending = 64

// AddKey implements pebble.FilterWriter.
func (w *runFilterWriter) AddKey(key []byte) {
	block, probes := filterHash(key, w.v1)
	w.pending[w.n] = [2]uint64{block, probes}
	if w.n++; w.n == runFilterPending {
		w.setPending()
	}
}

// addHash is AddKey of the run key of h (v2), without the key: the
// pack writer's path, which otherwise wrote each key only for AddKey to
// read its hash back (and through an interface call).
func (w *runFilterWriter) addHash(h partition.Hash) {
	block, probes := runKeyFilterHash(h)
	w.pending[w.n] = [2]uint64{block, probes}
	if w.n++; w.n == runFilterPending {
		w.setPending()
	}
}

// setPending sets the bits of the pending keys.
func (w *runFilterWriter) setPending() {
	// First read one byte of every pending key's block: loads without
	// dependencies between them, so the CPU has many misses in flight;
	// the bit setting below, a chain of read-modify-writes per key, kept
	// only a few keys' misses in flight (BenchmarkRunFilterWriter: about
	// half the CPU per key into a 10M-key filter).
	var touch byte
	for i := range w.pending[:w.n] {
		hi, _ := bits.Mul64(w.pending[i][0], w.blocks)
		w.pending[i][0] = hi
		touch |= w.buf[hi*runFilterBlockBytes]
	}
	w.touched = touch
	for _, p := range w.pending[:w.n] {
		hi := p[0]
		blk := w.buf[hi*runFilterBlockBytes : (hi+1)*runFilterBlockBytes]
		probes := p[1]
		for range w.probes {
			bit := probes & (runFilterBlockBits - 1)
			blk[bit>>3] |= 1 << (bit & 7)
			probes >>= 9
		}
	}
	w.n = 0
}

// Finish implements pebble.FilterWriter: it hands over the filter itself
// (no copy) when dst is empty, as Pebble's table writer passes it. A
// writer serves one table.
func (w *runFilterWriter) Finish(dst []byte) []byte {
	w.setPending()
	t := w.blocks
	if w.probes != runFilterProbes {
		t |= w.probes << 28
	}
	binary.LittleEndian.PutUint32(w.buf[len(w.buf)-runFilterTrailer:], uint32(t))
	out := w.buf
	w.buf = nil
	if w.keep != nil {
		// No copy: Pebble's table writer writes the filter block out
		// before its Close returns and keeps no reference to it.
		*w.keep = w.mf
	}
	if len(dst) == 0 {
		return out
	}
	return append(dst, out...)
}

// memFilter is a run's filter held in memory by the store that wrote it,
// so that a probe of a run that does not hold the key ends here, without
// entering Pebble (an iterator seek reached the filter block through the
// block cache: about 1.5 us per run, which a miss paid for every run of
// its generation). Its bytes are counted by the block cache while the run
// is live (a reservation: a Budget counts it among the stores' own memory,
// a cache of the store's own shrinks by it), at most 1 byte per key; Pebble
// carries none for runs (layout 3): Open reads each run's filter back
// from the chunks its run writer stored after its packs (packs.go).
//
// A filter of memFilterMapMin bytes or more lives outside the Go heap
// (memalloc.go), where the collector neither counts it toward its target
// (GOGC kept half of it again as headroom) nor waits to free it: it is
// unmapped the moment its last holder lets go. Its holders are counted
// (holds): the run registry from the run's writing until the run is merged
// or expired (drop), and each Reader's iterator of the run (acquire,
// unref). A filter that never became a run's (a split run, a failed
// write) is unmapped by a cleanup once unreachable.
type memFilter struct {
	holds
	f   []byte
	mem *filterMem // f's memory when off the heap, else nil
}

// memFilterMapMin is the smallest filter kept outside the Go heap: smaller
// ones (tests' runs) would cost a mapping each for little memory.
const memFilterMapMin = 64 << 10

// filterMem is a mapping holding one filter; free unmaps it once.
type filterMem struct {
	b     []byte
	freed atomic.Bool
}

func (m *filterMem) free() {
	if m.freed.CompareAndSwap(false, true) {
		freeRegion(m.b)
	}
}

// newMemFilter returns a filter of size zeroed bytes held by its writer
// and, once recorded, the registry (one hold).
func newMemFilter(size int) *memFilter {
	mf := &memFilter{}
	mf.init()
	if size < memFilterMapMin {
		mf.f = make([]byte, size)
		return mf
	}
	mf.mem = &filterMem{b: allocRegion(size, MemRunFilters)}
	mf.f = mf.mem.b
	runtime.AddCleanup(mf, (*filterMem).free, mf.mem)
	return mf
}

// unref drops one hold of m (m may be nil): a Reader's, or a split run's
// part whose bits another part took; the last unmaps its memory.
func (m *memFilter) unref() {
	if m != nil && m.holds.unref() {
		m.free()
	}
}

// drop releases the reservation of m's memory and the registry's hold of
// it (m may be nil; once per filter): the memory returns when the last
// Reader holding the run lets go of it.
func (m *memFilter) drop() {
	if m != nil && m.holds.drop() {
		m.free()
	}
}

// free unmaps m's memory if it is off the heap (the heap's goes with m).
func (m *memFilter) free() {
	if m.mem != nil {
		m.mem.free()
	}
}

// mayContain reports whether the run may hold key. The caller holds m.
func (m *memFilter) mayContain(key []byte) bool {
	ok := runFilter{}.MayContain(pebble.TableFilter, m.f, key)
	runtime.KeepAlive(m)
	return ok
}

// blockOf is the byte offset in m.f of the block mayContain reads for the
// run key of hash h, and false if m.f is too short to be a filter. A run
// key's block hash is h's high word (filterHash, v2: every memFilter). The
// blocks are counted from m.f's length, not read from its trailer: a
// prefetch that first loaded every run's trailer waited for those misses
// in turn (0.04-0.09 s of the sweep's 6M timed records at 100M keys). For a
// filter this code wrote the two agree (runFilterShape checks it); for
// another the prefetch is merely wasted.
func (m *memFilter) blockOf(h partition.Hash) (uint64, bool) {
	if len(m.f) < runFilterBlockBytes+runFilterTrailer {
		return 0, false
	}
	n := uint64(len(m.f)-runFilterTrailer) / runFilterBlockBytes
	return runFilterBlockAt(h.Hi, n), true
}

// prefetch asks the CPU for the block of m that mayContain reads for the
// run key of hash h, without waiting for it. The caller holds m.
func (m *memFilter) prefetch(h partition.Hash) {
	if off, ok := m.blockOf(h); ok {
		prefetch.Line(uintptr(unsafe.Pointer(&m.f[off])))
	}
	runtime.KeepAlive(m)
}
