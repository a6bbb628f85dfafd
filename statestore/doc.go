// Package statestore is the exact state of one dedup stage: which business
// keys (as 128-bit partition.Hash values) were emitted in which generation of
// the dedup window, kept in Pebble. The stage's Bloom front says which live
// generations may hold a key; the store confirms exactly. The store is a
// cache of the committed output topic: after a crash the stage re-reads the
// output from the checkpoint the store holds, so the store may lose recent
// commits but must never be inconsistent.
//
// # Layout (format 3)
//
// Pebble's files live in dir/db; the commit logs (dir/commits-NNNNNN.log)
// and the sstables being written (dir/ingest) next to it. A new store is
// created in dir/db.creating and renamed into place once complete, so a
// crash during creation leaves nothing Pebble would refuse to open (it did
// without this: a MANIFEST marker without its MANIFEST).
//
// Keys a Commit records go to two places: an in-memory index of recent keys
// (an open-addressing hash table, memIndex) and the commit log. When the
// index holds as many keys as an index of MemTableSize bytes holds (28
// bytes per key: the 16-byte hash in a chunk of its generation's, 1.5
// table slots of 8 bytes; 8 more for a version in mode "version": 1.2M
// keys at the default 32 MiB) it is handed to a background flusher and a
// new one starts. Until session 8 an entry held the generation and the
// version beside the hash (32 bytes) in a table kept at most half full:
// 1M keys cost 48 MiB, and the sort buffers 16 bytes per key more. The
// flusher sorts references to the keys (8 bytes each, one buffer kept
// across flushes; a sorted copy of the entries cost 64 bytes per key of
// garbage) and writes them, one generation at a time, as a sorted run: an
// sstable written directly (no memtable, no WAL). A run holds its hashes in
// packs (packs.go): one Pebble KV per 64 consecutive hashes of the run,
// whose key is 33 bytes, 0x01, the generation (8 bytes big-endian), the run
// id (8 bytes, a counter across the store) and the pack's LAST hash (16
// bytes), and whose value is a tag byte, the pack's hashes back to back (16
// bytes each, big-endian) and in mode "version" one 8-byte version per hash
// after them. SeekGE(0x01 gen run h) thus lands on the only pack of the run
// that can hold h, and a binary search in its value answers. After the
// packs, under 0x01 gen run 0xff*16 'f' chunk, the run's filter (below) in
// chunks of 1 MiB, so that a reopened store reads it back into memory. A
// run's key range overlaps no other run, so Pebble ingests it straight
// into the last level and never compacts it: a key is written once when
// its run is made, and again only when runs are merged. Metadata lives
// under the prefix 0x00,
// which sorts before every bucket: the state record (Seq, Generation,
// opaque Checkpoint), the expiry floor, the format (layout version and mode;
// a store refuses to open in the other mode) and the run registry (every
// live run: generation, id, keys, bytes; and the next id).
//
// Runs of one generation are merged size-tiered: when eight consecutive
// runs of a generation (newest first) are of one size tier (up to 1x, 8x,
// 64x, ... the index's size) and on one side of the merge barrier (below),
// the merger merges them into one. A key is thus rewritten about
// log8(generation size / index size) times: once at 100M keys in 4
// generations and 64 MiB indexes, where a fanout of 4 rewrote most keys
// twice; a generation then holds at most about 9 runs. Merges never cross
// generations. A merge's inputs leave Pebble at once (DB.Excise, after the
// registry without them is synced) rather than through range deletions
// that Pebble's compactions carry down to the runs. See "Merges".
//
// Merges run on a goroutine of their own (the merger), beside the flusher:
// a flush only kicks it. Before, the flusher ran the merges a flush made
// due before its next flush, so a handover that came while a merge of
// eight leaves ran (seconds at 100M keys) waited for it, and the stage
// with it; now a handover waits at most for the previous index's own flush
// (TestFlushNotBehindMerge). The flusher and the merger both change the
// run registry: run ids are handed out, and each new registry is built
// from the published one, synced and published, under one mutex, so
// neither records a registry without the other's runs
// (TestMergeBesideFlush); a merge whose generation expired while it ran
// is dropped unrecorded (TestMergeOfExpiredGeneration). The merger takes
// the oldest window of a tier (it may find more than eight runs there).
// Close abandons a merge in progress (its inputs stay, its output is
// removed).
//
// The registry records for every run the range of leaf runs (runs a flush
// or bulk load wrote from memory) whose keys it holds (registry encoding
// 2; a registry of encoding 1 still opens, its runs counting as holding
// every leaf up to their own id). A generation's runs are ordered by their
// newest leaf, which is the order their keys were committed in: of a key in
// several runs (version mode) the first holds its newest version.
//
// A store of layout 1 (one key per hash written through the memtable) or
// layout 2 (runs of one Pebble key per hash, before packs) is refused with
// an error that names its directory: remove it and the job restores the
// store from the output topic (TestOpenRefusesLayout2).
//
// # Why this layout (measured)
//
// Layout 1 wrote every key through Pebble's memtable; keys are uniformly
// random within a generation, so every flush overlapped the whole
// generation below it and leveled compaction rewrote each key more often
// the larger the store: BenchmarkLayout, filling 10k-key commits over ten
// generations (CPU per key, flushes and compactions included, same run,
// machine shared with six other jobs):
//
//	                                 1M keys   4M keys   10M keys
//	layout 1 (memtable)              2.54 us   3.57 us
//	layout 1, L0 at 8, 2 compactions 1.73 us   3.42 us
//	layout 2 (runs)                  1.11 us   1.10 us   1.05 us
//
// Layout 2 is flat in the store's size; the Pebble option variants of
// layout 1 only move the curve (one compaction at a time was slower than
// both). A confirming read of a key already in a run costs a data block
// read in both layouts (CPU per read, process-wide: 8.7 vs 8.6 us at 1M,
// 17 vs 12.8 us at 4M, 27 us at 10M for layout 2: it grows with the
// store, and is the open cost of this layout); a key still in memory costs
// a hash probe. A miss (a Bloom false positive of the front) ends at each
// run's sstable filter (0.9 us at 1M, 3.9 us at 10M). The bucketed merge-operand spike (the previous
// issue's closing note) cut ingest too but made reads of unmerged buckets
// 4-14x slower; keeping the recent keys in a hash index instead answers
// those reads from memory.
//
// Layout 3 keeps layout 2's runs and writes their hashes in packs. Layout
// 2 paid Pebble's per-KV cost once per key and write (the sstable writer's
// block encoding) and per merge read (an iterator step through Pebble's
// merging, level and block iterators): in the session-6 100M sweep the
// merges' reads (runCursor.next) were 80 s of CPU and the table writer's
// block encoding 42 s. A pack of 64 hashes pays them once per 64 keys; a
// cursor steps through a pack's hashes in memory. Measured side by side
// (process CPU; medians of 3 interleaved rounds, one process per variant
// and round, machine at load 13-19 from four other sessions; "layout 2"
// is the build before packs, "pack 1" is layout 3 with one hash per pack):
//
//	BenchmarkMergePolicy (4M keys, 4 generations, 2 MiB indexes, merges)
//	                   ingest us/key  confirm us  miss us  disk B/key
//	layout 2               1.64          17.9       1.09        -
//	pack 1                 1.96          21.3       2.05      38.7
//	pack 16                0.93          17.7       1.85      19.1
//	pack 64                0.86          16.9       1.95      18.1
//	pack 256               0.84          23.5       1.70      17.8
//	pack 64, 16 KiB blocks 0.81          26.5       2.35      17.7
//
//	BenchmarkLayout (4M keys, 10 generations, 64 MiB indexes)
//	                   ingest us/key  last tenth  confirm us  miss us
//	layout 2               0.86          2.89        21.5       1.08
//	pack 1                 0.97          3.39        24.0       1.06
//	pack 16                0.60          1.57        17.8       1.10
//	pack 64                0.59          1.52        19.7       1.10
//	pack 256               0.58          1.52        19.7       0.92
//
// Packs of 64 halve the ingest cost where merges run (0.53x) and cut it by
// a third where they do not (0.68x), with confirming reads and misses the
// same within this machine's noise (a miss ends at the run filters in
// memory in both; the miss figures of BenchmarkMergePolicy spread 0.95-2.5
// us within one variant). 16, 64 and 256 ingest alike; 256 read slower
// in one benchmark (a 4 KiB pack is a block of its own) and 16 KiB blocks
// slowed confirms, so the default is 64 in Pebble's 4 KiB blocks. Disk:
// 16 bytes per hash plus 1.25 for the filter chunks (the 30M sweep's
// whole store directory: 20.8 bytes per key in layout 2, 19.8 in packs of
// 64). A pack of one hash costs more than layout 2 (a 17-byte value per
// key).
//
// # Merges
//
// The merge policy was chosen with BenchmarkMergePolicy: the 100M-key
// sweep's shape scaled down (4M keys in 4 generations, 2 MiB indexes, so
// about 23 leaf runs per generation against the sweep's 18, and a 16 MiB
// block cache), process CPU per key over the fill (flushes and merges
// included), and per read of a present key (confirm) and of an absent
// one (miss: every run of the generation is probed). Medians of 2-9
// interleaved runs, one process per variant and round, machine at load
// 8-18 (session 5):
//
//	                       ingest us/key  rewrites/key  runs  confirm us  miss us
//	fanout 4 (before)          3.57          1.8          8      23.1       3.5
//	fanout 8                   1.66          0.8         24      30.2      11.1
//	fanout 16                  1.68          0.8         20      33.2      12.2
//	fanout 4, cap 16 leaves    3.32          1.8          8      22.6       4.5
//	fanout 4, split sstables   3.21          1.8          8      24.6       7.1
//	fanout 8, split sstables   1.99          0.8         24      28.8       9.2
//	fanout 8, excised inputs   1.65          0.8         24      27.9       8.1
//
// Fanout 8 halves the ingest cost (one rewrite per key instead of two)
// and costs more per miss, which probes every run of the generation (about
// 1.5 us per run). The stage reads the store for about 0.026 of its records
// (docs/benchmarks.md): the misses add ~0.2 us per record where the
// rewrites saved ~1.8 us per new key. Fanout 16 rewrites as often as 8 in
// this shape and probes more runs. A cap on the top tier changes nothing
// here (no run reaches it before the generation ends). Writing merged runs
// as sstables of at most 4 leaves' worth bounds each filter block (the
// sweep's merged runs carried filter blocks of tens of MB) but measured no
// better on confirming reads and worse on misses (a run's iterator then
// switches sstables between probes); the option stays in the benchmark.
// Excising a merge's inputs instead of range-deleting them leaves Pebble
// nothing to compact: with range deletions it compacted 0-24 bytes per key
// (the tombstones reach the last level through compactions that rewrite
// the runs they overlap), excised 0.
//
// A merge reads its inputs' packs from their files itself (blockscan.go),
// as a lookup reads a block (blocks.go): 256 KiB of a run file per pread,
// each block checked against its checksum and decoded in a buffer of the
// merge's own. Through Pebble's iterators every block cost a block cache
// lookup, insert and eviction (of blocks lookups might have used), a C
// allocation and a pread of its own: 0.17-0.24 s of the merger's 0.60-0.64
// s per 6M timed records in the 100M sweep. Read directly the merger took
// 0.50-0.60 s against 0.62-0.80 s in the same runs (docs/benchmarks.md,
// "Sessions 14-15"). A block it cannot decode (compressed, a value stored
// apart: none the store writes) hands the rest of the run to a Pebble
// iterator placed after the last pack read (TestMergeScan).
//
// # Generations and expiry
//
// Time is cut into generations; a key emitted in generation g is stored in
// bucket g, that is under the key prefix 0x01+g. Expire(oldest) records
// oldest as the floor (in the commit log, and in memory, so reads and
// Commits see it at once) and hands the index to the flusher, which deletes
// every bucket below the floor with one DeleteRange in the same Pebble batch
// as the floor, the state and the runs, so a crash never leaves one without
// the others. Expire is idempotent and never lowers the floor; Commit
// refuses keys below the floor (ErrExpiredGeneration). Deleted buckets vanish
// from reads at once. Their disk space returns when Pebble compacts the
// range: whole sstables inside it (every run is one) are dropped without
// being rewritten (delete-only compactions), and the memtable holding the
// range deletion is flushed within 10 s so that this happens even under a
// light load. Compact forces it.
//
// # Commits
//
// A Batch collects the keys of one commit cycle. Commit appends them with
// the State to the commit log (one record: length, CRC-32C, payload) and
// inserts them into the index; it costs about 0.2 us of CPU per key
// (BenchmarkMemPut: 85 ns for the insert into a reused table, where
// growing a new table from empty and inserting one key at a time cost
// 177 ns; the 28-byte index of session 8 inserts at 0.91x the CPU of the
// 48-byte one, medians of 3 interleaved runs). A handover reuses the index
// flushed before it (table and entry chunks) once no Reader holds it,
// with its table sized for 1.5 times its keys and grown only past four
// fifths, so the Commit that fills it never grows it unless it brings more
// than a fifth of an index. An index's table and entries live off the Go heap
// (memalloc.go): once its keys are in runs and no Reader holds it, its
// pages go back to the operating system, and so do the flusher's sort
// buffers once a flush is written (and, after each flush, the C
// allocator's free pages: Pebble's blocks come and go in C memory, and
// glibc kept 72 MiB of it free at 100M keys; ctrim_cgo.go), so a store
// keeps one index resident
// between flushes and two only while one is written (in the Go heap the
// collector's target added half again, and until session 6 an index was
// recycled only once, so most handovers allocated a new 48 MiB index the
// collector freed later). Before inserting a key, a commit prefetches the
// slot of the key 16 places ahead, which keeps the cache misses of many
// keys in flight (BenchmarkMemPut, reused table: 89 cpu-ns per key against
// 134 when the slots of each group of 16 keys were read before inserting
// them, 220 with neither); a flush's gather of the entries in hash order
// prefetches the same way (BenchmarkFlushSort, sort and gather of 1M
// keys: 99 against 147 cpu-ns per key). The run written from an index
// records, in one synced Pebble batch, the state of its last commit and the
// run registry; the log of that index is then removed. The sstables are
// ingested before that batch: a crash between the two leaves runs the
// registry does not name, and Open deletes them (their keys are still in
// the log). Seq counts commits.
//
// # Bulk loads
//
// A restore from the output topic records its keys with Load (or
// LoadHashes, which takes the keys of one generation as slices): no commit
// log and no hash index, only a buffer the keys are appended to in arrival
// order. Each full buffer (MemTableSize worth of keys) is radix-sorted
// whole by the flusher (a counting pass and a scatter by the top bits of
// the hash into buckets of 4-8k keys, then each bucket by its next bits
// into sub-buckets of ~4 and an insertion sort; stable, so the last load
// of a key wins; half the CPU of sorting 128k-key chunks as they filled
// and merging them with a heap) and written by the flusher, while the
// load goes on, as one run per generation (its two hash halves as two
// sstables written on two goroutines), recorded with the state of the
// buffer's last Load in one synced batch: a durable point. When the load
// ends only its last buffer is left to write, and the size-tiered merges
// combine the loaded runs afterwards, as after flushes. Sessions 6-10
// spilled full buffers to plain sorted files instead and wrote every key
// into an sstable once, in one k-way merge when the load ended; that
// merge ran after the restore's read (0.6-1.2 s of a 10M restore), which
// now ends 0.06-0.43 s after it, and the merger then merges the loaded
// runs (docs/benchmarks.md, "Restore overlap, session 11"). A crash loses the Loads since the last durable point: the
// store reopens at its state then, and Open removes unrecorded sstables
// with the ingest directory.
//
// # Crash semantics
//
// Commits are not synced. With the commit log (the default) a Commit is
// written to the log file when it returns: a process crash (kill -9) loses
// none; a machine crash loses the commits since the last Flush or since
// the worker synced the log a handover closed (it does so before writing
// that log's index; a Flush waits for it, then syncs the current log:
// TestFlushWaitsForHandedOverLog). A log that a crash left unsynced may
// end torn, and replay then stops in it (below). With DisableWAL the commits in
// the index are lost on any crash (up to MemTableSize worth of keys) and the
// job re-reads them from the output topic. Open replays the logs after the
// state Pebble holds, in order, and stops at the first record that is torn,
// fails its checksum or leaves a gap in the commit sequence; it then writes
// what it replayed as runs and removes the logs, so a restart costs one
// index's worth of replay whatever the store's size. When the replay
// stopped early, Open waits for that write: the log it stopped in must be
// gone before a Commit is logged after it, or the next replay would stop
// there again and lose the Commits since (TestTornLogThenNewCommits). In every case the store
// reopens at some commit c with exactly the keys of commits <= c and its
// floor, and Flush makes everything committed so far durable.
//
// Mark and ScanSince let a Bloom front saved at a Mark catch up after a
// crash with only what the store received since: the keys in memory and
// the runs holding a leaf made since the Mark (a leaf range reaching the
// Mark's next run id). Each Mark moves the merge barrier to its next run
// id, and no merge mixes runs made before the barrier with runs made since
// (Open starts the barrier at the registry's next id, which no Mark saved
// before a crash exceeds). So a run holding keys committed since the Mark
// holds no older ones, and a merge of older runs made since is skipped: a
// restart after kill -9 costs one or two indexes of replay and scan plus
// the keys written since the Mark, whatever the store's size (before the
// barrier, any merge made since counted whole, with the older keys it
// rewrote). From an older Mark than the last one, runs merged across it
// are read whole: correct, only slower. The crash
// tests check this with Pebble's crash-clone file system at random points,
// with and without unsynced data kept. The stage's recovery then reads the
// output topic from c's checkpoint. Close writes the index as runs, so a
// clean restart replays nothing.
//
// # Fatal errors
//
// Pebble calls Logger.Fatalf when it cannot go on (its default logger exits
// the process) and, for some WAL errors, panics in ways no recover can catch
// (a deferred unlock of a mutex it already released aborts the runtime). The
// store therefore handles errors at three points, and each turns the store
// fatal: Err returns the first such error and every later call returns it,
// as "statestore: fatal: ...". The process does not exit; the job should stop
// and restart, and recovery is lossless because the output topic is the
// source of truth.
//
//   - The file system handed to Pebble (guardFS) catches the first error of a
//     write, sync, create, rename or link, records it and parks the goroutine
//     that met it, as if the process had died at that moment. Pebble thus
//     never runs its write-error paths. Reads, Lock, MkdirAll and Remove
//     errors pass through.
//   - Fatalf records the error and never returns to Pebble: it parks the
//     goroutine that called it, whichever that is.
//   - A failed flush or compaction (reported through Pebble's event
//     listener, e.g. a read error) is fatal too: Pebble would retry it
//     forever while commits stall. So is data corruption a read finds
//     (Pebble's default there is Fatalf): the read returns the fatal error.
//
// Every Pebble call on the write path (Open, the flusher's ingests and
// batches, Compact, Close) runs on the store's worker, one long-lived
// goroutine per store, and merges on its merger, a second one with the same
// fatal state (a Fatalf there parks it, and Close gets the fatal error); and its caller waits for the result or the
// fatal error, whichever comes first; so a Fatalf on the worker, or on a
// Pebble goroutine the worker waits for, returns the fatal error to the
// waiting call instead of hanging it. Reads (OpenReader, Lookup, Get,
// ScanGeneration, DiskUsage) call Pebble on the caller's goroutine: a
// hand-off per read doubled the cost of a Lookup (BenchmarkReadHandoff), and
// Pebble's read path calls Fatalf only from invariant checks compiled into
// race and invariants builds; there reads run on a read worker of the store
// (readpath.go). After a fatal error Close returns it without closing Pebble
// (its goroutines may be parked holding locks); the directory stays locked
// until the process exits. Corruption is the exception: a fatal error that
// matches ErrCorrupt (a block failing its checksum or not decoding, a
// Pebble corruption error, a metadata record that does not decode) is
// found by a read, a flush or a compaction, none of which parks a
// goroutine, so Close (and a failed Open) still drains the workers and
// closes Pebble, and the directory can be moved aside and a new store
// opened at its path in the same process (the job's state.on_corruption;
// TestCorruptStoreReleases).
//
// # Reads
//
// Get and Lookup do not allocate. Per generation they ask the index of
// recent keys, the index being flushed, then the generation's runs newest
// first, stopping at the first hit: the run's filter in memory, then, if
// it may hold the key, one SeekGE to the pack that can hold it and a binary
// search in the pack. Before the first filter is tested, every run's filter
// block for the key is prefetched, so their cache misses overlap instead of
// coming one after the other (since session 11: at 100M keys the filters
// hold 68 MiB, and the sweep's runFilter.MayContain fell from 0.12-0.15 s
// to 0.02 s of CPU per 6M records). A run's filter is the store's own (filter.go): a
// blocked Bloom filter of 8 bits per key for a flush's run (2.5 % false
// positives measured; 10 bits, 0.94-1.0 %, until session 7) and 4 bits (3 probes) for
// a larger one, a merge's or a bulk load's (~15 %; since session 10: a
// generation's oldest runs, which reads reach last, hold most of its keys,
// filter.go runFilterBitsLarge), sized when the run is written and
// set from its hashes as the run writer takes them (the sstables carry no
// Pebble filter: a pack's key is no hash a lookup asks for), so a merge
// holds at most 1 byte per key of its output where Pebble's writer held a 4-byte
// hash per key until the table ended. A run key's filter block is taken
// from its hash's high bits (filter v2), so a
// run, written in hash order, sets its filter block after block: the
// filter writer cost 270-500 ns per key at 1M-8M keys with v1's random
// blocks, 75-120 ns with v2 (BenchmarkRunFilterWrite), and the 30M sweep's
// flushes 20 % less CPU.
//
// The store keeps the filter of every run it writes in memory, off the Go
// heap (reserved in the block cache, so the cache shrinks by 1 byte per
// key of leaves, half of one in larger runs; unmapped when the run is merged or expired and the last Reader
// holding it let go, filter.go) and probes a run there before entering
// Pebble: a miss of a run costs no iterator seek (in layout 2, Pebble's
// filter block: about 1.5 us per run). BenchmarkMergePolicy, 4M keys, 16
// runs: a miss 4.3 us before, 2.3 us with the filters in memory (layout 2,
// one run each, machine at load 25). Open reads every run's filter back
// from its chunks (at most 1 byte per key: 10 MB at 10M keys); a run without a
// readable filter is probed by seeking it, which is correct, only slower.
//
// A Reader keeps one Pebble iterator per run, bounded to the run's key
// range, and is meant to live long: the stage keeps one and refreshes it
// once per batch, which picks up the current indexes and opens iterators
// only for new runs (closing those of merged or expired runs). A probe thus
// reuses the sstable iterator, index and filter its run's iterator holds;
// one iterator over the whole store switched sstables at almost every
// probe. Measured side by side on one store (BenchmarkLayout, CPU per read,
// machine loaded): at 10M keys a miss (a Bloom false positive of the front)
// 1.7 us against 3.6 us, a confirming read 13.7 us against 15.5 us; at 1M
// keys the same (3.4 us). What is left of a confirming read at 10M keys is
// mostly the data block: the runs outgrow the block cache, so the block is
// read from the file (pread, allocation, checksum).
//
// Since session 9 a confirming read does not seek that iterator: the store
// keeps, per run, one fence per data block (the top 32 bits of the hash its
// index separator names, and the block's offset: 8 bytes per block of about
// 240 keys, 0.031 bytes per key, reserved in the cache like the filters and
// counted by a Budget as kept) and an open descriptor of each of the run's
// files, and a Reader reads the one block that can hold the key itself:
// a search of the fences (from the block the key's hash falls in when the
// run's keys are spread evenly, since session 11), one pread into a
// buffer the Reader keeps,
// the block's checksum (a mismatch is the store's fatal error, as Pebble's
// data corruption is), a seek in the decoded columnar block (blocks.go).
// Through Pebble the read paid the merging, level and two-level index
// iterators, a block cache miss and its cgo allocation and eviction, and
// index blocks that competed for the small cache: BenchmarkLayout
// confirm-cpu-ns, medians of 3 interleaved rounds on a loaded machine,
// 10.2 -> 5.2 us at 1M keys, 17.8 -> 6.3 us at 10M (see docs/benchmarks.md
// for 30M and the sweep). The iterators stay: they pin nothing the reads
// need (the descriptors keep a file's data after Pebble deletes it, and a
// run's keys never change while it is live), but they read the rare block
// that is not read here (one larger than 64 KiB, which holds a filter
// chunk; a compressed one) and every run whose blocks could not be opened.
// Open reads every run's fences from its index blocks (7.7 ms of CPU per
// 1M keys).
//
// A Reader captures the index pointers and the run registry under a read
// lock and opens the iterators of new runs under it too; the flusher
// publishes new runs under the write lock only after ingesting them, and
// deletes merged inputs only after publishing, so a Reader always finds
// every key in the runs it names. An open Reader pins the sstables of the
// runs it saw (Pebble keeps them while an iterator is open), so their disk
// space returns at its next refresh or Close; the reader behind Get and
// Lookup is dropped whenever the flusher replaces or expires runs.
//
// # Pebble options
//
//   - Block cache: Pebble charges every allocated memtable to the block
//     cache, and a writable store reserves its indexes of recent keys in it
//     (two indexes and the flusher's sort buffer, about 2.3 x MemTableSize:
//     memory the cache then leaves to them), so the cache it gets is
//     CacheSize plus both. With a plain 128 MiB cache and 64 MiB memtables
//     no block stayed cached and a Get cost 14 us instead of 4 us. A Budget
//     instead gives every store of a process one shared cache
//     (Options.Cache) whose capacity bounds blocks, indexes, memtables
//     and the run filters kept in memory (1 byte per key) of all of them,
//     with the index size planned from it (budget.go), and whose room for
//     blocks follows what reads need: the index blocks of the live runs
//     (1/178 of a run's bytes measured, 1/160 counted: 0.1 bytes per key)
//     half again, plus 32 MiB for data blocks while the runs are at most
//     four times that, shrinking past it with the share of the reads it
//     serves (4 MiB at 100M keys; budget.go). Until session 8 it counted
//     1/64 of the runs (layout 2's index blocks) and a filter block for
//     runs whose filter is not in memory, which packed runs do not have:
//     0.7 bytes per key of blocks at 100M. A confirming read's data block otherwise
//     comes from the page cache, which is not the process's memory: with
//     the whole budget for blocks the cache held ~4 bytes per key of data
//     blocks at 100M keys, read about once each.
//   - No Pebble filters: runs carry the store's own (above), and what
//     Pebble writes itself is metadata. Blocks of 4 KiB (Pebble's default):
//     a confirming read reads one, which holds about 4 packs of 64; 16 KiB
//     blocks measured worse for confirms (BenchmarkMergePolicy
//     "pack64-block16k", see "Why this layout").
//   - Run sstables are written through a 256 KiB buffer (runWritable):
//     Pebble's file writable buffers 4 KiB, one write system call per data
//     block (10.5 s of the 100M sweep's 232 s of CPU samples). Ingest CPU
//     0.79 against 0.86 and 0.95 us/key (BenchmarkMergePolicy "pack64" vs
//     "pack64-buf4k", two interleaved rounds).
//   - The tables Pebble deletes are kept, up to RecycleBytes, and new run
//     files are written over them (recycle.go): a new page-cache page cost
//     a host fault on the VMs measured here, and the 100M sweep point's
//     table writes fell from 0.65 to 0.09 s of CPU per 6M records.
//   - No compression: the keys are random hashes after a shared 9-byte prefix
//     that the columnar block format already strips; Snappy left the size
//     unchanged (89 vs 87 MiB at 4M keys) and only costs CPU on reads.
//   - MemTableSize 32 MiB sizes the index of recent keys. Pebble's own
//     memtable holds only metadata batches and is 64-512 KiB (three
//     64 MiB ones reserved 192 MiB of a 512 MiB budget's cache for a few
//     KiB of metadata), at most two before writes stall.
//   - L0 files of 16 MiB, L0 compaction at 4 sublevels, write stop at 24,
//     Lbase 4 memtables, 1-2 concurrent compactions: chosen for layout 1,
//     where they measured the same as Pebble's own within noise; layout 2
//     ingests into the last level and leaves Pebble little to compact.
package statestore
