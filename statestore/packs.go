package statestore

import (
	"bufio"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

// Packs (layout 3, see doc.go): a run stores its sorted hashes in packs of
// up to packKeys consecutive hashes, one Pebble KV per pack. The key is the
// run's prefix and the pack's LAST hash (0x01 gen run last, the 33-byte
// shape of layout 2's keys), so SeekGE(0x01 gen run h) lands on the only
// pack of the run that can hold h; the value is
//
//	tag(1) hash(16, big-endian) x n [version(8, little-endian) x n]
//
// the versions only with tag packTagVersions (mode "version"). n follows
// from the value's length. Packs of one run never overlap and hold every
// hash of the run once.
const (
	packTagHashes   byte = 1 // hashes only (mode "first")
	packTagVersions byte = 2 // hashes, then one fixed 8-byte version per hash

	// defaultPackKeys is the pack size unless Options.packKeys says
	// otherwise; see "Why this layout" in doc.go for the measurements.
	defaultPackKeys = 64
	maxPackKeys     = 4096
)

// packView is one decoded pack value. It aliases the value's bytes.
type packView struct {
	hashes   []byte // n*16
	versions []byte // n*8, or nil in mode "first"
	n        int
}

// decodePack checks a pack value's tag and length.
func decodePack(v []byte) (packView, error) {
	if len(v) < 1 {
		return packView{}, corruptf("statestore: corrupt pack: empty value")
	}
	body := v[1:]
	switch v[0] {
	case packTagHashes:
		if len(body) == 0 || len(body)%16 != 0 {
			return packView{}, corruptf("statestore: corrupt pack: %d bytes of hashes", len(body))
		}
		return packView{hashes: body, n: len(body) / 16}, nil
	case packTagVersions:
		if len(body) == 0 || len(body)%24 != 0 {
			return packView{}, corruptf("statestore: corrupt pack: %d bytes of hashes and versions", len(body))
		}
		n := len(body) / 24
		return packView{hashes: body[:n*16], versions: body[n*16:], n: n}, nil
	}
	return packView{}, corruptf("statestore: corrupt pack: unknown tag %d", v[0])
}

func (p *packView) hash(i int) partition.Hash {
	return partition.HashFromBytes(p.hashes[i*16 : i*16+16])
}

func (p *packView) version(i int) uint64 {
	if p.versions == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(p.versions[i*8 : i*8+8])
}

// find returns the index of h in the pack by binary search.
func (p *packView) find(h partition.Hash) (int, bool) {
	lo, hi := 0, p.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		b := p.hashes[m*16:]
		x := binary.BigEndian.Uint64(b[0:8])
		if x < h.Hi || (x == h.Hi && binary.BigEndian.Uint64(b[8:16]) < h.Lo) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < p.n && p.hash(lo) == h {
		return lo, true
	}
	return lo, false
}

// lookupPack finds h in the run iterator it is bounded to: the pack at
// SeekGE(key) (key is the run key of h) is the only one that can hold it.
func lookupPack(it *pebble.Iterator, key []byte, h partition.Hash) (version uint64, found bool, err error) {
	if !it.SeekGE(key) {
		return 0, false, it.Error()
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return 0, false, err
	}
	p, err := decodePack(v)
	if err != nil {
		return 0, false, err
	}
	i, ok := p.find(h)
	if !ok {
		return 0, false, nil
	}
	return p.version(i), true, nil
}

// packWriter writes the sorted hashes of one run into an sstable as packs,
// and sets them in the run's filter (which the store keeps in memory).
type packWriter struct {
	w        *sstable.Writer
	gen, id  uint64
	packKeys int
	vm       bool
	key      [bucketKeyLen]byte
	val      []byte   // tag, then the pending pack's hashes
	vers     []uint64 // the pending pack's versions (mode "version")
	n        int      // hashes pending
	fw       *runFilterWriter
	mf       *memFilter // the run's filter, once fw is finished
	last     partition.Hash
}

// newPackWriter returns a writer of run id of gen into w, which sets every
// hash written in a run filter sized for filterKeys keys at filterBits
// bits per key (runFilterBits).
func newPackWriter(w *sstable.Writer, gen, id uint64, packKeys int, vm bool, filterKeys, filterBits uint64) *packWriter {
	pw := &packWriter{w: w, gen: gen, id: id, packKeys: packKeys, vm: vm}
	pw.fw = runFilter{keys: max(filterKeys, 1), bits: filterBits, keep: &pw.mf}.newWriter()
	pw.val = make([]byte, 1, 1+packKeys*24)
	if vm {
		pw.vers = make([]uint64, 0, packKeys)
	}
	return pw
}

// add appends h (ascending, no repeats across the run).
func (pw *packWriter) add(h partition.Hash, version uint64) error {
	if pw.fw != nil {
		pw.fw.addHash(h)
	}
	pw.val = binary.BigEndian.AppendUint64(pw.val, h.Hi)
	pw.val = binary.BigEndian.AppendUint64(pw.val, h.Lo)
	if pw.vm {
		pw.vers = append(pw.vers, version)
	}
	pw.last = h
	if pw.n++; pw.n >= pw.packKeys {
		return pw.flush()
	}
	return nil
}

// flush writes the pending pack, if any, keyed by its last hash.
func (pw *packWriter) flush() error {
	if pw.n == 0 {
		return nil
	}
	pw.val[0] = packTagHashes
	if pw.vm {
		pw.val[0] = packTagVersions
		for _, v := range pw.vers {
			pw.val = binary.LittleEndian.AppendUint64(pw.val, v)
		}
		pw.vers = pw.vers[:0]
	}
	putRunKey(pw.key[:], pw.gen, pw.id, pw.last)
	err := pw.w.Set(pw.key[:], pw.val)
	pw.val = pw.val[:1]
	pw.n = 0
	return err
}

// finishFilter returns the filter of every hash written, held once (by
// the run that records it).
func (pw *packWriter) finishFilter() *memFilter {
	if pw.fw != nil {
		pw.fw.Finish(nil)
		pw.fw = nil
	}
	return pw.mf
}

// orFilters sets in dst every bit of src: both are run filters of the
// same size (sized for the same key count), so the result is the filter of
// both key sets.
func orFilters(dst, src []byte) error {
	if len(dst) != len(src) {
		return fmt.Errorf("statestore: filters of %d and %d bytes", len(dst), len(src))
	}
	for i := range dst[:len(dst)-runFilterTrailer] {
		dst[i] |= src[i]
	}
	return nil
}

// A run's filter is kept in Pebble too, so that a reopened store has it in
// memory again (Pebble's own filters are of no use to packs): in chunks of
// filterChunkBytes under the keys
//
//	0x01 gen run 0xff x 16 'f' chunk(4, big-endian)
//
// which sort after every pack key of the run (a pack key is at most the
// run prefix and 16 bytes of 0xff) and before the next run. The chunks are
// written into the run's last sstable (or, for a bulk load, an sstable of
// their own ingested with the run's), so they come and go with the run:
// expiry's DeleteRange, a merge's excise, Open's orphan removal.
//
// A chunk is 64 KiB (1 MiB until session 10): Pebble's table writer holds
// a value in its block builder, the block and its checksummed copy, so a
// run writer held ~3 MiB of Go heap per chunk of 1 MiB (a flush's and a
// merge's at once at the 100M sweep's peak, and the collector's headroom
// half again). Reads concatenate the chunks in order whatever their size,
// so runs written with either size are read.
const (
	filterKeyPrefixLen = runPrefixLen + 16 + 1
	filterKeyLen       = filterKeyPrefixLen + 4
	filterChunkBytes   = 64 << 10
)

// putFilterPrefix writes the first key of run id's filter chunks into k
// (filterKeyPrefixLen bytes).
func putFilterPrefix(k []byte, gen, id uint64) {
	putRunPrefix(k, gen, id)
	for i := runPrefixLen; i < runPrefixLen+16; i++ {
		k[i] = 0xff
	}
	k[runPrefixLen+16] = 'f'
}

// filterStart returns the first key of run id's filter chunks: the
// exclusive upper bound of its packs.
func filterStart(gen, id uint64) []byte {
	k := make([]byte, filterKeyPrefixLen)
	putFilterPrefix(k, gen, id)
	return k
}

// parseRunOf returns the generation and run of a pack or filter key.
func parseRunOf(k []byte) (gen, id uint64, ok bool) {
	if (len(k) != bucketKeyLen && len(k) != filterKeyLen) || k[0] != prefixBucket {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint64(k[9:17]), true
}

// setFilterChunks writes filter f of run id into w, after the run's packs.
func setFilterChunks(w *sstable.Writer, gen, id uint64, f []byte) error {
	var k [filterKeyLen]byte
	putFilterPrefix(k[:], gen, id)
	for c := 0; len(f) > 0; c++ {
		n := min(len(f), filterChunkBytes)
		binary.BigEndian.PutUint32(k[filterKeyPrefixLen:], uint32(c))
		if err := w.Set(k[:], f[:n]); err != nil {
			return err
		}
		f = f[n:]
	}
	return nil
}

// readFilter reads run r's filter back from Pebble; nil if the run has
// none or it does not check (the run is then probed by seeking it: correct,
// only slower).
func (s *Store) readFilter(r run) ([]byte, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: filterStart(r.gen, r.id), UpperBound: runEnd(r.gen, r.id)})
	if err != nil {
		return nil, err
	}
	var f []byte
	c := uint32(0)
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != filterKeyLen || binary.BigEndian.Uint32(k[filterKeyPrefixLen:]) != c {
			f = nil
			break
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, err
		}
		f = append(f, v...)
		c++
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	if _, _, ok := runFilterShape(f); !ok {
		return nil, nil
	}
	return f, nil
}

