package statestore

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Defaults of Options. They are exported so that configuration code can
// document them without repeating the numbers.
const (
	DefaultCacheSize    int64  = 128 << 20
	DefaultMemTableSize uint64 = 32 << 20
)

// minMemTableSize keeps MemTableSize above Pebble's smallest useful memtable;
// tests use small memtables to force flushes, production uses DefaultMemTableSize.
// 32 KiB holds 1024 keys (the smallest index), as 64 KiB did until the
// index's keys shrank in session 8; Pebble's memtable stays at least
// 64 KiB (pebbleMemTableSize).
const minMemTableSize = 32 << 10

// Options configures a Store. The zero value is valid: every field has a
// default.
type Options struct {
	// FS is the file system the store lives on. Tests pass an errorfs or a
	// crashable in-memory FS.
	//
	// The default value is vfs.Default.
	FS vfs.FS

	// CacheSize is the size of the block cache in bytes. It should hold the
	// run filters the store keeps in memory (at most 1 byte per key, reserved in
	// the cache, filter.go) and the sstable index blocks of the whole store
	// (~1 % of the data) so that a Get costs at most one data-block read.
	// Pebble charges memtables to its block cache and the store its indexes
	// of recent keys; the store adds both on top, so CacheSize is all for
	// filters and blocks.
	//
	// The default value is 128 MiB (DefaultCacheSize). It is ignored when
	// Cache is set.
	CacheSize int64

	// Cache, when set, is the block cache of the store instead of one of its
	// own: a cache shared by every store of the process (see Budget), which
	// then bounds the blocks and memtables of all of them together. The
	// store takes its own reference; the caller keeps its reference and
	// releases it (Unref, or Budget.Close) when it no longer opens stores.
	//
	// The default value is nil: the store has a cache of its own, sized as
	// described under CacheSize.
	Cache *pebble.Cache

	// MemTableSize is the size in bytes of one index of recent keys (the
	// layout's memtable: Commits go there, and it is written as runs when
	// full). A store holds two (the active one and the one being written)
	// and a sort buffer of 8 bytes per key (about a quarter of one), and
	// reserves them in its block cache; they live off the Go heap, and only
	// the active one stays resident between flushes. A key costs 28 bytes
	// of index (36 in mode "version"): an index of 32 MiB holds 1.2M keys
	// (930k with versions), where 64 MiB held 1M keys
	// until session 8. Pebble's own memtable holds only metadata and is
	// min(MemTableSize, 512 KiB).
	//
	// The default value is 32 MiB (DefaultMemTableSize): about as many keys
	// per run as 64 MiB held before session 8, so runs and merges are the
	// same size. Values below 32 KiB are rejected.
	MemTableSize uint64

	// DisableWAL turns Pebble's write-ahead log off. See "Crash semantics" in
	// the package documentation: with the WAL (the default) a Commit
	// survives a process crash once Pebble's WAL buffer reached the OS
	// (milliseconds), and a machine crash once Flush returns; without the
	// WAL every Commit since the last memtable flush is lost on any crash,
	// and the job re-reads those keys from the output topic. Either way the
	// store reopens at a consistent Commit. The WAL costs ~15 % of ingest.
	//
	// The default value is false (WAL on, written but not synced per Commit).
	DisableWAL bool

	// Logger receives Pebble's log lines and the store's own events (write
	// stalls, background errors, fatal errors).
	//
	// The default value is a logger that discards everything; fatal errors
	// still surface through Err and the returned errors.
	Logger *slog.Logger

	// VersionMode stores a version per key (dedup mode "version"); otherwise
	// values are empty (mode "first"). The mode is recorded in the store and
	// a store cannot be reopened in the other mode.
	//
	// The default value is false.
	VersionMode bool

	// ReadOnly opens an existing store for reading only (inspection
	// tools): nothing is created or written, and VersionMode is taken from
	// the store instead of checked. Pebble still takes the directory's
	// lock, so a store another process has open (a running job) is refused
	// with an error matching ErrLocked.
	//
	// The default value is false.
	ReadOnly bool

	// budget is the Budget whose Options set Cache (nil: none); the store
	// tells it the blocks its runs need (Budget.noteRuns).
	budget *Budget

	// tune, when set, adjusts the Pebble options after the store has set its
	// own. It exists for the option measurements in the benchmarks.
	tune func(*pebble.Options)

	// merge, when set, replaces the merge policy (defaultMergePolicy), for
	// the merge measurements in the benchmarks.
	merge mergePolicy

	// packKeys, when set, replaces the pack size (defaultPackKeys: hashes
	// per Pebble KV of a run, packs.go), for the layout measurements in the
	// benchmarks.
	packKeys int
	// recycleBytes bounds the dead tables kept for reuse (recycle.go):
	// 0 is RecycleBytes, a negative value keeps none.
	recycleBytes int64

	// runWriteBuf, when set, replaces the write buffer of run sstables
	// (runWriteBuf), for the measurements in the benchmarks.
	runWriteBuf int
}

