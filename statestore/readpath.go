package statestore

// Where reads run.
//
// A read calls into Pebble on the caller's goroutine: opening an iterator,
// seeking it, closing it, DB.Metrics. Handing each call to a goroutine of the
// store, as the write path does (worker), would let Fatalf park there too,
// but it doubles the cost of the stage's hot path: BenchmarkReadHandoff, a
// Reader.Lookup served by a store goroutine through a channel with a reused
// request, and through worker.do, against the same call made directly, on a
// 1M-key store (5 generations, key in the oldest); process CPU per Lookup,
// median of 5 interleaved rounds (wall time was unusable: load average 20
// on 2 cores):
//
//	              direct    channel   worker.do (2 allocs)
//	lookup, hit   1.14 us   2.10 us   2.85 us
//	lookup, miss  1.32 us   2.45 us   2.80 us
//
// On a quieter machine (load 8) the wall times were 1.27 vs 2.80 us (hit)
// and 1.24 vs 2.46 us (miss), the channel variant without allocations.
// Batching the hand-off per stage batch would need the stage to collect its
// confirmations first; the stage decides record by record today. So reads stay on the caller, and the read path must never
// reach a Fatalf in production builds. In Pebble v2.1.7 it does not:
//
//   - the Fatalf calls of its iterators (merging_iter.go, level_iter.go
//     verify, iterator.go prefix and direction checks) are behind
//     invariants.Enabled, a constant that is true only in builds with the
//     race or invariants tag, except iterator.go's "Nexting internal
//     iterator from iterPosPrev found nothing", which only NextPrefix after
//     a reverse step reaches: the store never iterates backwards;
//   - data corruption found by a read goes to EventListener.DataCorruption,
//     whose default calls Fatalf; the store's own listener records a fatal
//     error and returns, and the read returns Pebble's error (readErr then
//     reports the fatal one; TestReadCorruptionIsFatal);
//   - the read-state checker that may call Fatalf exists only with Pebble's
//     DebugCheck option, which the store does not set;
//   - reads never write, so guardFS parks no reader.
//
// In builds with the race or invariants tag (the race-detector test runs)
// the invariant checks are compiled in, and there every read-path Pebble call
// is handed to a read worker of the store (readpath_checked.go), so that a
// broken invariant parks that worker and the read returns the fatal error
// instead of parking the caller (TestFatalfOnReadPath). readOnCaller says
// which build this is.

// readErr is the error of a read that failed in Pebble: the fatal error if
// the failure made the store fatal (data corruption), otherwise err in
// context.
func (s *Store) readErr(err error, format string, args ...any) error {
	if ferr := s.fatal.get(); ferr != nil {
		return ferr
	}
	return wrapErr(err, format, args...)
}

// startReads starts the read worker in builds whose reads need one.
func (s *Store) startReads() {
	if !readOnCaller {
		s.reads = startWorker(s.fatal)
	}
}

// stopReads ends the read worker, if any.
func (s *Store) stopReads() error {
	if s.reads == nil {
		return nil
	}
	return s.reads.stop()
}