// loadFilters reads the filters of the runs of rs (a registry just read at
// Open, not yet published) into memory.
func (s *Store) loadFilters(rs *runSet) error {
	missing := 0
	for _, runs := range rs.gens {
		for i := range runs {
			f, err := s.readFilter(runs[i])
			if err != nil {
				return fmt.Errorf("statestore: read the filter of run %d of generation %d: %w", runs[i].id, runs[i].gen, err)
			}
			if f == nil {
				missing++
				continue
			}
			mf := newMemFilter(len(f))
			copy(mf.f, f)
			runs[i].filter = mf
			s.keepFilters(runs[i])
		}
	}
	if missing > 0 {
		s.opts.Logger.Warn("statestore: runs without a readable filter are probed without one", "dir", s.dir, "runs", missing)
	}
	return nil
}

// writeFilterTable writes filter f of run id of gen as an sstable of its
// own at path (a bulk load's run, whose parts are written before their
// filters are combined).
func (s *Store) writeFilterTable(path string, gen, id uint64, f []byte) error {
	out, err := s.createTable(path)
	if err != nil {
		return err
	}
	w := sstable.NewWriter(out, s.runWriterOptions())
	if err := setFilterChunks(w, gen, id, f); err != nil {
		_ = w.Close()
		return err
	}
	return w.Close()
}

