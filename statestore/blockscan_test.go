package statestore

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

// TestMergeScan: merges read their inputs' blocks themselves and, at a
// block they cannot decode, hand the rest of the run to a Pebble iterator
// placed after the last pack read (forced here after 0, 1, 2 and 5
// blocks of every input; -1: never). Every key stays findable, and a scan
// of the generation yields each one once, in hash order.
func TestMergeScan(t *testing.T) {
	defer func(old int) { scanChunk = old }(scanChunk)
	for _, tc := range []struct{ after, chunk int }{{-1, 256 << 10}, {0, 256 << 10}, {1, 256 << 10}, {2, 256 << 10}, {5, 256 << 10}, {-1, 6000}, {3, 6000}} {
		after := tc.after
		t.Run(fmt.Sprintf("pebble-after=%d/chunk=%d", after, tc.chunk), func(t *testing.T) {
			defer func(old int) { scanPebbleAfter = old }(scanPebbleAfter)
			scanPebbleAfter = after
			scanChunk = tc.chunk
			s := mustOpen(t, "s", testOptions(vfs.NewMem()))
			defer mustClose(t, s)
			keys := fillIndexes(t, s, 1, 0, 3*s.merge.fanout)
			if err := s.settle(); err != nil {
				t.Fatal(err)
			}
			blocks, handovers := s.scannedBlocks.Load(), s.scanHandovers.Load()
			t.Logf("merged keys %d, blocks scanned %d, runs handed over %d", s.mergedKeys, blocks, handovers)
			if s.mergedKeys == 0 {
				t.Fatal("no merge ran")
			}
			if (handovers > 0) != (after >= 0) || (blocks > 0) != (after != 0) {
				t.Fatalf("blocks scanned %d, runs handed over %d with the handover after %d blocks", blocks, handovers, after)
			}
			mustFind(t, s, 1, keys, "after the merges")
			var got []partition.Hash
			if err := s.ScanGeneration(1, func(h partition.Hash, _ uint64) error {
				got = append(got, h)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(keys)
			slices.SortFunc(want, func(x, y partition.Hash) int {
				if c := cmpU64(x.Hi, y.Hi); c != 0 {
					return c
				}
				return cmpU64(x.Lo, y.Lo)
			})
			if !slices.Equal(got, want) {
				t.Fatalf("scan: %d keys, want %d (sorted, each once)", len(got), len(want))
			}
		})
	}
}

// readFaultFS fails one read of an sstable once armed, after a number of
// them succeed: with an error, or short (half the bytes and io.EOF, as a
// file cut under the reader reads). The reads after it succeed.
type readFaultFS struct {
	vfs.FS
	armed atomic.Bool
	after atomic.Int64 // reads that still succeed once armed
	short bool
	// corrupt: instead of failing, every read of the file named
	// corruptPath that covers its offset corruptAt flips that byte.
	corrupt     bool
	corruptPath string
	corruptAt   int64
	hits        atomic.Int64
}

type readFaultFile struct {
	vfs.File
	fs   *readFaultFS
	name string
}

func (fs *readFaultFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if err != nil || !strings.HasSuffix(name, ".sst") {
		return f, err
	}
	return readFaultFile{File: f, fs: fs, name: name}, nil
}

func (f readFaultFile) ReadAt(p []byte, off int64) (int, error) {
	if c := f.fs.corruptAt; f.fs.corrupt && f.name == f.fs.corruptPath && off <= c && c < off+int64(len(p)) && f.fs.armed.Load() {
		f.fs.hits.Add(1)
		n, err := f.File.ReadAt(p, off)
		p[c-off] ^= 0x40
		return n, err
	}
	if !f.fs.corrupt && f.fs.armed.Load() && f.fs.after.Add(-1) < 0 && f.fs.armed.CompareAndSwap(true, false) {
		f.fs.hits.Add(1)
		if f.fs.short {
			n, _ := f.File.ReadAt(p[:len(p)/2], off)
			return n, io.EOF
		}
		return 0, fmt.Errorf("injected read error: %w", syscall.EIO)
	}
	return f.File.ReadAt(p, off)
}

// TestMergeScanReadFault: one read of a merge's input fails (an error, or
// a short read) after 0, 1 or 3 reads went through. The store turns fatal
// with that error, naming the file (no merge is recorded from a partial
// read), and a reopen finds every key committed, each once; also after
// the scan handed a run to a Pebble iterator. Planted: runCursor.advance
// (or, after the handover, runCursor.load) taking the failed read for the
// end of the run recorded a merge without the rest of its keys.
func TestMergeScanReadFault(t *testing.T) {
	defer func(old, oldAfter int) { scanChunk, scanPebbleAfter = old, oldAfter }(scanChunk, scanPebbleAfter)
	// A run of the test is one chunk of 256 KiB (reads 0-3 are the four
	// runs' first), and 32 of 6000 bytes (a chunk ends within a block);
	// with pebble >= 0 every run is handed to a Pebble iterator after that
	// many blocks, whose reads may fail too.
	for _, tc := range []struct {
		chunk, pebble int
		after         []int64
	}{{256 << 10, -1, []int64{0, 1, 3}}, {6000, -1, []int64{0, 7, 20, 70}}, {6000, 2, []int64{6, 9, 12}}} {
		chunk, pebbleAfter := tc.chunk, tc.pebble
		for _, short := range []bool{false, true} {
			for _, after := range tc.after {
				t.Run(fmt.Sprintf("chunk=%d/pebble-after=%d/short=%t/after=%d", chunk, pebbleAfter, short, after), func(t *testing.T) {
					scanChunk, scanPebbleAfter = chunk, pebbleAfter
					base := newCloneableMem()
					fs := &readFaultFS{FS: base, short: short}
					opts := testOptions(fs)
					s := mustOpen(t, "db", opts)
					release := make(chan struct{})
					s.mg.w.post(func() { <-release }) // the merge waits for the fault
					keys := fillIndexes(t, s, 1, 0, s.merge.fanout)
					if err := s.settleFlushes(); err != nil {
						t.Fatal(err)
					}
					fs.after.Store(after)
					fs.armed.Store(true)
					close(release)
					_ = s.settle()
					err := s.Err()
					if fs.hits.Load() == 0 {
						t.Fatal("no read failed: the merge read nothing")
					}
					if !errors.Is(err, ErrFatal) || pebbleAfter < 0 && !strings.Contains(err.Error(), ".sst at ") {
						t.Fatalf("Err after a failed read of a merge: %v, want fatal (naming the file if the scan read it)", err)
					}
					t.Logf("fatal: %v", err)
					if err := s.Close(); !errors.Is(err, ErrFatal) {
						t.Fatalf("Close: %v", err)
					}
					clone := base.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(1, uint64(after)))})
					opts.FS = clone
					s = mustOpen(t, "db", opts)
					defer mustClose(t, s)
					mustHoldExactly(t, s, 1, keys, "after the reopen")
				})
			}
		}
	}
}

