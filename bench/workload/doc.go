// Package workload generates the business-event streams the benchmark
// harness feeds to dedupstream and to its baselines, and knows the ground
// truth of every stream it makes.
//
// # The stream
//
// Business keys are "ord-" followed by the key id in 12 decimal digits and
// 0 to 20 padding bytes (16 to 36 bytes in all). Key ids are handed out in
// order: id n is the n-th distinct key of the stream. Record time advances
// with every new key by Window/KeysPerWindow, so a full window always holds
// KeysPerWindow distinct keys, whatever the duplicate ratio.
//
// A record is a duplicate with probability DupRatio. Its key is an earlier
// key chosen by distance class (Mix):
//
//   - Immediate: one of the last 64 keys, a producer retry or a broker
//     redelivery; usually caught inside one commit cycle.
//   - Minutes: a key first seen 1 to 30 minutes of record time earlier, a
//     consumer that re-read after a rebalance.
//   - Hours: a key first seen between 1 hour and 85 % of the window earlier,
//     an upstream backlog replayed hours later.
//
// Ranges are clipped to 85 % of the window, so every duplicate lies inside
// the dedup window with room for the clock skew of a batch: a deduplicator
// judges a batch at its largest timestamp, so as long as one batch spans less
// than 15 % of the window in record time, a correct deduplicator drops every
// duplicate and emits every new key exactly once. Early in a stream a class
// reaches back only as far as the stream goes, and when it cannot reach back
// at all (Minutes and Hours in the first minute or hour) the record is a new
// key instead; Counts says how many records of each kind were made.
//
// With Zipf > 1 the Minutes and Hours classes pick their key by a Zipf draw
// over ranks, and a rank names the same key for a quarter of the class's
// range: a few hot keys take most of the repeats, as when one order is
// retried by a misbehaving client. Zipf = 0 picks uniformly.
//
// # Determinism and allocation
//
// The stream is a pure function of Spec: two generators with equal specs
// produce identical records. Fill writes a batch into a slice and a key arena
// owned by the generator and reused by the next Fill; values alias one
// read-only payload buffer. Generating allocates nothing per record.
//
// # Ground truth
//
// The expected output is exactly the keys 0..Counts().New-1, each once.
// Checker counts, over what a system under test emitted, the escaped
// duplicates (a key emitted twice) and the lost records (a key never
// emitted), in one bit per key.
package workload