// runWriteBuf is the write buffer of a run's sstable file: Pebble's own
// file writable buffers 4 KiB, one write system call per data block
// (10.5 s of the 100M sweep's 232 s of CPU samples were those writes).
const runWriteBuf = 256 << 10

// runWritable is an sstable's output file with a write buffer of
// runWriteBuf bytes (Options.runWriteBuf in benchmarks).
type runWritable struct {
	file vfs.File
	bw   *bufio.Writer
	// reused: the file is a dead table (recycle.go), written over from
	// its start, which Finish cuts to the n bytes written.
	reused bool
	n      int64
}

// createTable creates the file of a new table at path, over a dead table
// when the store keeps one (recycle.go).
func (s *Store) createTable(path string) (*runWritable, error) {
	var f vfs.File
	var reused bool
	var err error
	if s.rec != nil {
		f, reused, err = s.rec.create(path)
	} else {
		f, err = s.opts.FS.Create(path, vfs.WriteCategoryUnspecified)
	}
	if err != nil {
		return nil, err
	}
	w := newRunWritable(f, s.opts.runWriteBuf)
	w.reused = reused
	return w, nil
}

// newRunWritable wraps f, buffering size bytes (0: runWriteBuf).
func newRunWritable(f vfs.File, size int) *runWritable {
	if size <= 0 {
		size = runWriteBuf
	}
	return &runWritable{file: f, bw: bufio.NewWriterSize(f, size)}
}

// Write implements objstorage.Writable.
func (w *runWritable) Write(p []byte) error {
	n, err := w.bw.Write(p)
	w.n += int64(n)
	return err
}

// Finish implements objstorage.Writable: flush, cut a reused file to its
// length, sync, close.
func (w *runWritable) Finish() error {
	err := w.bw.Flush()
	if err == nil && w.reused {
		err = truncateFile(w.file, w.n)
	}
	if err == nil {
		err = w.file.Sync()
	}
	if cerr := w.file.Close(); err == nil {
		err = cerr
	}
	return err
}

// Abort implements objstorage.Writable.
func (w *runWritable) Abort() { _ = w.file.Close() }