// TestMergeScanCorruptBlock: a merge reads a block that fails its checksum:
// a byte flipped at the start of a run's second block (a pack boundary)
// or in the last block's trailer, in a run read in one chunk or in
// chunks of 6000 bytes. The store turns fatal with "data corruption"
// naming the file, records no merge, and a reopen (on the intact files)
// finds every key once. Planted: decodeBlock not checking the checksum
// let the merge go on with a wrong hash or a block that does not decode.
func TestMergeScanCorruptBlock(t *testing.T) {
	defer func(old int) { scanChunk = old }(scanChunk)
	for _, chunk := range []int{256 << 10, 6000} {
		for _, where := range []string{"block-1-start", "last-trailer"} {
			t.Run(fmt.Sprintf("chunk=%d/%s", chunk, where), func(t *testing.T) {
				scanChunk = chunk
				base := newCloneableMem()
				fs := &readFaultFS{FS: base, corrupt: true}
				opts := testOptions(fs)
				s := mustOpen(t, "db", opts)
				release := make(chan struct{})
				s.mg.w.post(func() { <-release })
				keys := fillIndexes(t, s, 1, 0, s.merge.fanout)
				if err := s.settleFlushes(); err != nil {
					t.Fatal(err)
				}
				bf := &s.runs.Load().of(1)[0].blocks.files[0]
				if len(bf.offs) < 3 {
					t.Fatalf("run of %d blocks, want 2 or more", len(bf.offs)-1)
				}
				fs.corruptPath, fs.corruptAt = bf.path, int64(bf.offs[1])
				if where == "last-trailer" {
					fs.corruptAt = int64(bf.offs[len(bf.offs)-1]) - 1
				}
				fs.armed.Store(true)
				close(release)
				_ = s.settle()
				err := s.Err()
				if fs.hits.Load() == 0 {
					t.Fatal("no read covered the corrupt byte")
				}
				if !errors.Is(err, ErrFatal) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "data corruption in ") {
					t.Fatalf("Err after a merge read a corrupt block: %v, want fatal data corruption", err)
				}
				t.Logf("fatal: %v", err)
				fs.armed.Store(false)
				_ = s.Close()
				opts.FS = base.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(2, 2))})
				s = mustOpen(t, "db", opts)
				defer mustClose(t, s)
				mustHoldExactly(t, s, 1, keys, "after the reopen")
			})
		}
	}
}
