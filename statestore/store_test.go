package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
	"pgregory.net/rapid"
)

// keyOf derives the business-key hash of key j of commit i.
func keyOf(i, j uint64) partition.Hash {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], i)
	binary.BigEndian.PutUint64(b[8:], j)
	return partition.HashKey(b[:])
}

// testOptions keeps tests small and fast: an in-memory FS, a small cache and
// small memtables so that flushes and compactions actually happen.
//
// Merges use the default policy with a fanout of 4, so that the few runs a
// small test makes are merged, and merged again; runs are written in packs
// of testPackKeys hashes, so that every run of a test spans many packs.
func testOptions(fs vfs.FS) Options {
	return Options{FS: fs, CacheSize: 8 << 20, MemTableSize: 256 << 10, merge: testMergePolicy(), packKeys: testPackKeys}
}

// testPackKeys is the pack size of the tests' stores: small and odd, so
// that pack boundaries fall anywhere.
const testPackKeys = 7

func testMergePolicy() mergePolicy {
	p := defaultMergePolicy
	p.fanout = 4
	return p
}

func mustOpen(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func mustClose(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func TestPutGetLookupAcrossBuckets(t *testing.T) {
	for _, wal := range []bool{true, false} {
		t.Run(fmt.Sprintf("wal=%t", wal), func(t *testing.T) {
			opts := testOptions(vfs.NewMem())
			opts.DisableWAL = !wal
			s := mustOpen(t, "db", opts)
			defer mustClose(t, s)

			b := s.NewBatch()
			for gen := uint64(1); gen <= 3; gen++ {
				for j := uint64(0); j < 100; j++ {
					b.Put(gen, keyOf(gen, j), 0)
				}
			}
			// The same hash in two buckets: Lookup must honour the order.
			b.Put(1, keyOf(99, 99), 0)
			b.Put(3, keyOf(99, 99), 0)
			if b.Len() != 302 {
				t.Fatalf("Len = %d, want 302", b.Len())
			}
			if _, err := s.Commit(b, State{Generation: 3}); err != nil {
				t.Fatal(err)
			}
			if b.Len() != 0 {
				t.Fatalf("batch not reset after Commit: Len = %d", b.Len())
			}

			tests := []struct {
				name    string
				gen     uint64
				h       partition.Hash
				wantHit bool
			}{
				{"hit gen 1", 1, keyOf(1, 0), true},
				{"hit gen 3", 3, keyOf(3, 99), true},
				{"other bucket", 2, keyOf(1, 0), false},
				{"unknown key", 1, keyOf(7, 7), false},
				{"unknown bucket", 4, keyOf(3, 0), false},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					_, found, err := s.Get(tc.gen, tc.h)
					if err != nil || found != tc.wantHit {
						t.Fatalf("Get(%d) = %t, %v; want %t", tc.gen, found, err, tc.wantHit)
					}
				})
			}

			lookups := []struct {
				name    string
				h       partition.Hash
				gens    []uint64
				wantGen uint64
				wantHit bool
			}{
				{"newest first", keyOf(99, 99), []uint64{3, 2, 1}, 3, true},
				{"oldest first", keyOf(99, 99), []uint64{1, 2, 3}, 1, true},
				{"only in gen 2", keyOf(2, 5), []uint64{3, 2, 1}, 2, true},
				{"not in given gens", keyOf(2, 5), []uint64{3, 1}, 0, false},
				{"no gens", keyOf(2, 5), nil, 0, false},
				{"miss", keyOf(8, 8), []uint64{3, 2, 1}, 0, false},
			}
			for _, tc := range lookups {
				t.Run(tc.name, func(t *testing.T) {
					gen, _, found, err := s.Lookup(tc.h, tc.gens)
					if err != nil || found != tc.wantHit || gen != tc.wantGen {
						t.Fatalf("Lookup = gen %d found %t err %v; want gen %d found %t", gen, found, err, tc.wantGen, tc.wantHit)
					}
				})
			}

			var n int
			if err := s.ScanGeneration(2, func(h partition.Hash, _ uint64) error {
				n++
				return nil
			}); err != nil || n != 100 {
				t.Fatalf("ScanGeneration(2) saw %d keys, err %v; want 100", n, err)
			}
			gens, err := s.Generations()
			if err != nil {
				t.Fatal(err)
			}
			if len(gens) != 3 || gens[0].Gen != 1 || gens[2].Gen != 3 {
				t.Fatalf("Generations = %+v, want 1..3", gens)
			}
		})
	}
}

