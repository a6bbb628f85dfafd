package pipeline

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/dedupstream/dedupstream/filter"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/statestore"
)

// ErrClosed is returned by every method of a closed stage.
var ErrClosed = errors.New("pipeline: stage closed")

// Files in a stage directory: the Bloom snapshot written by Close, next to
// the store's directory. Tools read them; nothing else should.
const (
	SnapshotFile = "bloom.snapshot"
	StoreDir     = "store"
)

// Options are the resources a stage is given rather than configured with.
type Options struct {
	// Clock is the wall clock. The default value is time.Now.
	Clock func() time.Time
	// Logger receives restore and recovery messages. The default value
	// discards them.
	Logger *slog.Logger
	// Store tunes the Pebble store; VersionMode is set from Config.Mode.
	Store statestore.Options
}

// pending is a key emitted in the open commit cycle.
type pending struct {
	gen     uint64
	version uint64
}

// Stage decides emit, drop or DLQ for the records of one partition and keeps
// the state behind those decisions. A Stage is not safe for concurrent use.
type Stage struct {
	cfg    Config
	win    window
	keyer  *Keyer
	clock  func() time.Time
	log    *slog.Logger
	dir    string
	store  *statestore.Store
	filter *filter.Filter

	nowMs int64  // stage clock, Unix ms, never decreasing
	cur   uint64 // current (newest) generation

	cycle collapseSet // keys emitted since the last Commit
	batch *statestore.Batch
	// reader confirms keys; it stays open across batches (its iterators
	// are reused) and is refreshed once per batch, when the batch first
	// needs it (fresh).
	reader statestore.Reader
	fresh  bool
	cands  []uint64
	probe  batchProbe
	// cycleGets counts collapse-set lookups (tests: the probe's masks spare
	// most records one).
	cycleGets uint64
	err       error // sticky: a failed store stops the stage

	// genStarts are the last Process call's (GenStarts).
	genStarts []GenStart

	restoreKeyer *RestoreKeyer // Restore's, made on first use
	restored     Restored
	// restoreUnkeyed counts output records restores left out (Restored.Unkeyed).
	restoreUnkeyed uint64
}

// batchProbe is what Process computes for a chunk of a batch before
// deciding any of its records: each record's key hash, version and
// dead-letter reason, then its Bloom mask (bit i: generation cur-i).
// Probing the Bloom front of every record in one tight loop lets the CPU
// overlap the cache misses of consecutive records, where probing inside
// each decision waited for one record's misses at a time. Keys the batch itself emits are not in the
// masks; the collapse set answers for those.
//
// The masks also spare most records the collapse set: every key the open
// cycle emitted before the chunk's masks were taken is in the Bloom front
// (emit adds it), so a record whose mask is empty and whose key the chunk
// has not emitted since (emitted, a set of hash bits that may hold false
// positives, never false negatives) cannot be in the collapse set, unless
// in a generation the window dropped, which the collapse set ignores too.
type batchProbe struct {
	hs       []partition.Hash
	versions []uint64
	reasons  []string
	masks    []uint64
	cur      uint64 // the filter's newest generation when the masks were taken
	emitted  [emittedWords]uint64
}

// emittedWords sizes batchProbe.emitted: 4096 bits for at most probeChunk
// keys emitted per chunk, so a new key meets a set bit (and looks in the
// collapse set for nothing) about 6 % of the time at worst.
const emittedWords = 64

// emittedBit returns the word and bit of h in batchProbe.emitted.
func emittedBit(h partition.Hash) (int, uint64) {
	b := uint32(h.Lo) % (emittedWords * 64)
	return int(b / 64), 1 << (b % 64)
}

// noteEmitted records that the chunk emitted h.
func (p *batchProbe) noteEmitted(h partition.Hash) {
	w, b := emittedBit(h)
	p.emitted[w] |= b
}

// inCycle reports whether record i's key may be in the collapse set: its
// mask names a generation, or the chunk may have emitted it.
func (p *batchProbe) inCycle(i int) bool {
	if p.masks[i] != 0 {
		return true
	}
	w, b := emittedBit(p.hs[i])
	return p.emitted[w]&b != 0
}

// probeChunk is how many records Process probes ahead of deciding them:
// enough to overlap many cache misses, few enough that the Bloom blocks a
// decision then sets bits in (an emitted key's newest generation) are
// still in the CPU's cache (256 records touch at most 64 KiB of blocks per
// generation).
const probeChunk = 256

