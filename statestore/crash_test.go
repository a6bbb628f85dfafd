package statestore

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

// The crash tests drive a store through a deterministic history of commits
// and expiries, crash it (a crash clone of the file system) at random points,
// reopen every clone and check that it holds exactly the effect of a prefix
// of the history: checkpoint c, the keys of commits <= c and of no later
// commit, minus the buckets expired up to that point.

// history is the model the recovered stores are checked against.
type history struct {
	commitGen  []uint64   // commitGen[i]: generation of commit i (index 0 unused)
	commitKeys []int      // number of keys of commit i
	floorAfter [][]uint64 // floors set by Expires after commit i, before commit i+1
}

func newHistory() *history {
	return &history{commitGen: []uint64{0}, commitKeys: []int{0}, floorAfter: [][]uint64{nil}}
}

func checkpointOf(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }

// floorsAt returns the expiry floors a store recovered at checkpoint c may
// have: the floor in force when commit c was made, or one set by an Expire
// between commits c and c+1. When c is the last commit before the crash,
// only the first done of those Expires had happened.
func (h *history) floorsAt(c, lastCommit uint64, done int) []uint64 {
	var floor uint64
	for i := uint64(0); i < c; i++ {
		if fs := h.floorAfter[i]; len(fs) > 0 {
			floor = fs[len(fs)-1]
		}
	}
	after := h.floorAfter[c]
	if c == lastCommit {
		after = after[:done]
	}
	return append([]uint64{floor}, after...)
}

// crashPoint is one crash clone and what had happened when it was taken.
type crashPoint struct {
	fs         *vfs.MemFS
	committed  uint64 // commits that had returned
	floors     int    // Expires done after the last commit
	durable    uint64 // commits covered by a successful Flush
	unsyncedPc int
	// inDoubt: the operation after the last successful one failed, so its
	// effect (commit committed+1, or one more Expire) may be present.
	inDoubt bool
}