func TestStateRoundTrip(t *testing.T) {
	for _, wal := range []bool{true, false} {
		t.Run(fmt.Sprintf("wal=%t", wal), func(t *testing.T) {
			fs := vfs.NewMem()
			opts := testOptions(fs)
			opts.DisableWAL = !wal
			s := mustOpen(t, "db", opts)
			if st := s.State(); st.Seq != 0 || st.Checkpoint != nil {
				t.Fatalf("fresh store State = %+v", st)
			}
			b := s.NewBatch()
			var last State
			for i := uint64(1); i <= 5; i++ {
				b.Put(i, keyOf(i, 0), 0)
				st, err := s.Commit(b, State{Seq: 1000, Generation: i, Checkpoint: []byte(fmt.Sprintf("offsets-%d", i))})
				if err != nil {
					t.Fatal(err)
				}
				if st.Seq != i {
					t.Fatalf("commit %d assigned Seq %d", i, st.Seq)
				}
				last = st
			}
			// An empty batch still advances the checkpoint.
			last, err := s.Commit(b, State{Generation: 5, Checkpoint: []byte("empty")})
			if err != nil || last.Seq != 6 {
				t.Fatalf("empty commit: %+v, %v", last, err)
			}
			if err := s.Expire(3); err != nil {
				t.Fatal(err)
			}
			mustClose(t, s)
			if err := s.Close(); !errors.Is(err, ErrClosed) {
				t.Fatalf("second Close = %v, want ErrClosed", err)
			}
			if _, _, err := s.Get(1, keyOf(1, 0)); !errors.Is(err, ErrClosed) {
				t.Fatalf("Get after Close = %v, want ErrClosed", err)
			}

			s = mustOpen(t, "db", opts)
			defer mustClose(t, s)
			got := s.State()
			if got.Seq != last.Seq || got.Generation != last.Generation || !bytes.Equal(got.Checkpoint, last.Checkpoint) {
				t.Fatalf("State after reopen = %+v, want %+v", got, last)
			}
			if f := s.floorGen(); f != 3 {
				t.Fatalf("floor after reopen = %d, want 3", f)
			}
			for i := uint64(1); i <= 5; i++ {
				_, found, err := s.Get(i, keyOf(i, 0))
				if err != nil || found != (i >= 3) {
					t.Fatalf("Get(gen %d) = %t, %v; want %t", i, found, err, i >= 3)
				}
			}
			got.Checkpoint[0] = 'X'
			if s.State().Checkpoint[0] == 'X' {
				t.Fatal("State shares its Checkpoint with the store")
			}
		})
	}
}

func TestVersionMode(t *testing.T) {
	fs := vfs.NewMem()
	opts := testOptions(fs)
	opts.VersionMode = true
	s := mustOpen(t, "db", opts)
	b := s.NewBatch()
	versions := []uint64{0, 1, 127, 128, 1 << 40, ^uint64(0)}
	for j, v := range versions {
		b.Put(4, keyOf(0, uint64(j)), v)
	}
	b.Put(5, keyOf(0, 0), 77) // a newer generation holds a newer version
	if _, err := s.Commit(b, State{}); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		for j, want := range versions {
			v, found, err := s.Get(4, keyOf(0, uint64(j)))
			if err != nil || !found || v != want {
				t.Fatalf("Get = %d, %t, %v; want %d", v, found, err, want)
			}
		}
		gen, v, found, err := s.Lookup(keyOf(0, 0), []uint64{5, 4})
		if err != nil || !found || gen != 5 || v != 77 {
			t.Fatalf("Lookup = gen %d v %d %t %v; want gen 5 v 77", gen, v, found, err)
		}
		var seen []uint64
		if err := s.ScanGeneration(4, func(_ partition.Hash, v uint64) error {
			seen = append(seen, v)
			return nil
		}); err != nil || len(seen) != len(versions) {
			t.Fatalf("scan: %v, %v", seen, err)
		}
	}
	check(s)

	// Overwriting a key replaces its version.
	b.Put(4, keyOf(0, 2), 500)
	versions[2] = 500
	if _, err := s.Commit(b, State{}); err != nil {
		t.Fatal(err)
	}
	check(s)
	mustClose(t, s)

	s = mustOpen(t, "db", opts)
	check(s)
	mustClose(t, s)

	// The mode is part of the store.
	opts.VersionMode = false
	if _, err := Open("db", opts); err == nil {
		t.Fatal("opening a version-mode store in first mode succeeded")
	}
}