// prepare fills p for in.
func (p *batchProbe) prepare(s *Stage, in []Record) {
	n := len(in)
	if cap(p.hs) < n {
		p.hs = make([]partition.Hash, n)
		p.versions = make([]uint64, n)
		p.reasons = make([]string, n)
		p.masks = make([]uint64, n)
	}
	p.hs, p.versions, p.reasons, p.masks = p.hs[:n], p.versions[:n], p.reasons[:n], p.masks[:n]
	for i := range in {
		key, version, reason := s.keyer.Key(&in[i])
		p.versions[i], p.reasons[i] = version, reason
		p.hs[i] = partition.Hash{}
		if reason == "" {
			p.hs[i] = partition.HashKey(key)
			s.cycle.prefetchSlot(p.hs[i])
		}
	}
	p.cur = s.filter.Current()
	// Dead-lettered records probe a zero hash; their masks are not read.
	// Keys the front says are new are added to it as they are probed
	// (while their block is in the cache); emit adds the others.
	s.filter.MaskAllAdd(p.hs, p.masks)
	clear(p.emitted[:])
}

// Open opens (or creates) the stage state in dir and makes the Bloom front
// cover every key in the store before it returns.
func Open(dir string, cfg Config, opts Options) (*Stage, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	keyer, err := NewKeyer(cfg)
	if err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Store.VersionMode = cfg.Mode == ModeVersion
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	store, err := statestore.Open(filepath.Join(dir, StoreDir), opts.Store)
	if err != nil {
		return nil, err
	}
	s := &Stage{
		cfg:   cfg,
		win:   newWindow(&cfg),
		keyer: keyer,
		clock: opts.Clock,
		log:   opts.Logger,
		dir:   dir,
		store: store,
		batch: store.NewBatch(),
		cands: make([]uint64, 0, cfg.Generations+1),
	}
	st := store.State()
	s.cur = st.Generation
	s.nowMs = int64(s.cur) * s.win.spanMs
	if err := s.loadFilter(st.Seq); err != nil {
		store.Close()
		return nil, err
	}
	return s, nil
}

func (s *Stage) filterConfig() filter.Config {
	perGen := s.cfg.ExpectedKeys / uint(s.cfg.Generations)
	if perGen == 0 {
		perGen = 1
	}
	return filter.Config{
		KeysPerGeneration: perGen,
		FalsePositiveRate: s.cfg.FalsePositiveRate,
		Generations:       int(s.win.live),
	}
}

// loadFilter restores the Bloom front from the snapshot (written by Close
// and by SaveSnapshot) and brings it up to store commit seq, or rebuilds it
// from the store when the snapshot cannot be trusted. The snapshot is
// deleted once read: a store that lost commits in a crash and then
// committed new ones could otherwise meet a snapshot whose tag matches but
// whose keys do not.
func (s *Stage) loadFilter(seq uint64) error {
	cfg := s.filterConfig()
	path := filepath.Join(s.dir, SnapshotFile)
	f, err := filter.LoadFile(path, cfg)
	if rmErr := os.Remove(path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		return fmt.Errorf("pipeline: consume bloom snapshot: %w", rmErr)
	}
	switch {
	case err == nil && f.Tag() == seq && f.Current() == s.cur:
		s.filter = f
		s.log.Info("bloom front restored from snapshot", "dir", s.dir, "seq", seq)
		return nil
	case err == nil && f.Tag() < seq && f.Current() <= s.cur:
		return s.catchUpFilter(f, seq)
	case err == nil:
		s.log.Warn("bloom snapshot is ahead of the store, rebuilding from the store", "dir", s.dir, "snapshot_seq", f.Tag(), "store_seq", seq)
	case !errors.Is(err, os.ErrNotExist):
		s.log.Warn("bloom snapshot unusable, rebuilding from the store", "dir", s.dir, "err", err)
	}
	return s.rebuildFilter(cfg)
}