// packKeysOrDefault is the pack size runs are written with.
func (o *Options) packKeysOrDefault() int {
	if o.packKeys <= 0 {
		return defaultPackKeys
	}
	return min(o.packKeys, maxPackKeys)
}

func (o *Options) applyDefaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = DefaultMemTableSize
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// validate reports every problem, one per line, each naming its field.
func (o *Options) validate() error {
	var errs []error
	if o.Cache == nil && o.CacheSize < 0 {
		errs = append(errs, fmt.Errorf("statestore: cache_size: must be >= 0, got %d", o.CacheSize))
	}
	if o.MemTableSize < minMemTableSize {
		errs = append(errs, fmt.Errorf("statestore: memtable_size: must be >= %d, got %d", minMemTableSize, o.MemTableSize))
	}
	if o.MemTableSize >= 4<<30 {
		errs = append(errs, fmt.Errorf("statestore: memtable_size: must be < 4 GiB, got %d", o.MemTableSize))
	}
	return errors.Join(errs...)
}

// blockCache returns the block cache the store's Pebble uses and the release
// of the reference Open holds while it opens: the shared Cache, or a new one
// of its own (each Pebble DB holds its own reference either way).
func (o *Options) blockCache() (cache *pebble.Cache, release func()) {
	if o.Cache != nil {
		return o.Cache, func() {}
	}
	cache = pebble.NewCache(o.pebbleCacheSize())
	return cache, cache.Unref
}

// memTableStopWrites is Pebble's MemTableStopWritesThreshold: at most this
// many memtables are queued before writes stall.
const memTableStopWrites = 2

// pebbleCacheSize is the size of Pebble's block cache. Pebble charges every
// allocated memtable to the block cache (cache.Reserve), and the store its
// indexes (indexReservation), so a 128 MiB cache with 64 MiB memtables
// would hold no blocks at all once two memtables exist. We add the memtable
// budget (the queued memtables plus the one Pebble keeps for recycling) and
// the indexes so that CacheSize bytes are left for blocks.
func (o *Options) pebbleCacheSize() int64 {
	return o.CacheSize + int64(memTableStopWrites+1)*int64(o.pebbleMemTableSize()) + int64(o.indexReservation())
}

// indexReservation is what a writable store reserves in its block cache for
// its indexes of recent keys (memReservedBytes), so that one cache bounds
// blocks, memtables and indexes together.
func (o *Options) indexReservation() uint64 {
	if o.ReadOnly {
		return 0
	}
	return memReservedBytes(o.memKeys(), o.VersionMode)
}