func TestFirstModeStoresNoVersion(t *testing.T) {
	s := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer mustClose(t, s)
	b := s.NewBatch()
	b.Put(1, keyOf(1, 1), 42)
	if _, err := s.Commit(b, State{}); err != nil {
		t.Fatal(err)
	}
	v, found, err := s.Get(1, keyOf(1, 1))
	if err != nil || !found || v != 0 {
		t.Fatalf("Get = %d, %t, %v; want 0, true", v, found, err)
	}
}

func TestCommitBelowFloor(t *testing.T) {
	s := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer mustClose(t, s)
	if err := s.Expire(5); err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	b.Put(4, keyOf(1, 1), 0)
	b.Put(6, keyOf(1, 2), 0)
	if _, err := s.Commit(b, State{}); !errors.Is(err, ErrExpiredGeneration) {
		t.Fatalf("Commit below floor = %v, want ErrExpiredGeneration", err)
	}
	if s.State().Seq != 0 {
		t.Fatal("rejected commit advanced Seq")
	}
	b.Reset()
	b.Put(5, keyOf(1, 1), 0)
	if st, err := s.Commit(b, State{}); err != nil || st.Seq != 1 {
		t.Fatalf("Commit at floor = %+v, %v", st, err)
	}
	// Expire is idempotent and never lowers the floor.
	for _, g := range []uint64{5, 3} {
		if err := s.Expire(g); err != nil {
			t.Fatal(err)
		}
	}
	if _, found, _ := s.Get(5, keyOf(1, 1)); !found {
		t.Fatal("repeated Expire removed a live bucket")
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	_, err := Open("db", Options{FS: vfs.NewMem(), MemTableSize: 1024, CacheSize: -1})
	if err == nil {
		t.Fatal("Open accepted bad options")
	}
	for _, field := range []string{"memtable_size", "cache_size"} {
		if !bytes.Contains([]byte(err.Error()), []byte(field)) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
}

// TestModel runs random operations against the store and a plain map.
func TestModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		fs := vfs.NewMem()
		opts := testOptions(fs)
		opts.VersionMode = true
		opts.DisableWAL = rapid.Bool().Draw(rt, "disableWAL")
		s, err := Open("db", opts)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		type mk struct {
			gen uint64
			h   partition.Hash
		}
		model := map[mk]uint64{}
		var floor uint64
		b := s.NewBatch()
		genGen := rapid.Uint64Range(0, 12)
		keyGen := rapid.Uint64Range(0, 20)
		rt.Repeat(map[string]func(*rapid.T){
			"put": func(rt *rapid.T) {
				n := rapid.IntRange(0, 5).Draw(rt, "n")
				pending := map[mk]uint64{}
				for range n {
					g := max(genGen.Draw(rt, "gen"), floor)
					k := mk{g, keyOf(0, keyGen.Draw(rt, "key"))}
					v := rapid.Uint64().Draw(rt, "version")
					b.Put(k.gen, k.h, v)
					pending[k] = v
				}
				if _, err := s.Commit(b, State{}); err != nil {
					rt.Fatal(err)
				}
				for k, v := range pending {
					model[k] = v
				}
			},
			"expire": func(rt *rapid.T) {
				g := genGen.Draw(rt, "floor")
				if err := s.Expire(g); err != nil {
					rt.Fatal(err)
				}
				if g > floor {
					floor = g
					for k := range model {
						if k.gen < floor {
							delete(model, k)
						}
					}
				}
			},
			"reopen": func(rt *rapid.T) {
				if err := s.Close(); err != nil {
					rt.Fatal(err)
				}
				if s, err = Open("db", opts); err != nil {
					rt.Fatal(err)
				}
				b = s.NewBatch()
			},
			"get": func(rt *rapid.T) {
				k := mk{genGen.Draw(rt, "gen"), keyOf(0, keyGen.Draw(rt, "key"))}
				v, found, err := s.Get(k.gen, k.h)
				want, ok := model[k]
				if err != nil || found != ok || v != want {
					rt.Fatalf("Get(%d) = %d %t %v; model %d %t", k.gen, v, found, err, want, ok)
				}
			},
			"": func(rt *rapid.T) {
				var n int
				for g := uint64(0); g <= 12; g++ {
					if err := s.ScanGeneration(g, func(h partition.Hash, v uint64) error {
						if want, ok := model[mk{g, h}]; !ok || want != v {
							return fmt.Errorf("scan: unexpected key in gen %d", g)
						}
						n++
						return nil
					}); err != nil {
						rt.Fatal(err)
					}
				}
				if n != len(model) {
					rt.Fatalf("store holds %d keys, model %d", n, len(model))
				}
			},
		})
	})
}