// catchUpFilter brings a snapshot of an earlier commit up to commit seq:
// it adds the keys the store may have received since the snapshot's mark
// (statestore.Store.ScanSince: the keys in memory, replayed from the
// commit log after a crash, and the runs written since), so its cost
// follows the work since the snapshot, not the store's size. Keys of
// generations the window has left since are skipped by AddTo. The
// snapshot's current generation is at most s.cur (the caller checks): a
// snapshot is only written when its current generation is the one its
// commit recorded (see writeSnapshot), and the recorded generations never
// go down.
func (s *Stage) catchUpFilter(f *filter.Filter, seq uint64) error {
	start, snapSeq := time.Now(), f.Tag()
	f.Advance(s.cur)
	keys, err := s.store.ScanSince(statestore.Mark{Seq: snapSeq, NextRun: f.Mark()}, func(g uint64, h partition.Hash) error {
		f.AddTo(g, h)
		return nil
	})
	if err != nil {
		return fmt.Errorf("pipeline: catch up bloom front: %w", err)
	}
	f.SetTag(seq)
	s.filter = f
	s.log.Info("bloom front restored from an older snapshot and the store's keys since",
		"dir", s.dir, "snapshot_seq", snapSeq, "store_seq", seq, "keys", keys, "took", time.Since(start))
	return nil
}

// rebuildFilter scans the live generations of the store into a new filter.
func (s *Stage) rebuildFilter(cfg filter.Config) error {
	start := time.Now()
	f, err := filter.New(cfg, s.cur)
	if err != nil {
		return fmt.Errorf("pipeline: %w", err)
	}
	keys, err := s.scanInto(f, s.win.oldestLive(s.cur))
	if err != nil {
		return err
	}
	f.SetTag(s.store.State().Seq)
	s.filter = f
	s.log.Info("bloom front rebuilt from the store", "dir", s.dir, "keys", keys, "took", time.Since(start))
	return nil
}

// scanInto adds the store's keys of generations from..s.cur to f.
func (s *Stage) scanInto(f *filter.Filter, from uint64) (int, error) {
	var keys int
	for g := from; g <= s.cur; g++ {
		err := s.store.ScanGeneration(g, func(h partition.Hash, _ uint64) error {
			f.AddTo(g, h)
			keys++
			return nil
		})
		if err != nil {
			return keys, fmt.Errorf("pipeline: rebuild bloom front: generation %d: %w", g, err)
		}
	}
	return keys, nil
}

// SaveSnapshot writes the Bloom front's snapshot now, between cycles (it
// fails while a cycle is open). After a crash, Open starts from it and
// scans only the generations written since, instead of the whole store;
// the job calls it periodically.
func (s *Stage) SaveSnapshot() error {
	if s.err != nil {
		return s.err
	}
	if s.cycle.len() > 0 {
		return errors.New("pipeline: save bloom snapshot: a cycle is open")
	}
	return s.writeSnapshot()
}

// writeSnapshot saves the filter tagged with the store's commit sequence,
// unless the clock has moved into a generation no commit recorded yet (a
// batch was decided and its cycle aborted): Open would not use such a
// snapshot as it is, and starting from it after later commits could miss
// keys they wrote into the older generation.
func (s *Stage) writeSnapshot() error {
	if s.cur != s.store.State().Generation {
		return nil
	}
	// Only a Mark that is saved: each one moves the store's merge barrier.
	m := s.store.Mark()
	s.filter.SetTag(m.Seq)
	s.filter.SetMark(m.NextRun)
	if err := filter.SaveFile(filepath.Join(s.dir, SnapshotFile), s.filter); err != nil {
		return fmt.Errorf("pipeline: save bloom snapshot: %w", err)
	}
	return nil
}

// recordTime is r's time on the stage clock: its timestamp, or the wall
// clock for a timestamp more than MaxFutureSkew ahead of it.
func (s *Stage) recordTime(r *Record, wall int64) int64 {
	return s.cfg.ClockTime(r.TimestampMs, wall)
}

// tick moves the stage clock forward to now (never back) and rotates the
// window when that starts a new generation. It reports a rotation.
func (s *Stage) tick(now int64) bool {
	if now <= s.nowMs {
		return false
	}
	s.nowMs = now
	if g := s.win.gen(now); g > s.cur {
		s.cur = g
		s.filter.Advance(g)
		return true
	}
	return false
}

