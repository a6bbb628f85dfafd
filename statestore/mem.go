package statestore

import (
	"cmp"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/dedupstream/dedupstream/partition"
)

// memEntry is one key held in memory: h emitted in generation gen.
type memEntry struct {
	gen     uint64
	h       partition.Hash
	version uint64
}

func compareMem(a, b *memEntry) int {
	if c := cmp.Compare(a.gen, b.gen); c != 0 {
		return c
	}
	if c := cmp.Compare(a.h.Hi, b.h.Hi); c != 0 {
		return c
	}
	return cmp.Compare(a.h.Lo, b.h.Lo)
}

// memEntryBytes is the size of a memEntry.
const memEntryBytes = 32

// memIndexBytes is the memory of a memIndex sized for n keys: its table
// (at most half full, a power of two) and its entry chunks.
func memIndexBytes(n uint64) uint64 {
	chunk := uint64(1) << memChunkBits
	return uint64(memSlotsFor(max(n, 1)))*8 + (max(n, 1)+chunk-1)/chunk*chunk*memEntryBytes
}

// memKeysFor returns the most keys an index of size bytes holds, at least
// 1024: a 64 MiB index holds 1M keys (48 MiB: the next table size would
// leave too little room for entries). The last chunk of entries may reach
// past size (memIndexBytes counts it).
func memKeysFor(size uint64) uint64 {
	best := uint64(1024)
	for slots := uint64(2048); slots*8 < size && slots <= 1<<40; slots *= 2 {
		room := (size - slots*8) / memEntryBytes
		if n := min(slots/2, room); n > best {
			best = n
		}
	}
	return best
}

// memReservedBytes is the memory a store reserves for its indexes in the
// block cache: the active index, the one being flushed, and the
// flusher's sort buffers (16 bytes per key, memIndex.sortRefs).
func memReservedBytes(keys uint64) uint64 {
	return 2*memIndexBytes(keys) + 16*keys
}

// Entries live in chunks of 1<<memChunkBits, so that growing never copies
// them.
const memChunkBits = 16

// memIndex holds the keys committed since the last run was written: an
// open-addressing hash table over an entry slice, so that a confirming read
// of a recent key never reaches Pebble and a Commit costs one hash insert per
// key. Of several Puts of one (gen, h) the last wins. Once it is handed to
// the flusher it is immutable. Readers and the one writer synchronise on mu.
//
// Its table and entries live outside the Go heap (memalloc.go, in off).
type memIndex struct {
	mu     sync.RWMutex
	chunks [][]memEntry // views of off.chunks
	off    *memOff
	// released: off's pages were handed back (they read as zeros), so a
	// reset need not clear the table.
	released bool
	n        int
	// slots: the low 32 bits are the entry's index+1 (0: empty), the high
	// 32 bits the top bits of its slot hash, compared before the entry is
	// touched, so a probe costs one cache miss.
	slots []uint64
	gens  []genCount
	// logNum is the newest commit log holding these commits (0: none);
	// once they are in runs, it and every older log are removed.
	logNum uint64
	// readers counts the Readers holding m: the flusher reuses m's memory
	// for a later index only when none does (Store.recycle).
	readers atomic.Int32
	// retired: m is in runs and no longer published; recycled: it was
	// handed back for reuse (once).
	retired, recycled atomic.Bool
	sink              uint64 // keeps putAll's touching loads alive
}

type genCount struct {
	gen  uint64
	keys uint64
}

// newMemIndex returns an empty index whose table has room for capKeys keys
// without growing (capKeys 0: grow from the smallest table).
func newMemIndex(logNum, capKeys uint64) *memIndex {
	m := &memIndex{logNum: logNum, off: &memOff{}}
	if capKeys > 0 {
		m.setSlots(memSlotsFor(capKeys))
	}
	runtime.AddCleanup(m, (*memOff).free, m.off)
	return m
}

