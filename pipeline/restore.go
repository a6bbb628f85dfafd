package pipeline

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/statestore"
)

// A restore reads the committed output back into the store (see
// Stage.Restore). Its two halves can run on two goroutines: a RestoreKeyer
// turns output records into a Restored batch (key extraction and hashing,
// the costly half, which needs nothing of the stage), and
// Stage.RestoreKeyed records a batch in the Bloom front and the store. The
// job keys the next batch while the stage records the previous one.

// Restored is a batch of output records reduced to what a restore needs:
// per record its key hash, version and timestamp (the hashes in one slice,
// for filter.Filter.AddAll). Reuse it across batches.
type Restored struct {
	hs       []partition.Hash
	versions []uint64
	tsMs     []int64
	// unkeyed marks the records KeyInto could not key and nUnkeyed counts
	// them (atomically: two KeyInto calls may fill one batch at once);
	// RestoreKeyed leaves them out.
	unkeyed  []bool
	nUnkeyed atomic.Int64
}

// Len returns the number of records in b.
func (b *Restored) Len() int { return len(b.hs) }

// Unkeyed returns how many records of b had no business key.
func (b *Restored) Unkeyed() int { return int(b.nUnkeyed.Load()) }

// Keyed reports whether record i of b had a business key: RestoreKeyed
// leaves the others out, and their times do not move the stage clock.
func (b *Restored) Keyed(i int) bool { return !b.unkeyed[i] }

// dropUnkeyed removes the records marked unkeyed; Unkeyed still counts
// them.
func (b *Restored) dropUnkeyed() {
	n := 0
	for i, bad := range b.unkeyed {
		if bad {
			b.unkeyed[i] = false
			continue
		}
		b.hs[n], b.versions[n], b.tsMs[n] = b.hs[i], b.versions[i], b.tsMs[i]
		n++
	}
	b.hs, b.versions, b.tsMs, b.unkeyed = b.hs[:n], b.versions[:n], b.tsMs[:n], b.unkeyed[:n]
}

// RestoreKeyer keys output records for Stage.RestoreKeyed exactly as the
// stage would. It holds a Keyer of its own, so it may run on another
// goroutine than the stage's; one RestoreKeyer is not safe for concurrent
// use.
type RestoreKeyer struct {
	keyer *Keyer
}

// NewRestoreKeyer returns a RestoreKeyer for the stage's configuration. It
// reads keys as partition.Extractor.ExtractTrusted does: the output holds
// records a stage keyed, and validated, once already.
func (s *Stage) NewRestoreKeyer() *RestoreKeyer {
	k := *s.keyer
	k.buf = make([]byte, 0, cap(s.keyer.buf))
	k.trusted = true
	return &RestoreKeyer{keyer: &k}
}

// Key replaces the contents of b with the keys of in.
//
// A record without a business key under the stage's configuration is left
// out and counted (Restored.Unkeyed): it was emitted under another
// dedup.key (the settings changed, and the store was dropped and is being
// restored under the new ones), or written by another producer. No record
// can repeat a key it does not have (as input it would go to the DLQ), so
// leaving it out forgets nothing; failing the restore instead failed every
// start until such records left the output.
func (k *RestoreKeyer) Key(in []Record, b *Restored) {
	b.SetLen(len(in))
	k.KeyInto(in, b, 0)
}

// SetLen makes b a batch of n records, to be filled by KeyInto (several
// RestoreKeyers may fill disjoint ranges of it at once).
func (b *Restored) SetLen(n int) {
	if b.nUnkeyed.Load() != 0 {
		clear(b.unkeyed)
		b.nUnkeyed.Store(0)
	}
	b.hs, b.versions, b.tsMs = slices.Grow(b.hs[:0], n)[:n], slices.Grow(b.versions[:0], n)[:n], slices.Grow(b.tsMs[:0], n)[:n]
	b.unkeyed = slices.Grow(b.unkeyed[:0], n)[:n]
}

// KeyInto keys in as records at..at+len(in)-1 of b (see SetLen); records
// without a business key are marked, as Key says.
func (k *RestoreKeyer) KeyInto(in []Record, b *Restored, at int) {
	hs, versions, tsMs := b.hs[at:at+len(in)], b.versions[at:at+len(in)], b.tsMs[at:at+len(in)]
	for i := range in {
		key, version, err := k.keyer.identity(&in[i])
		if err != nil {
			b.unkeyed[at+i] = true
			b.nUnkeyed.Add(1)
			continue
		}
		hs[i] = partition.HashKey(key)
		versions[i] = version
		tsMs[i] = in[i].TimestampMs
	}
}