// Process decides every record of in, appends one Decision per record to
// out and returns it with the batch's counters. Emitted keys are staged
// until Commit or Abort. An error means the store failed; the stage is then
// unusable and the caller must abort its transaction and stop.
func (s *Stage) Process(in []Record, out []Decision) ([]Decision, Counts, error) {
	var c Counts
	if s.err != nil {
		return out, c, s.err
	}
	// On record time each record is decided at its own time, not at the
	// newest time of its batch: a batch may span much of the window (a
	// backlog read in large fetches), and a repeat must meet the window
	// as it stood when it was written.
	wall := s.clock().UnixMilli()
	recordTime := s.cfg.TimeBase == RecordTime
	if !recordTime {
		s.tick(wall)
	}
	oldest := s.win.oldestLive(s.cur)
	s.fresh = false
	// Room for every decision and for every record's key in the collapse
	// set before the first: grown record by record, both were copied
	// (and the set rehashed) several times in a stage's first cycles.
	out = slices.Grow(out, len(in))
	s.cycle.reserve(len(in))
	s.genStarts = s.genStarts[:0]
	base := len(out)
	var err error
	for lo := 0; lo < len(in) && err == nil; lo += probeChunk {
		chunk := in[lo:min(lo+probeChunk, len(in))]
		s.probe.prepare(s, chunk)
		if err = s.prefetchLookups(oldest); err != nil {
			break
		}
		for i := range chunk {
			if recordTime && s.tick(s.recordTime(&chunk[i], wall)) {
				oldest = s.win.oldestLive(s.cur)
			}
			var d Decision
			if d, err = s.decide(i, oldest, &c); err != nil {
				break
			}
			if d.Verdict == Emit {
				if n := len(s.genStarts); n == 0 || s.genStarts[n-1].Gen != s.cur {
					s.genStarts = append(s.genStarts, GenStart{Index: len(out) - base, Gen: s.cur})
				}
			}
			out = append(out, d)
		}
	}
	if err != nil {
		s.err = fmt.Errorf("pipeline: lookup: %w", err)
		return out, c, s.err
	}
	c.In = uint64(len(in))
	return out, c, nil
}

// prefetchLookups asks the store for what the lookups of the prepared
// chunk read first (statestore.Reader.Prefetch): for every key the Bloom
// front names a live generation of. On a large window each lookup's slots
// and run filters are cache misses that, taken one lookup at a time, the
// stage waited for in turn.
func (s *Stage) prefetchLookups(oldest uint64) error {
	p := &s.probe
	for i, m := range p.masks {
		if m == 0 || p.reasons[i] != "" {
			continue
		}
		if err := s.openReader(); err != nil {
			return err
		}
		s.reader.Prefetch(p.hs[i], s.candidates(m, oldest))
	}
	return nil
}

// candidates sets s.cands to the generations of the front's mask m (of
// the probed chunk) that are still live (oldest or newer), newest first,
// and returns them.
func (s *Stage) candidates(m, oldest uint64) []uint64 {
	s.cands = s.cands[:0]
	for ; m != 0; m &= m - 1 {
		if g := s.probe.cur - uint64(bits.TrailingZeros64(m)); g >= oldest {
			s.cands = append(s.cands, g)
		}
	}
	return s.cands
}

// openReader refreshes the store reader once per batch: one refresh
// serves every confirmation of it.
func (s *Stage) openReader() error {
	if s.fresh {
		return nil
	}
	if err := s.store.OpenReader(&s.reader); err != nil {
		return err
	}
	s.fresh = true
	return nil
}

// decide decides record i of the batch s.probe was prepared for.
func (s *Stage) decide(i int, oldest uint64, c *Counts) (Decision, error) {
	p := &s.probe
	if reason := p.reasons[i]; reason != "" {
		c.DeadLettered++
		return Decision{Verdict: DeadLetter, Reason: reason}, nil
	}
	h, version := p.hs[i], p.versions[i]

	// Collapse: a key emitted in the open cycle needs no lookup. Only a
	// key the Bloom front or the chunk's emits name can be one.
	if p.inCycle(i) {
		s.cycleGets++
		if p := s.cycle.get(h); p != nil && p.gen >= oldest {
			if !s.newer(version, p.version) {
				c.DroppedBatch++
				return Decision{Verdict: DropBatch}, nil
			}
			return s.emit(i, version, c), nil
		}
	}

	// Bloom front (probed for the whole batch before), then exact
	// confirmation in the live generations it names, newest first. A
	// generation the window dropped since the probe is skipped.
	if len(s.candidates(p.masks[i], oldest)) == 0 {
		c.BloomNegative++
		return s.emit(i, version, c), nil
	}
	c.StoreReads++
	if err := s.openReader(); err != nil {
		return Decision{}, err
	}
	_, stored, found, err := s.reader.Lookup(h, s.cands)
	if err != nil {
		return Decision{}, err
	}
	if !found {
		c.FalsePositives++
		return s.emit(i, version, c), nil
	}
	if !s.newer(version, stored) {
		c.DroppedHistory++
		return Decision{Verdict: DropHistory}, nil
	}
	return s.emit(i, version, c), nil
}

