package statestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/sstable/block"
	"github.com/cockroachdb/pebble/v2/sstable/colblk"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/dedupstream/dedupstream/partition"
)

// Run blocks: a confirming read of a run reads the one data block that can
// hold its key from the run's sstable file itself, instead of seeking a
// Pebble iterator. Pebble stays the durable substrate (runs are ingested
// sstables, written, merged, excised and expired as before); only the
// read of a block bypasses its iterator stack and its block cache.
//
// Why: through Pebble a confirming read cost 6 us of CPU at 1M keys and 18
// us at 10M (BenchmarkLayout, confirm-cpu-ns), about 40 us at 100M in the
// sweep. The block it needs is almost never cached at those sizes (the
// cache is small by design), so each read allocated a block in C memory
// (cgo calloc), inserted it into the cache and evicted another, after
// walking the merging, level and two-level index iterators, whose index
// blocks competed for the same cache. Here a read is one binary search
// over fences in memory, one pread of a 4 KiB block into a buffer the
// Reader keeps, its checksum and a seek in the decoded block.
//
// runBlocks holds, for each sstable file of a run, in key order, one fence
// per data block (the top 32 bits of the hash named by the block's index
// separator, which is >= every key of the block and < every key of the
// next) and the block's offset: 8 bytes per block of about 240 keys, 0.033
// bytes per key, reserved in the block cache like the run's filter. The
// fences are read from the file's index blocks when the run is written
// (before Pebble ingests it) or when the store opens (Store.loadBlocks).
//
// Files: runBlocks keeps its own open descriptor of every file. Pebble may
// delete its link of a file (a merge's excise, expiry, compaction) while a
// Reader still reads it: the open descriptor keeps the data, and a run's
// keys never change while it is live. Like the filter it is held by the
// registry until the run leaves it and by each Reader that captured the
// run; the last holder closes the files.
type runBlocks struct {
	holds
	files []blockFile
	open  *openFiles // closed by the last holder, or by a cleanup if the run was never recorded
	mem   int        // bytes of fences and offsets
}

// blockFile is one sstable file of a run.
type blockFile struct {
	path   string
	f      vfs.File
	sum    block.ChecksumType
	ino    uint64   // pinned in the recycler while f is open; 0: not pinned
	fences []uint32 // per data block: see runBlocks
	offs   []uint32 // per data block its offset, then the end of the last one's trailer
}

// maxOwnBlock is the largest block (with its trailer) a Reader reads
// itself; a larger one (a block holding a filter chunk) is read through
// Pebble. Run data blocks are 4 KiB.
const maxOwnBlock = 64 << 10

// openRunBlocks opens the files of run (gen, id), in key order, and reads
// their fences. An error leaves the run without blocks: it is then read
// through Pebble, which is correct, only slower.
func (s *Store) openRunBlocks(gen, id uint64, paths []string) (*runBlocks, error) {
	rb := &runBlocks{open: &openFiles{rec: s.rec}}
	rb.init()
	var prefix [runPrefixLen]byte
	putRunPrefix(prefix[:], gen, id)
	for _, p := range paths {
		bf, err := s.readFences(p, prefix[:])
		if err != nil {
			rb.open.close()
			return nil, fmt.Errorf("statestore: read the block index of %s: %w", p, err)
		}
		rb.files = append(rb.files, bf)
		rb.open.files = append(rb.open.files, bf.f)
		rb.open.inos = append(rb.open.inos, bf.ino)
		rb.mem += 4*len(bf.fences) + 4*len(bf.offs)
	}
	rb.moveOffHeap()
	runtime.AddCleanup(rb, (*openFiles).close, rb.open)
	return rb, nil
}

// moveOffHeap moves the fences and offsets of rb, if they are
// memFilterMapMin bytes or more (smaller ones cost a mapping each for
// little memory), into one region off the Go heap (memalloc.go), counted
// as MemRunFences and unmapped with the files' descriptors.
func (rb *runBlocks) moveOffHeap() {
	if rb.mem < memFilterMapMin {
		return
	}
	r := allocRegion(rb.mem, MemRunFences)
	rb.open.region = r
	words := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(r))), rb.mem/4)
	for i := range rb.files {
		bf := &rb.files[i]
		n := copy(words, bf.fences)
		bf.fences, words = words[:n:n], words[n:]
		n = copy(words, bf.offs)
		bf.offs, words = words[:n:n], words[n:]
	}
}

