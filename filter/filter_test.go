package filter

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/dedupstream/dedupstream/partition"
)

var smallCfg = Config{KeysPerGeneration: 1000, FalsePositiveRate: 0.001, Generations: 3}

func TestLiveRange(t *testing.T) {
	tests := []struct {
		name       string
		start      uint64
		advance    []uint64
		cur, old   uint64
		live, dead []uint64
	}{
		{"start at 0", 0, nil, 0, 0, []uint64{0}, []uint64{1, 2}},
		{"start at 1", 1, nil, 1, 0, []uint64{0, 1}, []uint64{2}},
		{"start full", 10, nil, 10, 8, []uint64{8, 9, 10}, []uint64{7, 11, 0}},
		{"advance by one", 10, []uint64{11}, 11, 9, []uint64{9, 10, 11}, []uint64{8, 12}},
		{"advance skips", 10, []uint64{12}, 12, 10, []uint64{10, 11, 12}, []uint64{9}},
		{"advance past window", 10, []uint64{100}, 100, 98, []uint64{98, 99, 100}, []uint64{10, 97}},
		{"advance backwards ignored", 10, []uint64{9, 3}, 10, 8, []uint64{8, 9, 10}, []uint64{7}},
		{"advance same", 10, []uint64{10}, 10, 8, []uint64{8, 9, 10}, nil},
		{"near max", math.MaxUint64 - 5, []uint64{math.MaxUint64}, math.MaxUint64, math.MaxUint64 - 2,
			[]uint64{math.MaxUint64 - 2, math.MaxUint64 - 1, math.MaxUint64}, []uint64{math.MaxUint64 - 3, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := mustNew(t, smallCfg, tt.start)
			for _, g := range tt.advance {
				f.Advance(g)
			}
			if f.Current() != tt.cur || f.Oldest() != tt.old {
				t.Fatalf("Current, Oldest = %d, %d, want %d, %d", f.Current(), f.Oldest(), tt.cur, tt.old)
			}
			h := key(nsPresent, 1)
			for _, g := range tt.live {
				if !f.Live(g) || !f.AddTo(g, h) {
					t.Errorf("generation %d: not live", g)
				}
			}
			for _, g := range tt.dead {
				if f.Live(g) || f.AddTo(g, h) {
					t.Errorf("generation %d: live", g)
				}
			}
			var gens []uint64
			for _, s := range f.Stats() {
				gens = append(gens, s.Gen)
			}
			want := slices.Clone(tt.live)
			slices.Reverse(want)
			if !slices.Equal(gens, want) {
				t.Errorf("Stats generations = %v, want %v", gens, want)
			}
		})
	}
}

func TestCandidatesNewestFirst(t *testing.T) {
	f := mustNew(t, smallCfg, 5)
	h := key(nsPresent, 42)
	f.AddTo(3, h)
	f.Add(h) // generation 5
	dst := []uint64{99}
	dst = f.Candidates(h, dst)
	if !slices.Equal(dst, []uint64{99, 5, 3}) {
		t.Fatalf("Candidates = %v, want [99 5 3] (appended, newest first)", dst)
	}
	if !f.Test(h) {
		t.Fatal("Test = false for an added key")
	}
	f.Advance(6) // drops 3
	if got := f.Candidates(h, nil); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("after Advance(6): Candidates = %v, want [5]", got)
	}
	f.Advance(8) // drops 5
	if got := f.Candidates(h, nil); len(got) != 0 || f.Test(h) {
		t.Fatalf("after Advance(8): Candidates = %v, Test = %v, want none", got, f.Test(h))
	}
}

// TestAdvanceClearsReusedBitsets checks that a generation slot taken over by
// a new generation starts empty, both for a step of one and for a jump.
func TestAdvanceClearsReusedBitsets(t *testing.T) {
	for _, step := range []uint64{1, 2, 3, 7} {
		f := mustNew(t, smallCfg, 10)
		for g := uint64(8); g <= 10; g++ {
			for i := range uint64(500) {
				f.AddTo(g, key(nsPresent, g*1000+i))
			}
		}
		f.Advance(10 + step)
		for _, s := range f.Stats() {
			dropped := s.Gen > 10
			if dropped && (s.FillRatio != 0 || s.Added != 0) {
				t.Errorf("step %d: new generation %d: fill %.4f added %d, want empty", step, s.Gen, s.FillRatio, s.Added)
			}
			if !dropped && (s.FillRatio == 0 || s.Added != 500) {
				t.Errorf("step %d: kept generation %d: fill %.4f added %d, want 500 keys", step, s.Gen, s.FillRatio, s.Added)
			}
		}
	}
}