// setSlots gives m an empty table of n slots, unmapping the old one. Under
// m.mu (or before m is shared).
func (m *memIndex) setSlots(n int) {
	old := m.off.slots
	m.off.slots = allocRegion(n*8, MemIndexTable)
	m.slots = regionOf[uint64](m.off.slots, n)
	freeRegion(old)
}

// release hands m's pages back to the operating system (it then reads as
// empty until reset). The caller guarantees that nothing else holds m.
func (m *memIndex) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.off.release()
	m.released = true
}

// memFull reports whether a table of slots slots is too full for n keys:
// over three quarters. An index is handed to the flusher once it holds
// memKeys keys, half of its table (memSlotsFor), after the Commit that
// reached them: the last quarter is room for that Commit's overshoot, so
// the table never grows (a growth rehashed the index and allocated a table
// twice the size, then kept by the reused index).
func memFull(n, slots int) bool { return 4*n > 3*slots }

// memSlotsFor is the table size that holds n keys at most half full.
func memSlotsFor(n uint64) int {
	return max(1024, 1<<bits.Len64(2*n-1))
}

// reset empties m for reuse as a new index, keeping its table and entry
// chunks: a handover then allocates nothing, and the table never grows
// (every growth rehashed the whole index). The caller guarantees that
// nothing else holds m.
func (m *memIndex) reset(logNum uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.released {
		clear(m.slots)
	}
	m.released = false
	m.n = 0
	m.gens = m.gens[:0]
	m.logNum = logNum
	// A new life: once flushed again it is retired and recycled again
	// (without this an index was reused once, then dropped to the
	// collector at its next flush, and every later handover allocated).
	m.retired.Store(false)
	m.recycled.Store(false)
}

func slotHash(gen uint64, h partition.Hash) uint64 {
	return (h.Lo ^ gen*0x9E3779B97F4A7C15) * 0xBF58476D1CE4E5B9
}

func (m *memIndex) at(i int) *memEntry {
	return &m.chunks[i>>memChunkBits][i&(1<<memChunkBits-1)]
}

func (m *memIndex) appendEntry(e memEntry) {
	if m.n>>memChunkBits == len(m.chunks) {
		r := allocRegion(memEntryBytes<<memChunkBits, MemIndexEntries)
		m.off.chunks = append(m.off.chunks, r)
		m.chunks = append(m.chunks, regionOf[memEntry](r, 1<<memChunkBits))
	}
	*m.at(m.n) = e
	m.n++
}

// each calls fn for every entry, under the read lock.
func (m *memIndex) each(fn func(e *memEntry)) {
	for i := 0; i < m.n; i++ {
		fn(m.at(i))
	}
}