// runBlocksOrNil is openRunBlocks, nil (reads through Pebble) on an error,
// which it logs.
func (s *Store) runBlocksOrNil(gen, id uint64, paths []string) *runBlocks {
	rb, err := s.openRunBlocks(gen, id, paths)
	if err != nil {
		s.opts.Logger.Warn("statestore: run read through Pebble", "generation", gen, "run", id, "err", err)
		return nil
	}
	return rb
}

// openFiles are the descriptors of a run's files and the region holding
// its fences, if off the heap; close closes and unmaps them once.
type openFiles struct {
	files  []vfs.File
	region []byte
	closed atomic.Bool
	// rec pins the files' inodes (inos) while they are open: a file Pebble
	// deleted is not recycled while a Reader may read it (recycle.go).
	rec  *recycler
	inos []uint64
}

func (o *openFiles) close() {
	if o.closed.CompareAndSwap(false, true) {
		for _, f := range o.files {
			_ = f.Close()
		}
		for _, ino := range o.inos {
			o.rec.unpin(ino)
		}
		freeRegion(o.region)
	}
}

// readFences opens path and reads one fence per data block from its index.
func (s *Store) readFences(path string, prefix []byte) (bf blockFile, err error) {
	fs := s.opts.FS
	bf.path = path
	if bf.f, err = fs.Open(path); err != nil {
		return bf, err
	}
	defer func() {
		if err != nil {
			_ = bf.f.Close()
			s.rec.unpin(bf.ino)
		}
	}()
	// Pebble's reader panics on a table of another key schema than the
	// one it is given (the schema reads decode blocks with).
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	fi, err := bf.f.Stat()
	if err != nil {
		return bf, err
	}
	bf.ino = s.rec.pin(fi)
	if fi.Size() >= 1<<32 {
		return bf, fmt.Errorf("%d bytes: offsets past 4 GiB", fi.Size())
	}
	// Pebble's reader, on a descriptor of its own (its Close closes it),
	// for the table's layout and properties.
	rf, err := fs.Open(path)
	if err != nil {
		return bf, err
	}
	readable, err := sstable.NewSimpleReadable(rf)
	if err != nil {
		_ = rf.Close()
		return bf, err
	}
	r, err := sstable.NewReader(context.Background(), readable, sstable.ReaderOptions{
		Comparer: s.cmp, KeySchemas: sstable.MakeKeySchemas(s.blockSchema),
	})
	if err != nil {
		_ = readable.Close()
		return bf, err
	}
	defer r.Close()
	l, err := r.Layout()
	if err != nil {
		return bf, err
	}
	if !l.Format.BlockColumnar() {
		return bf, fmt.Errorf("table format %s is not columnar", l.Format)
	}
	bf.sum = r.BlockReader().ChecksumType()
	var buf []uint64
	var it colblk.IndexIter
	end := uint64(0)
	for _, ih := range l.Index {
		n := int(ih.Length) + block.TrailerLen
		data := alignedBytes(&buf, n)
		if _, err := bf.f.ReadAt(data, int64(ih.Offset)); err != nil {
			return bf, err
		}
		if err := block.ValidateChecksum(bf.sum, data, ih); err != nil {
			return bf, err
		}
		if data[ih.Length] != byte(block.NoCompressionIndicator) {
			return bf, fmt.Errorf("compressed index block")
		}
		if err := it.Init(s.cmp, data[:ih.Length], block.NoTransforms); err != nil {
			return bf, err
		}
		for ok := it.First(); ok; ok = it.Next() {
			h, err := it.BlockHandleWithProperties()
			if err != nil {
				return bf, err
			}
			if h.Offset != end {
				return bf, fmt.Errorf("data block at %d, the one before ends at %d", h.Offset, end)
			}
			bf.fences = append(bf.fences, sepFence(it.Separator(), prefix))
			bf.offs = append(bf.offs, uint32(h.Offset))
			end = h.Offset + h.Length + block.TrailerLen
		}
	}
	bf.offs = append(bf.offs, uint32(end))
	return bf, nil
}

// sepFence is the fence of a block whose index separator is sep: the top
// 32 bits of the hash sep names within the run of prefix (missing bytes
// are zero, which keeps the fence <= sep), or all ones when sep lies past
// the run's packs.
func sepFence(sep, prefix []byte) uint32 {
	if len(sep) < len(prefix) || !bytes.Equal(sep[:len(prefix)], prefix) {
		return ^uint32(0)
	}
	var b [4]byte
	copy(b[:], sep[len(prefix):])
	return binary.BigEndian.Uint32(b[:])
}

// alignedBytes returns n bytes of *buf, grown as needed, 8-byte aligned as
// the columnar decoders require.
func alignedBytes(buf *[]uint64, n int) []byte {
	w := (n + 7) / 8
	if cap(*buf) < w {
		*buf = make([]uint64, w)
	}
	*buf = (*buf)[:w]
	return unsafeBytes(*buf)[:n]
}

