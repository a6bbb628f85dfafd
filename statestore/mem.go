package statestore

import (
	"cmp"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/dedupstream/dedupstream/internal/prefetch"
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

// memKeyBytes is what an index keeps per key besides its table: the hash
// (16 bytes); memVersionBytes more in mode "version". The generation is
// the chunk's (every chunk holds keys of one generation).
const (
	memKeyBytes     = 16
	memVersionBytes = 8
)

// memIndexBytes is the memory of a memIndex sized for n keys (vm: with
// versions): its table (memSlotsFor) and its entry chunks.
func memIndexBytes(n uint64, vm bool) uint64 {
	chunk := uint64(1) << memChunkBits
	per := uint64(memKeyBytes)
	if vm {
		per += memVersionBytes
	}
	return uint64(memSlotsFor(max(n, 1)))*8 + (max(n, 1)+chunk-1)/chunk*chunk*per
}

// memKeysFor returns the most keys an index of size bytes holds (vm: with
// versions), at least 1024: 12 bytes of table (8-byte slots, at most two
// thirds full at the handover) and 16 bytes of hash per key (24 with
// versions), so a 32 MiB index holds 1.2M keys (1M keys cost 48 MiB with
// the 32-byte entries and half-full power-of-two tables before session
// 8). The last chunk of entries may reach past size (memIndexBytes counts
// it; only its touched pages are resident).
func memKeysFor(size uint64, vm bool) uint64 {
	per := uint64(memKeyBytes)
	if vm {
		per += memVersionBytes
	}
	lo, hi := uint64(1024), max(uint64(1024), size/per)
	for lo < hi {
		n := hi - (hi-lo)/2
		if uint64(memSlotsFor(n))*8+n*per <= size {
			lo = n
		} else {
			hi = n - 1
		}
	}
	return lo
}

// memReservedBytes is the memory a store reserves for its indexes in the
// block cache: the active index, the one being flushed, and the
// flusher's sort buffer (8 bytes per key, memIndex.sortRefs, for up to
// memFull's keys).
func memReservedBytes(keys uint64, vm bool) uint64 {
	return 2*memIndexBytes(keys, vm) + 8*uint64(memSortKeys(keys))
}

// Entries live in chunks of 1<<memChunkBits, so that growing never copies
// them.
const memChunkBits = 16

// memIndex holds the keys committed since the last run was written: an
// open-addressing hash table over chunks of hashes, so that a confirming
// read of a recent key never reaches Pebble and a Commit costs one hash
// insert per key. Of several Puts of one (gen, h) the last wins. Once it
// is handed to the flusher it is immutable. Readers and the one writer
// synchronise on mu.
//
// A key costs 28 bytes (36 with versions): its hash in a chunk of its
// generation's (16), its version in the chunk's version chunk (8, made
// only when a version other than 0 is put there, so mode "first" has
// none), and 1.5 slots of 8 bytes. Until session 8 an entry held the
// generation and the version beside the hash (32 bytes) in a power-of-two
// table kept at most half full (16 bytes per key at the handover).
//
// Its table and chunks live outside the Go heap (memalloc.go, in off).
type memIndex struct {
	mu sync.RWMutex
	// chunks[c] holds hashes of generation chunkGen[c], clen[c] of them;
	// vchunks[c] their versions (nil: all 0). An entry is c<<memChunkBits
	// | its position. Chunks up to used are in use; the rest are kept from
	// an earlier life of the index (reset), for reuse.
	chunks   [][]partition.Hash // views of off.chunks
	vchunks  [][]uint64
	chunkGen []uint64
	clen     []int
	used     int
	off      *memOff
	n        int
	// slots: the low 32 bits are the entry+1 (0: empty), the high 32 bits
	// the low bits of its slot hash (the table position comes from the
	// high bits), compared before the entry is touched, so a probe costs
	// one cache miss.
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
	cur  int // the generation's chunk with room, +1 (0: none)
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
	// Written before the first probe reads it: a read of a new page maps
	// the shared (huge) zero page, and the first write then faults again
	// and shoots down the other cores' TLB entries for it.
	clear(m.slots)
	freeRegion(old)
}

// release hands m's pages back to the operating system (it then reads as
// empty until reset). The caller guarantees that nothing else holds m.
func (m *memIndex) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.off.release()
}

// memFull reports whether a table of slots slots is too full for n keys:
// over four fifths. An index is handed to the flusher once it holds
// memKeys keys, two thirds of its table (memSlotsFor), after the Commit
// that reached them: the rest up to four fifths is room for that Commit's
// overshoot (a fifth of memKeys), so the table never grows (a growth
// rehashed the index and allocated a table twice the size, then kept by
// the reused index).
func memFull(n, slots int) bool { return 5*n > 4*slots }