// checkRecovered opens the store on fs and checks it against h.
func checkRecovered(t *testing.T, h *history, cp crashPoint, opts Options) {
	t.Helper()
	opts.FS = cp.fs
	s, err := Open("db", opts)
	if err != nil {
		t.Fatalf("reopen after crash at commit %d (unsynced kept %d%%): %v", cp.committed, cp.unsyncedPc, err)
	}
	defer mustClose(t, s)
	st := s.State()
	var c uint64
	if st.Seq > 0 {
		c = binary.BigEndian.Uint64(st.Checkpoint)
	}
	where := fmt.Sprintf("crash at commit %d, durable %d, unsynced kept %d%%: recovered checkpoint %d", cp.committed, cp.durable, cp.unsyncedPc, c)
	if testing.Verbose() {
		t.Logf("%s", where)
	}
	last := cp.committed // the last commit that may be present
	if cp.inDoubt && uint64(len(h.commitGen)) > last+1 {
		last++
	}
	if c != st.Seq || c > last || c < cp.durable {
		t.Fatalf("%s: Seq %d, want durable <= checkpoint = Seq <= %d", where, st.Seq, last)
	}
	floor := s.floorGen()
	done := cp.floors
	if cp.inDoubt {
		done = min(done+1, len(h.floorAfter[cp.committed]))
	}
	allowed := h.floorsAt(c, cp.committed, done)
	if !containsGen(allowed, floor) {
		t.Fatalf("%s: floor %d, want one of %v", where, floor, allowed)
	}
	perGen := map[uint64]int{}
	for i := uint64(1); i <= last; i++ {
		gen := h.commitGen[i]
		want := i <= c && gen >= floor
		if want && h.commitKeys[i] > 0 { // a bucket of no key is not listed
			perGen[gen] += h.commitKeys[i]
		}
		for j := 0; j < h.commitKeys[i]; j++ {
			v, found, err := s.Get(gen, keyOf(i, uint64(j)))
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if found != want || (found && v != i) {
				t.Fatalf("%s: key %d of commit %d (gen %d, floor %d): found %t version %d, want %t", where, j, i, gen, floor, found, v, want)
			}
		}
	}
	// Nothing else is stored: count every bucket.
	gens, err := s.Generations()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gens {
		n := 0
		if err := s.ScanGeneration(g.Gen, func(partition.Hash, uint64) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != perGen[g.Gen] {
			t.Fatalf("%s: gen %d holds %d keys, want %d", where, g.Gen, n, perGen[g.Gen])
		}
		delete(perGen, g.Gen)
	}
	if len(perGen) != 0 {
		t.Fatalf("%s: buckets missing: %v", where, perGen)
	}
}

func containsGen(gens []uint64, g uint64) bool {
	for _, x := range gens {
		if x == g {
			return true
		}
	}
	return false
}

// workload extends the history and applies it to a store, one commit (and
// maybe an Expire or a Flush) per step, recording how far it got.
type workload struct {
	rng       *rand.Rand
	h         *history
	committed uint64
	floors    int
	durable   uint64
	// loadStreaks: commits are Loads except every 300th (a bulk restore
	// of many buffers, written as runs as they fill, then ended by a
	// Commit).
	loadStreaks bool
	// genCommits is how many commits a generation lasts (0: 25).
	genCommits uint64
}

func (w *workload) step(s *Store, b *Batch) error {
	i := w.committed + 1
	if uint64(len(w.h.commitGen)) <= i {
		gen := 1 + i/max(w.genCommits, 25)
		n := 1 + w.rng.IntN(120)
		if w.rng.IntN(15) == 0 {
			// No key: a cycle that emitted nothing, a restore batch of
			// unkeyed records; its state must be recorded all the same.
			n = 0
		}
		w.h.commitGen = append(w.h.commitGen, gen)
		w.h.commitKeys = append(w.h.commitKeys, n)
		w.h.floorAfter = append(w.h.floorAfter, nil)
	}
	gen := w.h.commitGen[i]
	for j := 0; j < w.h.commitKeys[i]; j++ {
		b.Put(gen, keyOf(i, uint64(j)), i)
	}
	commit := s.Commit
	if w.rng.IntN(3) == 0 || (w.loadStreaks && i%300 != 0) {
		commit = s.Load // a bulk restore's commit
	}
	if _, err := commit(b, State{Generation: gen, Checkpoint: checkpointOf(i)}); err != nil {
		return err
	}
	w.committed, w.floors = i, 0
	if w.loadStreaks && i%300 != 0 {
		return nil // no Expire or Flush ends the streak's load early
	}
	switch r := w.rng.IntN(100); {
	case r < 4 && gen > 3:
		floor := gen - 3 + uint64(w.rng.IntN(2))
		effective := floor > w.lastFloor()
		if effective {
			w.h.floorAfter[i] = append(w.h.floorAfter[i], floor)
		}
		if err := s.Expire(floor); err != nil {
			return err
		}
		if effective {
			w.floors++
		}
	case r < 7:
		if err := s.Flush(); err != nil {
			return err
		}
		w.durable = i
	}
	return nil
}

func (w *workload) lastFloor() uint64 {
	for i := int(w.committed); i >= 0; i-- {
		if fs := w.h.floorAfter[i]; len(fs) > 0 {
			return fs[len(fs)-1]
		}
	}
	return 0
}

// soakSeeds returns how many seeds the randomised fault tests run: def, or
// STATESTORE_SOAK_SEEDS for a longer soak, e.g.
//
//	STATESTORE_SOAK_SEEDS=100 go test ./statestore/ -run 'Crash|ErrorInjection'
func soakSeeds(def uint64) uint64 {
	if n, err := strconv.ParseUint(os.Getenv("STATESTORE_SOAK_SEEDS"), 10, 64); err == nil && n > 0 {
		return n
	}
	return def
}

func TestCrashConsistency(t *testing.T) {
	type variant struct {
		wal bool
		// merges: generations of 150 commits and indexes of 1024 keys,
		// so that each holds enough runs to merge (the others rarely
		// merge), and crash clones land in merges.
		merges bool
	}
	for _, v := range []variant{{true, false}, {false, false}, {true, true}, {false, true}} {
		wal := v.wal
		for seed := uint64(1); seed <= soakSeeds(2); seed++ {
			t.Run(fmt.Sprintf("wal=%t/merges=%t/seed=%d", wal, v.merges, seed), func(t *testing.T) {
				commits := uint64(400)
				fs := newCloneableMem()
				opts := testOptions(fs)
				opts.VersionMode = true
				opts.DisableWAL = !wal
				opts.MemTableSize = 128 << 10 // many flushes and compactions
				w := &workload{rng: rand.New(rand.NewPCG(seed, 7)), h: newHistory()}
				if v.merges {
					commits, opts.MemTableSize, w.genCommits = 700, 32<<10, 150
				}
				s := mustOpen(t, "db", opts)
				b := s.NewBatch()
				var points []crashPoint
				for w.committed < commits {
					if err := w.step(s, b); err != nil {
						t.Fatal(err)
					}
					if w.rng.IntN(20) == 0 {
						pc := []int{0, 0, 30, 70, 100}[w.rng.IntN(5)]
						clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pc, RNG: w.rng})
						points = append(points, crashPoint{fs: clone, committed: w.committed, floors: w.floors, durable: w.durable, unsyncedPc: pc})
					}
				}
				if err := s.settle(); err != nil {
					t.Fatal(err)
				}
				if v.merges && s.mergedKeys == 0 {
					t.Fatal("no merge ran")
				}
				mustClose(t, s)
				// A clean Close makes everything durable.
				points = append(points, crashPoint{fs: fs.CrashClone(vfs.CrashCloneCfg{}), committed: w.committed, floors: w.floors, durable: w.committed})
				for _, cp := range points {
					checkRecovered(t, w.h, cp, opts)
				}
				t.Logf("%d crash points checked", len(points))
			})
		}
	}
}

// cloneableMem is a crashable MemFS whose Link and CrashClone exclude each
// other. Pebble's MemFS.Link read-locks its clone mutex twice; a CrashClone
// that arrives between the two takes the write lock's turn and blocks the
// second read lock, while it waits for the first: a deadlock of the test's
// file system, not of the store (met once merges ran on a goroutine of
// their own and ingested while a test cloned).
type cloneableMem struct {
	*vfs.MemFS
	mu sync.RWMutex
}

func newCloneableMem() *cloneableMem { return &cloneableMem{MemFS: vfs.NewCrashableMem()} }

func (m *cloneableMem) Link(oldname, newname string) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.MemFS.Link(oldname, newname)
}

func (m *cloneableMem) CrashClone(cfg vfs.CrashCloneCfg) *vfs.MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.MemFS.CrashClone(cfg)
}