func TestStats(t *testing.T) {
	cfg := Config{KeysPerGeneration: 10_000, FalsePositiveRate: 0.01, Generations: 2}
	f := fillWindow(t, cfg)
	st := f.Stats()
	if len(st) != 2 || st[0].Gen != 1 || st[1].Gen != 0 {
		t.Fatalf("Stats = %+v, want generations 1, 0", st)
	}
	// At capacity the bits set are what the sizing model expects (a
	// classic filter is half full; small blocks saturate, so a filter of
	// them is sized below half full).
	B := float64(uint64(1) << f.log)
	want := blockedFill(float64(cfg.KeysPerGeneration)*B/float64(f.m), int(f.k), B)
	for _, s := range st {
		if s.Added != 10_000 || math.Abs(s.FillRatio-want) > 0.02 || s.Bytes != int(f.m/8) {
			t.Errorf("generation %d: %+v", s.Gen, s)
		}
		if s.EstimatedFPR < 0.005/1.5 || s.EstimatedFPR > 0.005*1.5 {
			t.Errorf("generation %d: EstimatedFPR %.5f, want ~0.005", s.Gen, s.EstimatedFPR)
		}
	}
	if got := f.EstimatedFalsePositiveRate(); got < 0.01/1.5 || got > 0.01*1.5 {
		t.Errorf("EstimatedFalsePositiveRate() = %.5f, want ~0.01", got)
	}
	if got := mustNew(t, cfg, 9).EstimatedFalsePositiveRate(); got != 0 {
		t.Errorf("empty filter: EstimatedFalsePositiveRate() = %g, want 0", got)
	}
}

func TestTag(t *testing.T) {
	f := mustNew(t, smallCfg, 0)
	if f.Tag() != 0 {
		t.Fatalf("Tag() = %d on a new filter", f.Tag())
	}
	f.SetTag(812)
	if f.Tag() != 812 {
		t.Fatalf("Tag() = %d, want 812", f.Tag())
	}
}

// TestFewProbes covers the configurations with k = 1, 2 and 3.
func TestFewProbes(t *testing.T) {
	for _, tt := range []struct {
		cfg Config
		k   uint64
	}{
		{Config{KeysPerGeneration: 500, FalsePositiveRate: 0.5, Generations: 1}, 1},
		{Config{KeysPerGeneration: 500, FalsePositiveRate: 0.3, Generations: 1}, 2},
		{Config{KeysPerGeneration: 500, FalsePositiveRate: 0.3, Generations: 2}, 3},
	} {
		f := mustNew(t, tt.cfg, 7)
		if f.k != tt.k {
			t.Fatalf("%+v: k = %d, want %d", tt.cfg, f.k, tt.k)
		}
		for i := range uint64(500) {
			f.AddTo(f.Oldest(), key(nsPresent, i))
		}
		positives := 0
		for i := range uint64(500) {
			if got := f.Candidates(key(nsPresent, i), nil); !slices.Contains(got, f.Oldest()) {
				t.Fatalf("k=%d: key %d added to %d, Candidates %v", f.k, i, f.Oldest(), got)
			}
			if f.Test(key(nsAbsent, i)) {
				positives++
			}
		}
		if rate := float64(positives) / 500; rate > 2*tt.cfg.FalsePositiveRate || rate == 0 {
			t.Errorf("k=%d: false-positive rate %.3f, target %.2f", f.k, rate, tt.cfg.FalsePositiveRate)
		}
	}
}

// TestMaskAll: MaskAll gives every key the mask Mask gives it, on batches
// shorter and longer than its read-ahead, with keys present in several
// generations and grown sub-filters.
func TestMaskAll(t *testing.T) {
	f := mustNew(t, Config{KeysPerGeneration: 1000, FalsePositiveRate: 0.01, Generations: 4}, 0)
	var hs []partition.Hash
	for gen := uint64(0); gen < 4; gen++ {
		if gen > 0 {
			f.Advance(gen)
		}
		for j := uint64(0); j < 3000; j++ { // three times the sizing: grows
			h := key(nsPresent, gen*10_000+j)
			f.Add(h)
			if j%50 == 0 {
				hs = append(hs, h, key(nsAbsent, gen*10_000+j))
			}
		}
	}
	for _, n := range []int{0, 1, 7, 8, 9, maskAhead - 1, maskAhead, maskAhead + 1, len(hs)} {
		masks := make([]uint64, n)
		f.MaskAll(hs[:n], masks)
		for i := range n {
			if want := f.Mask(hs[i]); masks[i] != want {
				t.Fatalf("n=%d: key %d: mask %b, want %b", n, i, masks[i], want)
			}
		}
	}
}