// memSlotsFor is the table size that holds n keys at most two thirds full:
// 1.5 n rounded up to a cache line of slots, at least 1024. Linear probing
// at two thirds costs ~3 slot reads for a new key, most in one cache line.
func memSlotsFor(n uint64) int {
	return int(max(1024, (n+n/2+7)&^7))
}

// memSortKeys is how many keys the flusher's sort buffer is made for: an
// index full up to memFull.
func memSortKeys(keys uint64) int {
	return int(memSlotsFor(keys))*4/5 + 1
}

// slotOf maps a slot hash onto a table of n slots (its high bits).
func slotOf(sh uint64, n int) uint64 {
	hi, _ := bits.Mul64(sh, uint64(n))
	return hi
}

// reset empties m for reuse as a new index, keeping its table and entry
// chunks: a handover then allocates nothing, and the table never grows
// (every growth rehashed the whole index). The caller guarantees that
// nothing else holds m.
func (m *memIndex) reset(logNum uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Cleared even when released (its pages then read as zeros): written
	// before the first probe reads it (setSlots).
	clear(m.slots)
	m.n = 0
	m.used = 0
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

// hashAt returns the hash of entry e.
func (m *memIndex) hashAt(e uint32) *partition.Hash {
	return &m.chunks[e>>memChunkBits][e&(1<<memChunkBits-1)]
}

// versionAt returns the version of entry e.
func (m *memIndex) versionAt(e uint32) uint64 {
	if v := m.vchunks[e>>memChunkBits]; v != nil {
		return v[e&(1<<memChunkBits-1)]
	}
	return 0
}

// setVersion sets the version of entry e, making its chunk's versions if
// they are not made yet (they read as 0 until set).
func (m *memIndex) setVersion(e uint32, version uint64) {
	c := e >> memChunkBits
	if m.vchunks[c] == nil {
		if version == 0 {
			return
		}
		r := allocRegion(memVersionBytes<<memChunkBits, MemIndexEntries)
		m.off.chunks = append(m.off.chunks, r)
		m.vchunks[c] = regionOf[uint64](r, 1<<memChunkBits)
	}
	m.vchunks[c][e&(1<<memChunkBits-1)] = version
}

// genOf returns gen's count, added if m holds no key of gen yet.
func (m *memIndex) genOf(gen uint64) *genCount {
	for i := range m.gens {
		if m.gens[i].gen == gen {
			return &m.gens[i]
		}
	}
	m.gens = append(m.gens, genCount{gen: gen})
	return &m.gens[len(m.gens)-1]
}

// appendKey stores (gen, h, version) in gen's chunk and returns its entry.
func (m *memIndex) appendKey(gen uint64, h partition.Hash, version uint64) uint32 {
	g := m.genOf(gen)
	c := g.cur - 1
	if c < 0 || m.clen[c] == 1<<memChunkBits {
		c = m.newChunk(gen)
		g.cur = c + 1
	}
	e := uint32(c<<memChunkBits | m.clen[c])
	m.chunks[c][m.clen[c]] = h
	m.clen[c]++
	if version != 0 || m.vchunks[c] != nil {
		m.setVersion(e, version)
	}
	g.keys++
	m.n++
	return e
}

// newChunk starts a chunk for keys of gen (one kept from an earlier life
// if there is one) and returns its index.
func (m *memIndex) newChunk(gen uint64) int {
	c := m.used
	if c == len(m.chunks) {
		r := allocRegion(memKeyBytes<<memChunkBits, MemIndexEntries)
		m.off.chunks = append(m.off.chunks, r)
		m.chunks = append(m.chunks, regionOf[partition.Hash](r, 1<<memChunkBits))
		m.vchunks = append(m.vchunks, nil)
		m.chunkGen = append(m.chunkGen, 0)
		m.clen = append(m.clen, 0)
	}
	m.chunkGen[c], m.clen[c] = gen, 0
	m.used++
	return c
}

// each calls fn for every entry (generation, hash, version), under the
// read lock, until fn returns an error, which it returns.
func (m *memIndex) each(fn func(gen uint64, h partition.Hash, version uint64) error) error {
	for c := range m.used {
		for p := range m.clen[c] {
			e := uint32(c<<memChunkBits | p)
			if err := fn(m.chunkGen[c], m.chunks[c][p], m.versionAt(e)); err != nil {
				return err
			}
		}
	}
	return nil
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

// memAhead is how many keys putAll prefetches ahead of the one it inserts.
const memAhead = 16

// memPutMode picks putAll's way of overlapping the slots' cache misses, for
// BenchmarkMemPut's comparison: memPrefetch (the default) prefetches the
// slot of the key memAhead places ahead of each insert; memTouch reads the
// slots of each group of memTouchGroup keys, then inserts the group;
// memPlain does neither.
var memPutMode = memPrefetch

const (
	memPrefetch = iota
	memTouch
	memPlain
)

// putAll inserts es in order; a later entry of the same key wins.
//
// The table is far larger than the CPU caches, so every insert starts with
// a cache miss on its slot. Before inserting key i, putAll prefetches the
// slot key i+memAhead starts at, so the misses of many keys are in flight
// while the earlier keys are inserted: a prefetch retires at once, where a
// load that misses holds up the instructions behind it.
func (m *memIndex) putAll(es []entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Without a growth in between, the slots prefetched are the ones the
	// inserts start at (and a stale one is only a wasted prefetch).
	if memPutMode == memPrefetch && len(m.slots) > 0 {
		n := len(m.slots)
		for j := range min(memAhead, len(es)) {
			prefetch.Line(uintptr(unsafe.Pointer(&m.slots[slotOf(slotHash(es[j].gen, es[j].h), n)])))
		}
		for i := range es {
			if j := i + memAhead; j < len(es) {
				prefetch.Line(uintptr(unsafe.Pointer(&m.slots[slotOf(slotHash(es[j].gen, es[j].h), n)])))
			}
			m.put(es[i].gen, es[i].h, es[i].version)
			n = len(m.slots)
		}
		return
	}
	var sink uint64
	for i := 0; i < len(es); i += memTouchGroup {
		group := es[i:min(i+memTouchGroup, len(es))]
		// Without a growth inside the group, the slots read are the ones
		// the inserts start at.
		if memPutMode == memTouch && len(m.slots) > 0 && !memFull(m.n+len(group), len(m.slots)) {
			n := len(m.slots)
			for j := range group {
				sink += m.slots[slotOf(slotHash(group[j].gen, group[j].h), n)]
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
	n := uint64(len(m.slots))
	sh := slotHash(gen, h)
	fp := sh << 32
	for i := slotOf(sh, int(n)); ; {
		s := m.slots[i]
		if s == 0 {
			e := m.appendKey(gen, h, version)
			m.slots[i] = fp | uint64(e+1)
			return
		}
		if s&^0xFFFFFFFF == fp {
			e := uint32(s) - 1
			if m.chunkGen[e>>memChunkBits] == gen && *m.hashAt(e) == h {
				m.setVersion(e, version)
				return
			}
		}
		if i++; i == n {
			i = 0
		}
	}
}

func (m *memIndex) grow() {
	n := max(1024, 2*len(m.slots))
	m.setSlots(n)
	for c := range m.used {
		for p := range m.clen[c] {
			sh := slotHash(m.chunkGen[c], m.chunks[c][p])
			i := slotOf(sh, n)
			for m.slots[i] != 0 {
				if i++; i == uint64(n) {
					i = 0
				}
			}
			m.slots[i] = sh<<32 | uint64(c<<memChunkBits|p) + 1
		}
	}
}

// get returns the version of (gen, h) if m holds it. A nil m holds nothing.
func (m *memIndex) get(gen uint64, h partition.Hash) (uint64, bool) {
	if m == nil {
		return 0, false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := uint64(len(m.slots))
	if n == 0 {
		return 0, false
	}
	sh := slotHash(gen, h)
	fp := sh << 32
	for i := slotOf(sh, int(n)); ; {
		s := m.slots[i]
		if s == 0 {
			return 0, false
		}
		if s&^0xFFFFFFFF == fp {
			e := uint32(s) - 1
			if m.chunkGen[e>>memChunkBits] == gen && *m.hashAt(e) == h {
				return m.versionAt(e), true
			}
		}
		if i++; i == n {
			i = 0
		}
	}
}

// prefetch asks the CPU for the slot of (gen, h) in m's table, where a get
// starts, without waiting for it. A nil m holds nothing.
func (m *memIndex) prefetch(gen uint64, h partition.Hash) {
	if m == nil {
		return
	}
	m.mu.RLock()
	if n := len(m.slots); n > 0 {
		prefetch.Line(uintptr(unsafe.Pointer(&m.slots[slotOf(slotHash(gen, h), n)])))
	}
	m.mu.RUnlock()
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

// sorted returns a sorted copy of the entries of gen (all: every entry,
// sorted by generation then hash).
func (m *memIndex) sorted(gen uint64, all bool) []memEntry {
	if m == nil {
		return nil
	}
	m.mu.RLock()
	var out []memEntry
	if all {
		out = make([]memEntry, 0, m.n)
	}
	_ = m.each(func(g uint64, h partition.Hash, v uint64) error {
		if all || g == gen {
			out = append(out, memEntry{gen: g, h: h, version: v})
		}
		return nil
	})
	m.mu.RUnlock()
	sortMem(out)
	return out
}

// sortRefs returns the entries of m sorted by (gen, h), as references into
// m (gatherRefs reads them), in refs, grown as needed, with counts as
// scratch; both are returned for reuse, so that a flush copies no entry: a
// reference costs 8 bytes where a sorted copy cost 32 and its scratch 32
// more (90 MB of garbage per 64 MiB index, which the Go runtime then kept
// as heap headroom). A reference holds the top 32 bits of the hash above
// the entry, so the sort mostly compares references and reads a hash only
// on a tie of those bits. Chunks hold one generation each, so each
// generation is sorted straight from its chunks (a counting pass on the
// top bits, a scatter, an insertion sort inside the tiny buckets), with no
// second buffer (16 bytes per key until session 8).
func (m *memIndex) sortRefs(refs []uint64, counts []int) ([]uint64, []int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := m.n
	refs = slices.Grow(refs[:0], n)[:n]
	if n == 0 {
		return refs, counts
	}
	gens := slices.Clone(m.gens)
	slices.SortFunc(gens, func(a, b genCount) int { return cmp.Compare(a.gen, b.gen) })
	off := 0
	for _, g := range gens {
		dst := refs[off : off+int(g.keys)]
		counts = m.sortGenRefs(g.gen, dst, counts)
		off += int(g.keys)
	}
	return refs, counts
}

// memGatherLen is how many entries gatherRefs copies at a time: 128 KiB.
const memGatherLen = 4096

// memGatherPrefetch switches gatherRefs' prefetching off for
// BenchmarkFlushSort's comparison.
var memGatherPrefetch = true

// gatherRefs copies the entries refs point to into dst, in order. The
// entries are scattered over the index, so each is a cache miss: gatherRefs
// prefetches the entry memAhead references ahead of the one it copies, so
// that many misses are in flight at once (plain loads overlapped only as
// far as the CPU's reorder window reaches; reading each entry as the run
// writer needs it waited for one miss at a time, 27 % of a flush).
func (m *memIndex) gatherRefs(dst []memEntry, refs []uint64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if memGatherPrefetch {
		for j := range min(memAhead, len(refs)) {
			prefetch.Line(uintptr(unsafe.Pointer(m.hashAt(uint32(refs[j])))))
		}
	}
	for i, r := range refs {
		if j := i + memAhead; memGatherPrefetch && j < len(refs) {
			prefetch.Line(uintptr(unsafe.Pointer(m.hashAt(uint32(refs[j])))))
		}
		e := uint32(r)
		dst[i] = memEntry{gen: m.chunkGen[e>>memChunkBits], h: *m.hashAt(e), version: m.versionAt(e)}
	}
}

// sortGenRefs writes references to the keys of gen (len(dst) of them)
// into dst sorted by hash, with counts as scratch, and returns counts for
// reuse.
func (m *memIndex) sortGenRefs(gen uint64, dst []uint64, counts []int) []int {
	n := len(dst)
	// At most 64k buckets (512 KiB of counts, kept by the store): a 1M-key
	// index leaves 16 keys per bucket, sorted by comparing references.
	shift := 64 - min(bits.Len(uint(n)), 16)
	nb := 1 << (64 - shift)
	counts = slices.Grow(counts[:0], nb+1)[:nb+1]
	clear(counts)
	for c := range m.used {
		if m.chunkGen[c] != gen {
			continue
		}
		for _, h := range m.chunks[c][:m.clen[c]] {
			counts[1+int(h.Hi>>shift)]++
		}
	}
	for i := 1; i <= nb; i++ {
		counts[i] += counts[i-1]
	}
	for c := range m.used {
		if m.chunkGen[c] != gen {
			continue
		}
		for p, h := range m.chunks[c][:m.clen[c]] {
			d := int(h.Hi >> shift)
			dst[counts[d]] = h.Hi>>32<<32 | uint64(c<<memChunkBits|p)
			counts[d]++
		}
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
	ha, hb := m.hashAt(uint32(a)), m.hashAt(uint32(b))
	return ha.Hi < hb.Hi || ha.Hi == hb.Hi && ha.Lo < hb.Lo
}

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

// sortBuffer returns the flusher's sort buffer for an index of n keys, a
// view of s.flushBuf (memalloc.go), which stays resident between flushes.
// The mapping is sized for the largest index (memSortKeys) so it is made
// once.
func (s *Store) sortBuffer(n int) []uint64 {
	if len(s.flushBuf) < 8*n {
		freeRegion(s.flushBuf) // the flusher's own: nothing else sees it
		s.flushBuf = allocRegion(8*max(n, memSortKeys(s.memKeys)), MemSortBuffers)
	}
	return regionOf[uint64](s.flushBuf, n)
}