// unref drops one hold of rb (rb may be nil); the last closes its files.
func (rb *runBlocks) unref() {
	if rb != nil && rb.holds.unref() {
		rb.open.close()
	}
}

// drop releases the reservation and the registry's hold (once; rb may be
// nil); if no Reader holds rb, its files close now.
func (rb *runBlocks) drop() {
	if rb != nil && rb.holds.drop() {
		rb.open.close()
	}
}

// blockRead is a Reader's state for reading blocks itself, reused across
// reads so that they allocate nothing.
type blockRead struct {
	buf  []uint64 // the block, 8-byte aligned
	dec  colblk.DataBlockDecoder
	meta seekerMeta
	fkey [filterKeyPrefixLen]byte
}

// seekerMeta is colblk.KeySeekerMetadata 8-byte aligned (the key seeker is
// cast onto it).
type seekerMeta struct {
	_ [0]uint64
	m colblk.KeySeekerMetadata
}

// The columns of a columnar data block after the key schema's: trailers,
// prefix-changed, values, is-value-external, is-obsolete (Pebble's
// colblk/data_block.go; TestBlockReadMatchesPebble reads every key of runs
// both ways).
const (
	dataColValue    = 2
	dataColExternal = 3
)

// lookupBlocks looks h (key is its run key) up in run blocks rb. ok is
// false when the block cannot be read here (the caller then asks Pebble).
// A block that fails its checksum makes the store fatal.
func (s *Store) lookupBlocks(br *blockRead, rb *runBlocks, key []byte, h partition.Hash) (version uint64, found, ok bool, err error) {
	x := uint32(h.Hi >> 32)
	for fi := range rb.files {
		bf := &rb.files[fi]
		n := len(bf.fences)
		if n == 0 || bf.fences[n-1] < x {
			continue
		}
		// The first block whose fence is >= x: every block before it
		// ends below h.
		lo := firstFenceAtLeast(bf.fences, x)
		for ; fi < len(rb.files); fi, lo = fi+1, 0 {
			bf = &rb.files[fi]
			for ; lo < len(bf.fences); lo++ {
				v, found, past, ok, err := s.seekBlock(br, bf, lo, key, h)
				if !ok || err != nil || !past {
					return v, found, ok, err
				}
				// h lies between the block's last key and its separator:
				// the next block holds the pack that can hold it.
			}
		}
		return 0, false, true, nil
	}
	return 0, false, true, nil
}