// newer reports whether a record with version v supersedes the one stored
// with version old. In ModeFirst nothing supersedes.
func (s *Stage) newer(v, old uint64) bool {
	return s.cfg.Mode == ModeVersion && v > old
}

// emit stages record i of the probed chunk for the cycle. The front
// already holds its key if MaskAllAdd added it: its mask was empty, its
// hash not zero, and the newest generation is still the one it was probed
// in (a record-time tick may have moved it since).
func (s *Stage) emit(i int, version uint64, c *Counts) Decision {
	p := &s.probe
	h := p.hs[i]
	s.cycle.set(h, pending{gen: s.cur, version: version})
	if p.masks[i] != 0 || h == (partition.Hash{}) || p.cur != s.cur {
		s.filter.Add(h)
	}
	p.noteEmitted(h)
	c.Emitted++
	return Decision{Verdict: Emit}
}

// Commit makes the open cycle's keys durable together with checkpoint (the
// caller's input offsets and next output offset) in one atomic batch, then
// drops generations that left the window. Call it after the Kafka
// transaction carrying the cycle's output committed.
func (s *Stage) Commit(checkpoint []byte) error {
	if s.err != nil {
		return s.err
	}
	oldest := s.win.oldestLive(s.cur)
	s.batch.Grow(len(s.cycle.entries))
	for i := range s.cycle.entries {
		if e := &s.cycle.entries[i]; e.gen >= oldest {
			s.batch.Put(e.gen, e.h, e.version)
		}
	}
	if _, err := s.store.Commit(s.batch, statestore.State{Generation: s.cur, Checkpoint: checkpoint}); err != nil {
		s.err = fmt.Errorf("pipeline: commit: %w", err)
		return s.err
	}
	s.cycle.reset()
	// A no-op unless the window moved since the store's last expiry.
	if err := s.store.Expire(oldest); err != nil {
		s.err = fmt.Errorf("pipeline: expire below generation %d: %w", oldest, err)
		return s.err
	}
	return nil
}

// Abort forgets the open cycle: its transaction did not commit, and the
// same input will be processed again. Keys it added to the Bloom front stay
// there; they can only cost a store read, never a drop.
func (s *Stage) Abort() {
	s.cycle.reset()
	s.batch.Reset()
}

// State is the store's last committed state: its checkpoint is what the
// job resumes from.
func (s *Stage) State() statestore.State { return s.store.State() }

// Generation is the stage's current (newest) generation.
func (s *Stage) Generation() uint64 { return s.cur }

// GenStarts returns, for the last Process call, where its emits entered
// each generation, in decision order (indexes into that call's decisions,
// counted from the first it appended): one entry for its first Emit, one
// more for every Emit decided in a newer generation than the one before.
// The slice is reused by the next call.
func (s *Stage) GenStarts() []GenStart { return s.genStarts }

// OldestLive is the oldest generation still live: keys emitted before it
// are forgotten.
func (s *Stage) OldestLive() uint64 { return s.win.oldestLive(s.cur) }

// AdvanceTo moves the stage clock forward to the start of generation gen
// (never back), as a restore does when the output it reads was emitted
// with the clock in gen (job's generation marks): the keys restored next
// are filed in gen or later, as they were when emitted, even when their
// own timestamps are older.
func (s *Stage) AdvanceTo(gen uint64) {
	s.tick(int64(gen) * s.win.spanMs)
}

// Close forgets the open cycle, writes the Bloom snapshot that lets the
// next Open skip the rebuild, and closes the store. After a store failure
// no snapshot is written and the next Open rebuilds.
func (s *Stage) Close() error {
	if s.store == nil {
		return ErrClosed
	}
	s.Abort()
	var errs []error
	if err := s.reader.Close(); err != nil && s.err == nil {
		errs = append(errs, err)
	}
	if s.err == nil {
		if err := s.writeSnapshot(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.store.Close(); err != nil {
		errs = append(errs, err)
	}
	s.store = nil
	s.err = ErrClosed
	return errors.Join(errs...)
}

// RemoveState deletes the stage directory dir (store, Bloom snapshot and
// all) unless a process has its store open: then it removes nothing and
// returns an error matching statestore.ErrLocked.
func RemoveState(dir string) error {
	return statestore.Remove(dir, filepath.Join(dir, StoreDir))
}