// TestAddAll: AddAll leaves the filter exactly as Add does key by key (the
// saved bytes and the stats compared), on batches shorter and longer than
// its read-ahead, across sub-filter growth within a batch and across
// generations.
func TestAddAll(t *testing.T) {
	cfg := Config{KeysPerGeneration: 1000, FalsePositiveRate: 0.01, Generations: 3}
	one, all := mustNew(t, cfg, 0), mustNew(t, cfg, 0)
	next := uint64(0)
	for gen := uint64(0); gen < 5; gen++ {
		if gen > 0 {
			one.Advance(gen)
			all.Advance(gen)
		}
		for _, n := range []int{0, 1, 7, 8, 9, 500, 2600} { // 3117 keys: grows
			hs := make([]partition.Hash, n)
			for i := range hs {
				hs[i] = key(nsPresent, next)
				next++
			}
			for _, h := range hs {
				one.Add(h)
			}
			all.AddAll(hs)
		}
		var a, b bytes.Buffer
		if _, err := one.WriteTo(&a); err != nil {
			t.Fatal(err)
		}
		if _, err := all.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("generation %d: AddAll's filter differs from Add's (%v vs %v)", gen, all.Stats(), one.Stats())
		}
	}
	grew := false
	for _, g := range all.Stats() {
		grew = grew || g.SubFilters > 1
	}
	if !grew {
		t.Fatal("no generation grew: the test must cover growth inside a batch")
	}
}

// TestMaskAllAddIsMaskThenAdd: MaskAllAdd gives every key the mask Mask
// gives it one key at a time, adding each key whose mask is 0 (and whose
// hash is not zero) before the next is probed, and leaves the filter
// byte for byte as that sequence does: the same bits, counts and growth
// (the newest generation grows twice here), in the first sub-filter and in
// grown ones. Repeats inside a chunk, keys present in older generations
// and the zero hash are among the keys.
func TestMaskAllAddIsMaskThenAdd(t *testing.T) {
	cfg := Config{KeysPerGeneration: 2000, FalsePositiveRate: 0.01, Generations: 4}
	fused, ref := fillWindow(t, cfg), fillWindow(t, cfg)
	fused.Advance(fused.Current() + 1)
	ref.Advance(ref.Current() + 1)
	var hs []partition.Hash
	for i := range uint64(9000) {
		switch {
		case i%97 == 0:
			hs = append(hs, partition.Hash{}) // a dead-lettered record's
		case i%13 == 0:
			hs = append(hs, key(nsPresent, i)) // in an older generation
		case i%7 == 0 && i > 20:
			hs = append(hs, key(nsOther, i-5)) // a repeat, 5 keys later
		default:
			hs = append(hs, key(nsOther, i))
		}
	}
	masks, want := make([]uint64, 256), make([]uint64, 256)
	for lo := 0; lo < len(hs); lo += 256 {
		chunk := hs[lo:min(lo+256, len(hs))]
		fused.MaskAllAdd(chunk, masks)
		for i, h := range chunk {
			want[i] = ref.Mask(h)
			if want[i] == 0 && h != (partition.Hash{}) {
				ref.Add(h)
			}
			if masks[i] != want[i] {
				t.Fatalf("key %d: mask %b, want %b", lo+i, masks[i], want[i])
			}
		}
	}
	if n := len(fused.slots[fused.head].subs); n < 3 {
		t.Fatalf("newest generation has %d sub-filters, want it grown twice", n)
	}
	var a, b bytes.Buffer
	if _, err := fused.WriteTo(&a); err != nil {
		t.Fatal(err)
	}
	if _, err := ref.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("MaskAllAdd left other bits or counts than Mask then Add")
	}
	for i, h := range hs {
		if h != (partition.Hash{}) && !fused.Test(h) {
			t.Fatalf("key %d added but not found", i)
		}
	}
}