func TestReadAllocs(t *testing.T) {
	if raceEnabled || !readOnCaller {
		t.Skip("allocation counts are meaningless under the race detector, and reads hand off (and allocate) in race and invariants builds")
	}
	for _, vm := range []bool{false, true} {
		t.Run(fmt.Sprintf("version=%t", vm), func(t *testing.T) {
			opts := testOptions(vfs.NewMem())
			// Batches below half the memtable, as in production: Pebble
			// queues larger ones as "flushable batches", whose reads allocate.
			opts.MemTableSize = 4 << 20
			opts.VersionMode = vm
			s := mustOpen(t, "db", opts)
			defer mustClose(t, s)
			b := s.NewBatch()
			commit := func(from, to uint64) {
				for j := from; j < to; j++ {
					b.Put(1, keyOf(1, j), j)
				}
				if _, err := s.Commit(b, State{}); err != nil {
					t.Fatal(err)
				}
			}
			commit(0, 10000)
			commit(10000, 20000)
			writeRuns(t, s) // serve most reads from runs
			for g, gr := range s.runs.Load().gens {
				for _, r := range gr {
					if r.blocks == nil {
						t.Fatalf("run %d of generation %d is read through Pebble, not its blocks", r.id, g)
					}
				}
			}
			commit(20000, 21000)
			var j uint64
			gens := []uint64{3, 2, 1}
			cases := []struct {
				name string
				fn   func()
			}{
				{"get miss", func() { j++; _, _, _ = s.Get(2, keyOf(1, j%21000)) }},
				{"get hit sstable", func() { j++; _, _, _ = s.Get(1, keyOf(1, j%20000)) }},
				{"get hit memory", func() { j++; _, _, _ = s.Get(1, keyOf(1, 20000+j%1000)) }},
				{"lookup miss", func() { j++; _, _, _, _ = s.Lookup(keyOf(2, j), gens) }},
				{"lookup hit", func() { j++; _, _, _, _ = s.Lookup(keyOf(1, j%20000), gens) }},
				{"put", func() { j++; b.Put(1, keyOf(3, j), j) }},
			}
			for _, c := range cases {
				for range 2000 { // warm pools and let the batch grow
					c.fn()
				}
				if got := testing.AllocsPerRun(1000, c.fn); got != 0 {
					t.Errorf("%s: %.2f allocs/op, want 0", c.name, got)
				}
			}
			// The reads above really found what they looked for.
			if _, found, _ := s.Get(1, keyOf(1, 5)); !found {
				t.Fatal("key not found")
			}
		})
	}
}

