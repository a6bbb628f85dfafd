// Package pipeline is the stage core of dedupstream: for one business-key
// partition it decides, record by record, whether to emit, drop or
// dead-letter, and it keeps the state that makes those decisions exact and
// durable.
//
// A Stage owns one partition p. It has its own Bloom front
// (package filter), its own exact store (package statestore, Pebble on disk)
// and, in the job, its own transactional producer writing only to output
// partition p. Nothing is global: the clock and the state directory are
// passed in, so tests run several stages side by side.
//
// # Decisions
//
// For every record of a fetched batch, in input order:
//
//  1. The business key is extracted (package partition) and hashed once to
//     128 bits. A record whose key cannot be extracted, or whose version
//     field is missing in version mode, or that is larger than
//     Config.MaxRecordBytes, is sent to the DLQ with a reason.
//  2. Collapse: a key already emitted in the open commit cycle (the records
//     processed since the last Commit, which may span several fetched
//     batches) is dropped with reason "batch". This needs no lookup.
//  3. Bloom front: the filter names the live generations that may hold the
//     key. None means "definitely new": the key is emitted without a disk
//     read. The probe reads one cache line per live generation (blocked
//     sub-filters, package filter), and a generation that receives more
//     keys than dedup.expected_keys sized it for grows instead of
//     saturating, so a backlog whose timestamps fall into one generation
//     does not turn the front into a store read per record.
//  4. Exact confirm: otherwise the store is read in exactly those
//     generations. A hit is a duplicate from history (reason "history"); a
//     miss is a Bloom false positive and the key is emitted. A false positive
//     therefore costs one read and never drops a record.
//
// How: Process hashes the records and probes the Bloom front for a chunk of
// 256 records before deciding any of them (filter.MaskAll reads ahead, so
// the CPU overlaps the cache misses of consecutive keys); the masks name
// generations, so a rotation inside the chunk only drops the generations
// that left the window. Keys the chunk itself emits are in the collapse set,
// which answers before the masks are read. The collapse set is an
// open-addressing table reused across cycles (no Go map, no allocation),
// and the store Reader stays open across batches: refreshed once per batch,
// it keeps one iterator per run (statestore, "Reads").
//
// In Mode "first" (default) any repeat inside the window is dropped. In Mode
// "version" a record is kept only if its version field is greater than the
// version last emitted for its key within the window (CDC updates, replays).
//
// # The window
//
// Time is cut into generations of Window/Generations each. The stage keeps
// Generations+1 generations live: a key emitted in generation g is remembered
// while g is live, so it is remembered for at least Window and at most
// Window + Window/Generations. When the clock enters a new generation the
// oldest one is dropped whole: one Pebble DeleteRange and a Bloom sub-filter
// reset.
//
// With TimeBase "record" (default) the clock is the largest record
// timestamp seen so far, never moving backwards, and it moves record by
// record: each record is decided at its own time, not at the newest time of
// its fetched batch, so a batch spanning much of the window (a backlog read
// in large fetches) cannot expire keys a repeat in it should still meet.
// Replays and restores decide the same way as the original run; timestamps
// more than MaxFutureSkew ahead of the wall clock are clamped to the wall
// clock so one bad producer clock cannot expire the whole window. With
// TimeBase "processing" the clock is the wall clock, read once per Process
// call (one fetched batch).
//
// # Delivery guarantees
//
// Decisions are staged in memory until Commit, which writes the cycle's keys,
// the current generation and the caller's checkpoint (input offsets, next
// output offset) in one atomic Pebble batch. The job calls Commit only after
// the Kafka transaction carrying the cycle's output has committed, and Abort
// after it aborted; after Abort the same input is processed again and decided
// the same way.
//
// # Recovery
//
// Open loads the Bloom snapshot written by the last clean Close or by the
// job's periodic SaveSnapshot. The snapshot is consumed (deleted) as it is
// read. One that covers exactly the store's last commit is used as it is;
// an older one (a crash since the periodic snapshot) is caught up with the
// keys the store received since it: the snapshot saves the store's Mark
// (commit sequence and next run id), and statestore.Store.ScanSince visits
// the keys in memory (the commit log's tail, replayed) and in the runs
// written since, so a restart after kill -9 costs the work since the
// snapshot, not the store's size (BenchmarkReopen/kill9;
// TestRestartAfterKill9KnowsEveryCommittedKey checks that no committed key
// is missed). Without a usable snapshot the filter is rebuilt by scanning
// the live generations of the store. Either way every key in the store is
// covered by the filter before the first record is decided. The
// store itself may lag the output topic after a crash (its WAL is not
// synced): the job re-reads the committed output from the checkpoint and
// feeds those keys back with Restore (or a RestoreKeyer on its reading
// goroutine and RestoreKeyed on the stage's) before processing input.
//
// # Rebalancing
//
// A stage is bound to one partition and one state directory. When the
// partition moves, the old owner closes its stage; the new owner opens one
// and restores from the committed output (see the job for the protocol).
package pipeline