// len returns the number of distinct keys.
func (m *memIndex) len() int {
	if m == nil {
		return 0
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.n
}

// memTouchGroup is how many keys putAll touches ahead of inserting them.
const memTouchGroup = 16

// memTouchAhead switches the touching off for BenchmarkMemPut's comparison.
var memTouchAhead = true

// putAll inserts es in order; a later entry of the same key wins.
//
// The table is far larger than the CPU caches, so every insert starts with
// a cache miss on its slot. A group of keys first reads the slot each will
// probe (independent loads the CPU overlaps) and then inserts them, so the
// inserts mostly hit the cache instead of waiting for one miss at a time.
func (m *memIndex) putAll(es []entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sink uint64
	for i := 0; i < len(es); i += memTouchGroup {
		group := es[i:min(i+memTouchGroup, len(es))]
		// Without a growth inside the group, the slots read are the ones
		// the inserts start at.
		if memTouchAhead && len(m.slots) > 0 && !memFull(m.n+len(group), len(m.slots)) {
			shift := 64 - bits.Len(uint(len(m.slots)-1))
			for j := range group {
				sink += m.slots[slotHash(group[j].gen, group[j].h)>>shift]
			}
		}
		for j := range group {
			m.put(group[j].gen, group[j].h, group[j].version)
		}
	}
	m.sink += sink
}

func (m *memIndex) put(gen uint64, h partition.Hash, version uint64) {
	if memFull(m.n+1, len(m.slots)) {
		m.grow()
	}
	mask := uint64(len(m.slots) - 1)
	sh := slotHash(gen, h)
	fp := sh >> 32 << 32
	for i := sh >> (64 - bits.Len(uint(mask))); ; i = (i + 1) & mask {
		s := m.slots[i]
		if s == 0 {
			m.appendEntry(memEntry{gen: gen, h: h, version: version})
			m.slots[i] = fp | uint64(m.n)
			m.count(gen)
			return
		}
		if s&^0xFFFFFFFF != fp {
			continue
		}
		if e := m.at(int(uint32(s)) - 1); e.gen == gen && e.h == h {
			e.version = version
			return
		}
	}
}

func (m *memIndex) count(gen uint64) {
	for i := range m.gens {
		if m.gens[i].gen == gen {
			m.gens[i].keys++
			return
		}
	}
	m.gens = append(m.gens, genCount{gen: gen, keys: 1})
}

func (m *memIndex) grow() {
	n := max(1024, 2*len(m.slots))
	m.setSlots(n)
	mask := uint64(n - 1)
	shift := 64 - bits.Len(uint(mask))
	for j := 0; j < m.n; j++ {
		e := m.at(j)
		sh := slotHash(e.gen, e.h)
		i := sh >> shift
		for m.slots[i] != 0 {
			i = (i + 1) & mask
		}
		m.slots[i] = sh>>32<<32 | uint64(j+1)
	}
}

// get returns the version of (gen, h) if m holds it. A nil m holds nothing.
func (m *memIndex) get(gen uint64, h partition.Hash) (uint64, bool) {
	if m == nil {
		return 0, false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if len(m.slots) == 0 {
		return 0, false
	}
	mask := uint64(len(m.slots) - 1)
	sh := slotHash(gen, h)
	fp := sh >> 32 << 32
	for i := sh >> (64 - bits.Len(uint(mask))); ; i = (i + 1) & mask {
		s := m.slots[i]
		if s == 0 {
			return 0, false
		}
		if s&^0xFFFFFFFF != fp {
			continue
		}
		if e := m.at(int(uint32(s)) - 1); e.gen == gen && e.h == h {
			return e.version, true
		}
	}
}

// keysOf returns how many keys of gen m holds.
func (m *memIndex) keysOf(gen uint64) uint64 {
	if m == nil {
		return 0
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, g := range m.gens {
		if g.gen == gen {
			return g.keys
		}
	}
	return 0
}

// generations appends the generations m holds keys of.
func (m *memIndex) generations(dst []uint64) []uint64 {
	if m == nil {
		return dst
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, g := range m.gens {
		dst = append(dst, g.gen)
	}
	return dst
}

// sortedGen returns a sorted copy of the entries of gen (gen < 0: all of
// them, sorted by generation then hash).
func (m *memIndex) sorted(gen uint64, all bool) []memEntry {
	if m == nil {
		return nil
	}
	m.mu.RLock()
	var out []memEntry
	if all {
		out = make([]memEntry, 0, m.n)
	}
	m.each(func(e *memEntry) {
		if all || e.gen == gen {
			out = append(out, *e)
		}
	})
	m.mu.RUnlock()
	sortMem(out)
	return out
}

// sortRefs returns the entries of m sorted by (gen, h), as references into
// m (refEntry reads one), in refs; tmp is scratch of the same length. Both
// and counts (the counting pass's) are grown as needed and returned (refs
// sorted) for reuse, so that a flush copies no
// entry: a reference costs 8 bytes where a sorted copy cost 32 and its
// scratch 32 more (90 MB of garbage per 64 MiB index, which the Go runtime
// then kept as heap headroom). A reference holds the top 32 bits of the
// hash above the entry's position, so the sort mostly compares references
// and reads an entry only on a tie of those bits.
func (m *memIndex) sortRefs(refs, tmp []uint64, counts []int) ([]uint64, []uint64, []int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := m.n
	refs = slices.Grow(refs[:0], n)[:n]
	tmp = slices.Grow(tmp[:0], n)[:n]
	if n == 0 {
		return refs, tmp, counts
	}
	// Group by generation into tmp (few generations: a counting pass).
	gens := slices.Clone(m.gens)
	slices.SortFunc(gens, func(a, b genCount) int { return cmp.Compare(a.gen, b.gen) })
	offs := make([]int, len(gens)+1)
	for i, g := range gens {
		offs[i+1] = offs[i] + int(g.keys)
	}
	next := slices.Clone(offs[:len(gens)])
	gi := 0
	for i := 0; i < n; i++ {
		e := m.at(i)
		if gens[gi].gen != e.gen {
			gi, _ = slices.BinarySearchFunc(gens, e.gen, func(g genCount, gen uint64) int { return cmp.Compare(g.gen, gen) })
		}
		tmp[next[gi]] = e.h.Hi>>32<<32 | uint64(i)
		next[gi]++
	}
	// Within a generation the hashes are uniform: one counting pass on the
	// top bits into refs, then an insertion sort inside the tiny buckets.
	for gi := range gens {
		src, dst := tmp[offs[gi]:offs[gi+1]], refs[offs[gi]:offs[gi+1]]
		counts = m.sortGenRefs(src, dst, counts)
	}
	return refs, tmp, counts
}

// memGatherLen is how many entries gatherRefs copies at a time: 128 KiB.
const memGatherLen = 4096

// gatherRefs copies the entries refs point to into dst, in order. The
// entries are scattered over the index, so each is a cache miss; loads
// that do not depend on each other overlap, where reading each entry as
// the run writer needs it waited for one miss at a time (flushMem's own
// CPU was 27 % of a flush that way).
func (m *memIndex) gatherRefs(dst []memEntry, refs []uint64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for i, r := range refs {
		dst[i] = *m.refEntry(r)
	}
}

// sortGenRefs sorts the references src (one generation) into dst by hash,
// with counts as scratch, and returns counts for reuse.
func (m *memIndex) sortGenRefs(src, dst []uint64, counts []int) []int {
	n := len(src)
	// At most 64k buckets (512 KiB of counts, kept by the store): a 1M-key
	// index leaves 16 keys per bucket, sorted by comparing references.
	shift := 64 - min(bits.Len(uint(n)), 16)
	nb := 1 << (64 - shift)
	counts = slices.Grow(counts[:0], nb+1)[:nb+1]
	clear(counts)
	for _, r := range src {
		counts[1+int(r>>shift)]++
	}
	for i := 1; i <= nb; i++ {
		counts[i] += counts[i-1]
	}
	for _, r := range src {
		d := int(r >> shift)
		dst[counts[d]] = r
		counts[d]++
	}
	for i := 1; i < n; i++ {
		for j := i; j > 0 && m.refLess(dst[j], dst[j-1]); j-- {
			dst[j-1], dst[j] = dst[j], dst[j-1]
		}
	}
	return counts
}

// refLess orders two references of one generation by hash.
func (m *memIndex) refLess(a, b uint64) bool {
	if a>>32 != b>>32 {
		return a>>32 < b>>32
	}
	ea, eb := m.refEntry(a), m.refEntry(b)
	return ea.h.Hi < eb.h.Hi || ea.h.Hi == eb.h.Hi && ea.h.Lo < eb.h.Lo
}

// refEntry returns the entry a reference of sortRefs points to.
func (m *memIndex) refEntry(r uint64) *memEntry { return m.at(int(uint32(r))) }

// sortMem sorts es by (gen, h), stably: equal keys keep their order, which
// sortLoaded relies on to keep the last Load of a key (every branch below is
// stable, the small-slice one included). Within one generation the
// hashes are uniform: one counting pass on the top bits of Hi, then an
// insertion sort inside the (tiny) buckets, a few ns per key where a
// comparison sort costs ~0.3 us.
func sortMem(es []memEntry) {
	n := len(es)
	if n < 64 {
		slices.SortStableFunc(es, func(a, b memEntry) int { return compareMem(&a, &b) })
		return
	}
	// Group by generation first (few generations: a stable partition).
	slices.SortStableFunc(es, func(a, b memEntry) int { return cmp.Compare(a.gen, b.gen) })
	var tmp []memEntry
	var counts []int
	for start := 0; start < n; {
		end := start + 1
		for end < n && es[end].gen == es[start].gen {
			end++
		}
		tmp, counts = sortHashes(es[start:end], tmp, counts)
		start = end
	}
}

// sortHashes sorts es (one generation) by hash using tmp and counts as
// scratch, and returns them for reuse.
func sortHashes(es, tmp []memEntry, counts []int) ([]memEntry, []int) {
	n := len(es)
	if n < 64 {
		slices.SortStableFunc(es, func(a, b memEntry) int { return compareMem(&a, &b) })
		return tmp, counts
	}
	shift := 64 - min(bits.Len(uint(n)), 20)
	nb := 1 << (64 - shift)
	if cap(counts) < nb+1 {
		counts = make([]int, nb+1)
	}
	counts = counts[:nb+1]
	clear(counts)
	for i := range es {
		counts[1+int(es[i].h.Hi>>shift)]++
	}
	for i := 1; i <= nb; i++ {
		counts[i] += counts[i-1]
	}
	tmp = slices.Grow(tmp[:0], n)[:n]
	for i := range es {
		d := int(es[i].h.Hi >> shift)
		tmp[counts[d]] = es[i]
		counts[d]++
	}
	for i := 1; i < n; i++ {
		for j := i; j > 0 && compareMem(&tmp[j-1], &tmp[j]) > 0; j-- {
			tmp[j-1], tmp[j] = tmp[j], tmp[j-1]
		}
	}
	copy(es, tmp)
	return tmp, counts
}

// retire marks m, just unpublished by the flusher, as reusable once no
// Reader holds it, and returns the C allocator's free pages (trimCHeap).
func (s *Store) retire(m *memIndex) {
	m.retired.Store(true)
	if m.readers.Load() == 0 {
		s.recycle(m)
	}
	trimCHeap()
}

// releaseMem drops a Reader's hold of m (nil: none), recycling m if it was
// the last holder of a retired index.
func (s *Store) releaseMem(m *memIndex) {
	if m != nil && m.readers.Add(-1) == 0 && m.retired.Load() {
		s.recycle(m)
	}
}

// recycle offers m as the next index (handOver resets it), its pages handed
// back; only the first call for an index does anything.
func (s *Store) recycle(m *memIndex) {
	if m.recycled.CompareAndSwap(false, true) {
		// Resident again only as the next index fills: between flushes a
		// store holds one index, not a spare as well.
		m.release()
		s.spare.Store(m)
	}
}

// sortBuffers returns the flusher's two sort buffers for an index of n keys,
// views of s.flushBuf (memalloc.go), which flushMem releases once the flush
// is written: its pages are resident only while a flush runs. The mapping
// is sized for the largest index (1.5 memKeys, memFull) so it is made once.
func (s *Store) sortBuffers(n int) (refs, tmp []uint64) {
	if len(s.flushBuf) < 16*n {
		freeRegion(s.flushBuf) // the flusher's own: nothing else sees it
		s.flushBuf = allocRegion(16*max(n, int(s.memKeys)*3/2+1), MemSortBuffers)
	}
	half := len(s.flushBuf) / 2
	return regionOf[uint64](s.flushBuf, n), regionOf[uint64](s.flushBuf[half:], n)
}
