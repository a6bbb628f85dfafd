package filter

import (
	"bytes"
	"testing"

	"github.com/dedupstream/dedupstream/partition"
)

// TestProbesOnlyFilledGenerations: the probe loops read the generations
// that hold a key and no others, and a generation's first key (through
// Add, AddTo, AddAll or MaskAllAdd) is found at once, with its
// generation's bit, including after a rotation and a snapshot round trip.
func TestProbesOnlyFilledGenerations(t *testing.T) {
	cfg := Config{KeysPerGeneration: 1000, FalsePositiveRate: 0.01, Generations: 4}
	probed := func(f *Filter) []uint64 {
		var gens []uint64
		for i := range f.live {
			for age := range f.nlive {
				if f.liveBit[i] == 1<<age {
					gens = append(gens, f.cur-uint64(age))
				}
			}
		}
		return gens
	}
	want := func(t *testing.T, f *Filter, gens ...uint64) {
		t.Helper()
		got := probed(f)
		if len(got) != len(gens) {
			t.Fatalf("probed generations %v, want %v", got, gens)
		}
		for i := range gens {
			if got[i] != gens[i] {
				t.Fatalf("probed generations %v, want %v", got, gens)
			}
		}
	}
	found := func(t *testing.T, f *Filter, h partition.Hash, gen uint64) {
		t.Helper()
		if m := f.Mask(h); m&(1<<(f.cur-gen)) == 0 {
			t.Fatalf("key added to generation %d: mask %b (current %d)", gen, m, f.cur)
		}
		var masks [1]uint64
		f.MaskAll([]partition.Hash{h}, masks[:])
		if masks[0]&(1<<(f.cur-gen)) == 0 {
			t.Fatalf("key added to generation %d: MaskAll mask %b (current %d)", gen, masks[0], f.cur)
		}
	}

	f := mustNew(t, cfg, 10)
	want(t, f)
	if f.Test(key(nsAbsent, 0)) {
		t.Fatal("an empty filter matched")
	}
	f.AddTo(8, key(nsPresent, 1))
	want(t, f, 8)
	found(t, f, key(nsPresent, 1), 8)

	f.Add(key(nsPresent, 2))
	want(t, f, 10, 8)
	found(t, f, key(nsPresent, 2), 10)

	f.Advance(11) // the new newest generation is empty
	want(t, f, 10, 8)
	found(t, f, key(nsPresent, 1), 8)
	var masks [2]uint64
	f.MaskAllAdd([]partition.Hash{key(nsPresent, 3), key(nsPresent, 3)}, masks[:])
	if masks[0] != 0 || masks[1] != 1 {
		t.Fatalf("MaskAllAdd of a new key twice: masks %b, %b; want 0, 1", masks[0], masks[1])
	}
	want(t, f, 11, 10, 8)

	f.Advance(12)
	f.AddAll([]partition.Hash{key(nsPresent, 4)})
	want(t, f, 12, 11, 10) // 8 left the window
	found(t, f, key(nsPresent, 4), 12)

	f.Advance(14) // 13 and 14 empty, 11 and 12 live
	want(t, f, 12, 11)
	g, err := ReadFrom(bytes.NewReader(snapshotBytes(t, f)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want(t, g, 12, 11)
	found(t, g, key(nsPresent, 4), 12)
	found(t, g, key(nsPresent, 3), 11)
}