// firstFenceAtLeast returns the index of the first of fences (sorted, the
// last one >= x) that is >= x. Keys are hashes, spread evenly over the
// run, so a block's position is about proportional to its fence: the
// search starts where x falls between the first fence and the last one
// below the run's end, then gallops to bracket the answer and bisects the
// bracket. A file's fences (4 bytes per 4 KiB block) are cold in the
// caches at 100M keys, and a plain bisection of them cost a cache miss per
// step until its range fit a line; from the guess the answer is a few
// blocks away, in the guess's cache line or the next (the sweep's 100M
// point, 6M timed records: the search 0.045 -> 0.03 s, medians of 6 and 9
// runs, about 1 % of a read's cost). A bad guess (keys not spread evenly)
// costs twice a bisection at worst.
func firstFenceAtLeast(fences []uint32, x uint32) int {
	n := len(fences)
	first, top := fences[0], fences[n-1]
	if x <= first {
		return 0
	}
	if top == ^uint32(0) && n > 1 {
		top = fences[n-2] // the run's end: no key's block
	}
	g := n - 1
	if x < top {
		g = int(uint64(x-first) * uint64(n-1) / uint64(top-first))
	}
	// The answer is in [lo, hi]: fences[lo-1] < x (or lo is 0) and
	// fences[hi] >= x (hi is n-1 at most: fences[n-1] >= x).
	lo, hi := 0, n-1
	if fences[g] < x {
		lo = g + 1
		for step := 1; ; step <<= 1 {
			j := g + step
			if j >= n-1 {
				break
			}
			if fences[j] >= x {
				hi = j
				break
			}
			lo = j + 1
		}
	} else {
		hi = g
		for step := 1; ; step <<= 1 {
			j := g - step
			if j < 0 {
				break
			}
			if fences[j] < x {
				lo = j + 1
				break
			}
			hi = j
		}
	}
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if fences[m] < x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// seekBlock reads block i of bf and looks h up in it; past says every key
// of the block is below key.
func (s *Store) seekBlock(br *blockRead, bf *blockFile, i int, key []byte, h partition.Hash) (version uint64, found, past, ok bool, err error) {
	off := bf.offs[i]
	n := int(bf.offs[i+1] - off)
	if n <= block.TrailerLen || n > maxOwnBlock {
		return 0, false, false, false, nil
	}
	data := alignedBytes(&br.buf, n)
	if _, err := bf.f.ReadAt(data, int64(off)); err != nil {
		return 0, false, false, false, err
	}
	row, rows, frow, ok, err := s.decodeBlock(br, bf, off, data, key)
	if !ok || err != nil {
		return 0, false, false, false, err // compressed: Pebble decodes it
	}
	if row >= rows {
		return 0, false, true, true, nil
	}
	if row >= frow {
		return 0, false, false, true, nil // past the run's packs: its filter
	}
	bd := br.dec.BlockDecoder()
	cols := len(s.blockSchema.ColumnTypes)
	if bd.Bitmap(cols + dataColExternal).At(row) {
		return 0, false, false, false, nil // a value elsewhere: Pebble reads it
	}
	p, err := decodePack(bd.RawBytes(cols + dataColValue).At(row))
	if err != nil {
		return 0, false, false, false, s.fatal.set(corruptf("data corruption in %s: block %d: %w", bf.path, off, err))
	}
	j, found := p.find(h)
	if !found {
		return 0, false, false, true, nil
	}
	return p.version(j), true, false, true, nil
}

// decodeBlock checks data, the block of bf at offset off with its trailer
// (8-byte aligned, alignedBytes), against its checksum and decodes it into
// br (seek: the row of the first key >= key, the block's rows, the row of
// the run's first filter key). ok is false for a compressed block, which
// only Pebble decodes. A block that fails its checksum or does not decode
// makes the store fatal.
func (s *Store) decodeBlock(br *blockRead, bf *blockFile, off uint32, data, key []byte) (row, rows, frow int, ok bool, err error) {
	bh := block.Handle{Offset: uint64(off), Length: uint64(len(data) - block.TrailerLen)}
	if err := block.ValidateChecksum(bf.sum, data, bh); err != nil {
		return 0, 0, 0, false, s.fatal.set(corruptf("data corruption in %s: %w", bf.path, err))
	}
	if data[bh.Length] != byte(block.NoCompressionIndicator) {
		return 0, 0, 0, false, nil
	}
	if row, rows, frow, err = br.seek(s.blockSchema, data[:bh.Length], key); err != nil {
		return 0, 0, 0, false, s.fatal.set(corruptf("data corruption in %s: block %d: %w", bf.path, off, err))
	}
	return row, rows, frow, true, nil
}

// seek decodes data and returns the row of the first key >= key, the
// block's rows and the row of the first key at or past the run's filter
// chunks. A block that does not decode (its checksum held) is an error.
func (br *blockRead) seek(schema *colblk.KeySchema, data []byte, key []byte) (row, rows, frow int, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decode data block: %v", r)
		}
	}()
	br.dec.Init(schema, data)
	schema.InitKeySeekerMetadata(&br.meta.m, &br.dec)
	ks := schema.KeySeeker(&br.meta.m)
	row, _ = ks.SeekGE(key, 0, 0)
	copy(br.fkey[:runPrefixLen], key[:runPrefixLen])
	for i := runPrefixLen; i < runPrefixLen+16; i++ {
		br.fkey[i] = 0xff
	}
	br.fkey[runPrefixLen+16] = 'f'
	frow, _ = ks.SeekGE(br.fkey[:], 0, 0)
	return row, br.dec.BlockDecoder().Rows(), frow, nil
}

// blockDecoding returns the comparer and the key schema Pebble writes
// data blocks with under po (Pebble's defaults where po names none).
func blockDecoding(po *pebble.Options) (*pebble.Comparer, *colblk.KeySchema) {
	cmp := po.Comparer
	if cmp == nil {
		cmp = pebble.DefaultComparer
	}
	if ks, ok := po.KeySchemas[po.KeySchema]; ok {
		return cmp, ks
	}
	ks := colblk.DefaultKeySchema(cmp, 16)
	return cmp, &ks
}

// unsafeBytes is the memory of ws as bytes.
func unsafeBytes(ws []uint64) []byte {
	if len(ws) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&ws[0])), len(ws)*8)
}