// KeyAt keys r, a record of time tsMs (Unix milliseconds), as record i of
// b (see SetLen), as KeyInto keys in[i-at]: a caller whose records are in
// another form (the job's fetched batches) keys them without converting
// them into a slice of Records first. A record without a business key is
// marked, as Key says.
func (k *RestoreKeyer) KeyAt(r partition.Record, tsMs int64, b *Restored, i int) {
	// r stays on the stack: the extractor keeps no pointer to it (a field
	// of k held it while a call through a function value let it escape;
	// the copy into that field was 0.07 s of a 10M restore's CPU).
	key, version, err := k.keyer.identityOf(&r)
	if err != nil {
		b.unkeyed[i] = true
		b.nUnkeyed.Add(1)
		return
	}
	b.hs[i] = partition.HashKey(key)
	b.versions[i] = version
	b.tsMs[i] = tsMs
}

// Restore records keys that the committed output holds but the store does
// not (the store lags the output after a crash). in are the output records
// read back from the checkpoint's output offset; checkpoint is committed
// with them. It is Key then RestoreKeyed on the stage's goroutine.
func (s *Stage) Restore(in []Record, checkpoint []byte) error {
	if s.err != nil {
		return s.err
	}
	if s.restoreKeyer == nil {
		s.restoreKeyer = s.NewRestoreKeyer()
	}
	s.restoreKeyer.Key(in, &s.restored)
	return s.RestoreKeyed(&s.restored, checkpoint)
}

// RestoreKeyed records the keys of a batch of output records, keyed by a
// RestoreKeyer, with checkpoint, as Restore does. Batches must come in
// output order.
func (s *Stage) RestoreKeyed(b *Restored, checkpoint []byte) error {
	if s.err != nil {
		return s.err
	}
	s.Abort()
	if n := b.Unkeyed(); n > 0 {
		b.dropUnkeyed()
		s.restoreUnkeyed += uint64(n)
	}
	// The stage clock moves to the batch's newest time, so that restored
	// keys are kept at least as long as that record (see advance).
	wall := s.clock().UnixMilli()
	if s.cfg.TimeBase == ProcessingTime {
		s.tick(wall)
	} else {
		for _, ts := range b.tsMs {
			s.tick(s.cfg.ClockTime(ts, wall))
		}
	}
	// A bulk load: the keys go straight into the store's load buffer (the
	// last of a key wins, as the output's newest version must) and the
	// Bloom front (AddAll: the misses of several keys overlap), without
	// the cycle's collapse map or batch, which a restore never reads; the
	// store sorts them into runs (statestore.Store.LoadHashes) and makes
	// them visible before any later read.
	s.filter.AddAll(b.hs)
	if _, err := s.store.LoadHashes(s.cur, b.hs, b.versions, statestore.State{Generation: s.cur, Checkpoint: checkpoint}); err != nil {
		s.err = fmt.Errorf("pipeline: restore: %w", err)
		return s.err
	}
	// A no-op unless the window moved since the store's last expiry.
	if err := s.store.Expire(s.win.oldestLive(s.cur)); err != nil {
		s.err = fmt.Errorf("pipeline: restore: expire: %w", err)
		return s.err
	}
	return nil
}

// RestoreUnkeyed returns how many output records the restores of s left
// out for want of a business key (see RestoreKeyer.Key).
func (s *Stage) RestoreUnkeyed() uint64 { return s.restoreUnkeyed }

// EndRestore ends a restore: it writes the keys the RestoreKeyed calls
// loaded into the store as runs and waits for them, so that the store holds
// every restored key, with the checkpoint of the last batch, before the
// first record is decided. Without it the stage's first Commit (or read)
// does this work. A no-op when nothing was loaded.
func (s *Stage) EndRestore() error {
	if s.err != nil {
		return s.err
	}
	if err := s.store.Flush(); err != nil {
		s.err = fmt.Errorf("pipeline: restore: %w", err)
		return s.err
	}
	return nil
}
