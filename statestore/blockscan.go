package statestore

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2/sstable/block"
)

// How a merge reads its inputs.
//
// A merge reads every pack of its input runs in order. Through a Pebble
// iterator each data block cost a block cache lookup, a C allocation
// (cgo), a pread of its own, the cache's insert and eviction and the
// iterator stack's steps: 0.17-0.24 s of the merger's 0.60-0.64 s per 6M
// timed records in the 100M sweep (session 14 profiles), and twice that
// with 2 KiB blocks. A blockScan reads the run's files itself, like a
// lookup (blocks.go): many blocks per pread, each checked against its
// checksum and decoded in a buffer the scan keeps. A block it cannot
// decode itself (compressed, a value stored elsewhere) hands the rest of
// the run to a Pebble iterator, positioned after the last pack it gave
// (runCursor.toPebble).

// scanChunk is how many bytes of a run file a blockScan reads at once (a
// variable for the tests, which cut runs into chunks of a few blocks).
var scanChunk = 256 << 10

// errScanPebble says a blockScan met a block only Pebble decodes.
var errScanPebble = errors.New("statestore: block read through Pebble")

// scanPebbleAfter, when not negative, makes every blockScan hand over to
// Pebble after decoding that many blocks (tests of the handover).
var scanPebbleAfter = -1

// blockScan reads the packs of one run from its files (runBlocks), block
// after block, a scanChunk of the file per read. It holds rb (acquired by
// its opener) until its cursor closes.
type blockScan struct {
	s       *Store
	rb      *runBlocks
	prefix  [runPrefixLen]byte
	fi, bi  int    // the next block: file fi, block bi
	chunk   []byte // bytes of file fi from offset at on
	at      uint32
	raw     []byte // the chunk's buffer
	br      blockRead
	row     int  // the next row of the decoded block
	end     int  // the rows of the decoded block that are packs
	last    bool // the decoded block holds the run's last pack
	done    bool
	decoded int // blocks decoded
}

func newBlockScan(s *Store, r run) *blockScan {
	b := &blockScan{s: s, rb: r.blocks}
	putRunPrefix(b.prefix[:], r.gen, r.id)
	return b
}

// next returns the next pack's value (valid until the call after), or ok
// false at the end of the run's packs; errScanPebble when a block must be
// read through Pebble.
func (b *blockScan) next() (v []byte, ok bool, err error) {
	for b.row >= b.end {
		if b.done {
			return nil, false, nil
		}
		if err := b.load(); err != nil {
			return nil, false, err
		}
	}
	bd := b.br.dec.BlockDecoder()
	cols := len(b.s.blockSchema.ColumnTypes)
	if bd.Bitmap(cols + dataColExternal).At(b.row) {
		return nil, false, errScanPebble
	}
	v = bd.RawBytes(cols + dataColValue).At(b.row)
	b.row++
	return v, true, nil
}

// load decodes the next block of the run, reading the file's next chunk
// when the block lies past the one held; done once the run's packs or
// files end.
func (b *blockScan) load() error {
	for b.fi < len(b.rb.files) && b.bi >= len(b.rb.files[b.fi].fences) {
		b.fi, b.bi, b.chunk = b.fi+1, 0, nil
	}
	if b.last || b.fi >= len(b.rb.files) {
		b.done = true
		return nil
	}
	if b.decoded == scanPebbleAfter {
		return errScanPebble
	}
	bf := &b.rb.files[b.fi]
	off, end := bf.offs[b.bi], bf.offs[b.bi+1]
	if end <= off+block.TrailerLen {
		return b.s.fatal.set(corruptf("data corruption in %s: data block %d spans %d-%d", bf.path, b.bi, off, end))
	}
	if b.chunk == nil || off < b.at || end > b.at+uint32(len(b.chunk)) {
		n := max(int(end-off), min(scanChunk, int(bf.offs[len(bf.offs)-1]-off)))
		if cap(b.raw) < n {
			b.raw = make([]byte, n)
		}
		b.chunk, b.at = b.raw[:n], off
		if _, err := bf.f.ReadAt(b.chunk, int64(off)); err != nil {
			// Without where: "statestore: fatal: EOF" (TestMergeScanReadFault).
			return fmt.Errorf("read %d bytes of %s at %d: %w", n, bf.path, off, err)
		}
	}
	// The decoders need the block 8-byte aligned: a copy of it.
	n := int(end - off)
	data := alignedBytes(&b.br.buf, n)
	copy(data, b.chunk[off-b.at:end-b.at])
	// The rows from the first key at or past the run's filter chunks on
	// are not packs.
	_, rows, frow, ok, err := b.s.decodeBlock(&b.br, bf, off, data, b.prefix[:])
	switch {
	case err != nil:
		return err
	case !ok:
		return errScanPebble // compressed
	}
	b.row, b.end, b.last = 0, frow, frow < rows
	b.bi++
	b.decoded++
	b.s.scannedBlocks.Add(1)
	return nil
}