// loadBlocks opens the blocks of the runs of rs (a registry just read at
// Open, not yet in use): each run's files are the tables Pebble lists in
// its key range, but for a bulk load's filter table. A run whose tables
// are not all plain local files of its own is read through Pebble: also
// a run that only part of a table's range covers, wherever the table
// starts. Pebble rewrites a run it ingested above the last level (its
// range overlapped a range deletion's table there, e.g. an orphan's) with
// the keys beside it, and cuts its compactions' output at the target file
// size: a table from the metadata to the middle of a run, and the run's
// rest in tables of its own. Taking only the latter for the run's files
// lost the keys of the former (TestLoadBlocksSplitRun, "found false").
func (s *Store) loadBlocks(rs *runSet) error {
	levels, err := s.db.SSTables()
	if err != nil {
		return fmt.Errorf("statestore: list the tables: %w", err)
	}
	type table struct {
		smallest []byte
		path     string
	}
	type runKey struct{ gen, id uint64 }
	files := map[runKey][]table{}
	// The bounds of the tables that are not one run's: every run they
	// overlap is read through Pebble.
	var shared []keySpan
	fs := s.opts.FS
	for _, tables := range levels {
		for _, t := range tables {
			gen, id, ok := parseRunOf(t.Smallest.UserKey)
			lg, lid, lok := parseRunOf(t.Largest.UserKey)
			if t.Virtual || t.BackingType != pebble.BackingTypeLocal || !ok || !lok || lg != gen || lid != id {
				sp := keySpan{lo: t.Smallest.UserKey, hi: t.Largest.UserKey, hiExclusive: t.Largest.IsExclusiveSentinel()}
				if !t.Virtual && t.BackingType == pebble.BackingTypeLocal {
					sp.path = fs.PathJoin(s.dir, "db", fmt.Sprintf("%s.sst", t.BackingSSTNum))
				}
				shared = append(shared, sp)
				continue
			}
			k := runKey{gen, id}
			if len(t.Smallest.UserKey) == filterKeyLen {
				continue // a table of filter chunks only
			}
			files[k] = append(files[k], table{
				smallest: t.Smallest.UserKey,
				path:     fs.PathJoin(s.dir, "db", fmt.Sprintf("%s.sst", t.BackingSSTNum)),
			})
		}
	}
	for _, runs := range rs.gens {
		for i := range runs {
			k := runKey{runs[i].gen, runs[i].id}
			ts := files[k]
			if len(ts) == 0 || s.sharesKeys(shared, runStart(k.gen, k.id), runEnd(k.gen, k.id)) {
				continue
			}
			slices.SortFunc(ts, func(a, b table) int { return bytes.Compare(a.smallest, b.smallest) })
			paths := make([]string, len(ts))
			for j, t := range ts {
				paths[j] = t.path
			}
			runs[i].blocks = s.runBlocksOrNil(k.gen, k.id, paths)
			s.keepFilters(runs[i])
		}
	}
	return nil
}

// keySpan is a table's key range: from lo to hi, hi included unless the
// table ends with a range deletion ending there (an orphan's, which ends
// where the next run id starts); path is its file ("": not a local one).
type keySpan struct {
	lo, hi      []byte
	hiExclusive bool
	path        string
}

// sharesKeys reports whether one of the tables spans holds a key in
// [start, end), a run's range. A table whose range covers the run may
// hold none of its keys: the metadata and an orphan's range deletion
// after it span every run between them (until Pebble compacts the
// deletion away), and reading all those through Pebble would slow their
// reads for nothing, so such a table is asked (one seek). One that cannot
// be asked counts as holding keys: the run is read through Pebble, which
// is correct.
func (s *Store) sharesKeys(spans []keySpan, start, end []byte) bool {
	for _, sp := range spans {
		c := bytes.Compare(sp.hi, start)
		if bytes.Compare(sp.lo, end) >= 0 || c < 0 || c == 0 && sp.hiExclusive {
			continue
		}
		if has, err := s.tableHoldsKeys(sp.path, start, end); has || err != nil {
			return true
		}
	}
	return false
}

// tableHoldsKeys reports whether the table at path holds a point key in
// [start, end) (deleted or not).
func (s *Store) tableHoldsKeys(path string, start, end []byte) (has bool, err error) {
	if path == "" {
		return true, nil
	}
	f, err := s.opts.FS.Open(path)
	if err != nil {
		return true, err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		_ = f.Close()
		return true, err
	}
	r, err := sstable.NewReader(context.Background(), readable, sstable.ReaderOptions{
		Comparer: s.cmp, KeySchemas: sstable.MakeKeySchemas(s.blockSchema),
	})
	if err != nil {
		_ = readable.Close()
		return true, err
	}
	defer r.Close()
	it, err := r.NewIter(block.NoTransforms, start, end, sstable.AssertNoBlobHandles)
	if err != nil {
		return true, err
	}
	kv := it.First()
	has = kv != nil
	return has, errors.Join(it.Error(), it.Close())
}