// pebbleOptions translates Options into Pebble's. Each choice is explained
// where it is made; the numbers behind them are in the package documentation
// ("Pebble options") and were measured with the benchmarks in this package.
func (o *Options) pebbleOptions(cache *pebble.Cache, fatal *fatalState, rec *recycler) *pebble.Options {
	po := &pebble.Options{
		// Write errors end the store before Pebble sees them (guardFS);
		// the tables it deletes may be kept for reuse (recycle.go).
		FS:    guardFS{FS: o.FS, fatal: fatal, rec: rec},
		Cache: cache,
		// Fatalf records the error instead of exiting the process.
		Logger: pebbleLogger{log: o.Logger, fatal: fatal},
		// Our own listener turns flush and compaction failures into fatal
		// store errors instead of letting writes stall forever.
		EventListener: eventListener(o.Logger, fatal),
		// The newest on-disk format: columnar blocks and the range-deletion
		// optimisations that make whole-bucket expiry cheap.
		FormatMajorVersion: pebble.FormatNewest,
		MemTableSize:       o.pebbleMemTableSize(),
		// Two memtables (one filling, one flushing) bound memtable memory
		// at 2*MemTableSize per store (plus one kept for recycling); a stall
		// there means the disk cannot keep up, and more memtables would only
		// postpone it.
		MemTableStopWritesThreshold: memTableStopWrites,
		// Pebble's WAL carries only the store's metadata batches (runs,
		// state, floor), which are few and synced; DisableWAL turns off the
		// store's commit log instead.
		// Our keys are uniformly random within a generation, so every flush
		// overlaps every other L0 file of the current generation and must
		// be compacted into Lbase soon (Pebble's 4 sublevels); but a burst
		// of flushes while a long Lbase compaction runs should not stop
		// commits, hence a stop threshold of 24 instead of 12. Ingest was
		// the same within noise as with Pebble's values at 3M keys.
		L0CompactionThreshold: 4,
		L0StopWritesThreshold: 24,
		// Lbase must hold several flushes worth of data, otherwise every
		// flush cascades into an Lbase->Lbase+1 compaction.
		LBaseMaxBytes: 4 * int64(o.pebbleMemTableSize()),
		// One background compaction, a second only when compaction debt
		// piles up (Pebble's default allows one): on a 2-core host more
		// would take CPU from the stage. (1,1) measured the same at 3M keys;
		// the second slot keeps L0 from waiting behind a long compaction of
		// a grown store.
		CompactionConcurrencyRange: func() (int, int) { return 1, 2 },
		// Expire's range deletion only frees disk once it is in an sstable;
		// under a light load the memtable may take hours to fill, so flush
		// it soon after a range deletion instead.
		FlushDelayDeleteRange: 10 * time.Second,
	}
	// Larger L0 files: a flush of a 64 MiB memtable yields ~4 files instead
	// of ~30 at Pebble's 2 MiB default, fewer files for every later
	// compaction and Get to consider. Deeper levels double from there.
	po.TargetFileSizes[0] = 16 << 20
	for i := range po.Levels {
		l := &po.Levels[i]
		// No Pebble filters (layout 3): a run's keys are its packs' last
		// hashes, which no lookup asks for; a run's filter is the store's
		// own, built from its hashes and kept in memory (filter.go,
		// packs.go). The metadata keys are a handful.
		l.FilterPolicy = pebble.NoFilterPolicy
		// Keys are 128-bit hashes: after the shared bucket prefix (which the
		// columnar block format strips) they are random bytes that no
		// compressor shrinks. Snappy: 89 MiB vs 87 MiB at 4M keys; it would
		// only cost CPU on every flush, compaction and block read.
		l.Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
	}
	if o.tune != nil {
		o.tune(po)
	}
	return po
}

// memKeys is how many keys the in-memory index of recent keys collects
// before the flusher writes them as runs: as many as an index of
// MemTableSize bytes holds (memKeysFor), at least 1024.
func (o *Options) memKeys() uint64 {
	return memKeysFor(o.MemTableSize, o.VersionMode)
}

// maxPebbleMemTableSize bounds Pebble's own memtable. With layout 2 it
// holds only the store's metadata batches (state, floor, run registry: a
// few hundred bytes per run written), so a large one only reserved cache
// room it never used: three 64 MiB memtables took 192 MiB of a 512 MiB
// budget.
const maxPebbleMemTableSize = 512 << 10

// minPebbleMemTableSize is the smallest Pebble memtable: its metadata
// batches (the run registry) stay below its large-batch threshold (half).
const minPebbleMemTableSize = 64 << 10

// pebbleMemTableSize is Pebble's memtable size: MemTableSize sizes the
// index of recent keys, Pebble's memtable is MemTableSize within 64 and
// 512 KiB.
func (o *Options) pebbleMemTableSize() uint64 {
	return min(max(o.MemTableSize, minPebbleMemTableSize), maxPebbleMemTableSize)
}