// TestBatchOrder checks both sort paths of a batch: every key stored once,
// and of several Puts of a key the last one wins.
func TestBatchOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		gens []uint64
	}{
		{"small", 50, []uint64{3}},
		{"one generation", 20000, []uint64{3}},
		{"two generations", 20000, []uint64{3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := testOptions(vfs.NewMem())
			opts.VersionMode = true
			opts.MemTableSize = 8 << 20
			s := mustOpen(t, "db", opts)
			defer mustClose(t, s)
			b := s.NewBatch()
			type mk struct {
				gen uint64
				j   uint64
			}
			want := map[mk]uint64{}
			for i := 0; i < tc.n; i++ {
				k := mk{tc.gens[i%len(tc.gens)], uint64(i % (tc.n / 3))} // each key ~3 times
				b.Put(k.gen, keyOf(0, k.j), uint64(i))
				want[k] = uint64(i)
			}
			if _, err := s.Commit(b, State{}); err != nil {
				t.Fatal(err)
			}
			es := s.active.sorted(0, true)
			for i := 1; i < len(es); i++ {
				if c := compareMem(&es[i-1], &es[i]); c >= 0 {
					t.Fatalf("entries %d and %d out of order", i-1, i)
				}
			}
			check := func() {
				t.Helper()
				for k, v := range want {
					got, found, err := s.Get(k.gen, keyOf(0, k.j))
					if err != nil || !found || got != v {
						t.Fatalf("key %v: version %d found %t err %v, want %d", k, got, found, err, v)
					}
				}
			}
			check()
			// Written as runs, the same.
			writeRuns(t, s)
			for k, v := range want {
				got, found, err := s.Get(k.gen, keyOf(0, k.j))
				if err != nil || !found || got != v {
					t.Fatalf("key %v: version %d found %t err %v, want %d", k, got, found, err, v)
				}
			}
			n := 0
			for _, g := range tc.gens {
				if err := s.ScanGeneration(g, func(partition.Hash, uint64) error { n++; return nil }); err != nil {
					t.Fatal(err)
				}
			}
			if n != len(want) {
				t.Fatalf("store holds %d keys, want %d", n, len(want))
			}
		})
	}
}

// TestConcurrentReads reads while another goroutine commits and expires;
// run with -race. A key, once committed, stays visible until its bucket
// expires.
func TestConcurrentReads(t *testing.T) {
	opts := testOptions(vfs.NewMem())
	opts.MemTableSize = 1 << 20
	s := mustOpen(t, "db", opts)
	defer mustClose(t, s)
	var committed atomic.Uint64
	done := make(chan struct{})
	errs := make(chan error, 4)
	for r := 0; r < 3; r++ {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				c := committed.Load()
				if c == 0 {
					continue
				}
				i := 1 + uint64(rand.IntN(int(c)))
				gen := 10 + i/50
				_, found, err := s.Get(gen, keyOf(i, 0))
				if err != nil || (!found && gen >= s.floorGen()) {
					errs <- fmt.Errorf("Get commit %d: found %t, %v", i, found, err)
					return
				}
				if _, err := s.Generations(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	b := s.NewBatch()
	for i := uint64(1); i <= 500; i++ {
		gen := 10 + i/50
		for j := uint64(0); j < 20; j++ {
			b.Put(gen, keyOf(i, j), 0)
		}
		if _, err := s.Commit(b, State{Generation: gen}); err != nil {
			t.Fatal(err)
		}
		committed.Store(i)
		if i%100 == 0 {
			if err := s.Expire(gen - 2); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(done)
	for r := 0; r < 3; r++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadOnly: a read-only Open sees the committed keys and state, takes
// the mode from the store, writes nothing, and is refused while a writer
// has the store open.
func TestReadOnly(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "none"), Options{ReadOnly: true}); !errors.Is(err, ErrNotExist) {
		t.Fatalf("read-only open of an empty directory: %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read-only open created the directory: %v", err)
	}
	w, err := Open(dir, Options{VersionMode: true, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b := w.NewBatch()
	h := partition.HashKey([]byte("k"))
	b.Put(7, h, 42)
	if _, err := w.Commit(b, State{Generation: 7, Checkpoint: []byte("ck")}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{ReadOnly: true}); !errors.Is(err, ErrLocked) {
		t.Fatalf("read-only open while a writer has the store: %v, want ErrLocked", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.VersionMode() || r.State().Seq != 1 || string(r.State().Checkpoint) != "ck" {
		t.Errorf("read-only store: version mode %t, state %+v", r.VersionMode(), r.State())
	}
	if v, found, err := r.Get(7, h); err != nil || !found || v != 42 {
		t.Errorf("Get = %d, %t, %v; want 42, true", v, found, err)
	}
	if _, err := r.Commit(r.NewBatch(), State{}); err == nil {
		t.Error("a read-only store accepted a commit")
	}
}

// writeRuns hands the keys in memory to the flusher and waits until they
// are in runs.
func writeRuns(t testing.TB, s *Store) {
	t.Helper()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	err := s.handOver(false)
	if err == nil {
		err = s.awaitFlush()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// waitFlushed waits until the index handed over last is in runs.
func waitFlushed(t testing.TB, s *Store) {
	t.Helper()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.awaitFlush(); err != nil {
		t.Fatal(err)
	}
}
