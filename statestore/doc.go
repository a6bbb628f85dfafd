// Package statestore is the exact state of one dedup stage: which business
// keys (as 128-bit partition.Hash values) were emitted in which generation of
// the dedup window, kept in Pebble. The stage's Bloom front says which live
// generations may hold a key; the store confirms exactly. The store is a
// cache of the committed output topic: after a crash the stage re-reads the
// output from the checkpoint the store holds, so the store may lose recent
// commits but must never be inconsistent.
//
// # Layout
//
// Pebble's files live in dir/db. A new store is created in dir/db.creating
// and renamed into place once complete, so a crash during creation leaves
// nothing Pebble would refuse to open (it did without this: a MANIFEST
// marker without its MANIFEST).
//
// Keys are 25 bytes: 0x01, the generation (8 bytes big-endian), the hash
// (16 bytes big-endian). Values are empty in mode "first" and a uvarint
// version in mode "version". Metadata lives under the prefix 0x00, which
// sorts before every bucket: the state record (Seq, Generation, opaque
// Checkpoint), the expiry floor, and the format (layout version and mode; a
// store refuses to open in the other mode).
//
// # Generations and expiry
//
// Time is cut into generations; a key emitted in generation g is stored in
// bucket g, that is under the key prefix 0x01+g. Expire(oldest) deletes every
// bucket below oldest with one DeleteRange, and records oldest as the floor in
// the same batch, so a crash never leaves one without the other. Expire is
// idempotent and never lowers the floor; Commit refuses keys below the floor
// (ErrExpiredGeneration). Deleted buckets vanish from reads at once. Their
// disk space returns when Pebble compacts the range: whole sstables inside it
// are dropped without being rewritten (delete-only compactions), and the
// memtable holding the range deletion is flushed within 10 s so that this
// happens even under a light load. Compact forces it.
//
// # Commits
//
// A Batch collects the keys of one commit cycle. Commit writes them and the
// State in one Pebble batch: after any crash the store holds both or neither.
// Seq counts commits. Batches are written in key order (a stable counting
// pass on the hash, then an insertion sort within tiny buckets), because
// Pebble's memtable skiplist inserts sorted keys faster: 2.3 instead of 4.2 us
// of CPU per key on this 2-core machine. Larger batches insert faster per key
// than small ones (1.9 us/key at 10k keys per commit, 3.1 us at 1k).
//
// # Crash semantics
//
// Commits are not synced. With the WAL (the default) a Commit is in Pebble's
// WAL buffer when it returns and reaches the OS within milliseconds: a
// process crash (kill -9) loses at most those last commits; a machine crash
// loses the commits since the last Flush or WAL rotation. With DisableWAL a
// Commit lives only in the memtable until it is flushed: any crash loses
// every commit since the last memtable flush (up to two 64 MiB memtables, a
// few million keys), and Close flushes. In every case the store reopens at
// some commit c with exactly the keys of commits <= c and its floor, and
// Flush makes everything committed so far durable. The crash tests check
// this with Pebble's crash-clone file system at random points, with and
// without unsynced data kept. The stage's recovery then reads the output
// topic from c's checkpoint. The WAL costs ~15 % of ingest throughput
// (0.63 vs 0.76 M keys/s in 10k-key commits) and saves that replay after
// the common kill -9, hence the default.
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
//   - Fatalf records the error and never returns to Pebble: on a goroutine
//     running a Store method it panics and that method recovers; on a Pebble
//     background goroutine it parks the goroutine.
//   - A failed flush or compaction (reported through Pebble's event
//     listener, e.g. a read error) is fatal too: Pebble would retry it
//     forever while commits stall.
//
// Calls that may block inside Pebble (Commit, Expire, Flush, Compact, Close,
// Open) run on a helper goroutine and return as soon as a fatal error is
// recorded, so a parked Pebble goroutine cannot hang the caller. After a
// fatal error Close returns it without closing Pebble (its goroutines may be
// parked holding locks); the directory stays locked until the process exits.
//
// # Reads
//
// Get and Lookup do not allocate. They use a prefix seek with the sstable
// Bloom filters of every level: Pebble's own DB.Get skips the filters of the
// last level, which holds most keys, so each miss would read a data block
// (from disk once the store outgrows the cache). Measured at 1M keys, all in
// cache: a miss 2.9 us instead of 4.1 us, a hit 5.1 us instead of 4.2 us.
//
// # Pebble options
//
//   - Block cache: Pebble charges every allocated memtable to the block
//     cache, so the cache it gets is CacheSize plus three memtables. With a
//     plain 128 MiB cache and 64 MiB memtables no block stayed cached and a
//     Get cost 14 us instead of 4 us. Memory per store is about
//     CacheSize + 3*MemTableSize (320 MiB by default). A Budget instead
//     gives every store of a process one shared cache (Options.Cache) and
//     memtables sized from one bound for all of them (budget.go).
//   - Bloom filters, 10 bits per key (~1 % false positives), on every level.
//   - No compression: the keys are random hashes after a shared 9-byte prefix
//     that the columnar block format already strips; Snappy left the size
//     unchanged (89 vs 87 MiB at 4M keys) and only costs CPU on reads.
//   - MemTableSize 64 MiB, at most two memtables before writes stall.
//   - L0 files of 16 MiB (4 L0 files at 4M keys instead of 25 at Pebble's
//     2 MiB), L0 compaction at 4 sublevels, write stop at 24, Lbase 4
//     memtables, 1-2 concurrent compactions. Against Pebble's own values for
//     these, ingest was the same within noise at 3M keys (2.05 vs 2.14 us of
//     CPU per key, BenchmarkCommitOptions); they are chosen for fewer files
//     per read and fewer stalls during bursts, not for a measured gain.
package statestore
