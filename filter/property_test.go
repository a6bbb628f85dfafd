package filter

import (
	"bytes"
	"github.com/dedupstream/dedupstream/partition"
	"math"
	"math/bits"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestNoFalseNegativesModel drives a filter with random Add, AddTo, Advance
// (including jumps over several generations and steps back) and snapshot
// round trips, against a model of which key went into which generation. After
// every action: every key added to a live generation tests positive and lists
// that generation among its Candidates; Candidates are live, distinct and
// newest first; a dropped generation never appears again; a generation
// nothing was added to since it became live has no bit set. Keys per
// generation exceed KeysPerGeneration often, so generations grow
// sub-filters; the bits counted as they are set match the bitsets and
// growth stays within its limit.
func TestNoFalseNegativesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := Config{
			KeysPerGeneration: uint(rapid.IntRange(1, 50).Draw(t, "keysPerGeneration")),
			FalsePositiveRate: rapid.SampledFrom([]float64{0.6, 0.5, 0.1, 0.01}).Draw(t, "falsePositiveRate"),
			Generations:       rapid.IntRange(1, 6).Draw(t, "generations"),
		}
		start := rapid.OneOf(
			rapid.Uint64Range(0, 8),
			rapid.Uint64Range(1<<40, 1<<40+8),
			rapid.Uint64Range(math.MaxUint64-40, math.MaxUint64-30),
		).Draw(t, "start")
		f, err := New(cfg, start)
		if err != nil {
			t.Fatal(err)
		}
		G := uint64(cfg.Generations)
		type entry struct {
			key int
			gen uint64
		}
		added := map[entry]bool{}    // model: key i was added to generation gen
		calls := map[uint64]uint64{} // model: Add/AddTo calls per generation
		cur := start
		modelLive := func(g uint64) bool { return g <= cur && cur-g < G }
		keyGen := rapid.IntRange(0, 300)
		var dst []uint64

		t.Repeat(map[string]func(*rapid.T){
			"Add": func(t *rapid.T) {
				k := keyGen.Draw(t, "key")
				f.Add(key(nsPresent, uint64(k)))
				added[entry{k, cur}] = true
				calls[cur]++
			},
			// What the stage calls: a chunk probed, its new keys (mask 0)
			// added to the newest generation as they are probed. A key
			// repeated in the chunk is new only the first time.
			"MaskAllAdd": func(t *rapid.T) {
				ks := rapid.SliceOfN(keyGen, 1, 20).Draw(t, "keys")
				hs := make([]partition.Hash, len(ks))
				for i, k := range ks {
					hs[i] = key(nsPresent, uint64(k))
				}
				masks := make([]uint64, len(hs))
				f.MaskAllAdd(hs, masks)
				for i, k := range ks {
					for e := range added {
						if e.key == k && modelLive(e.gen) && masks[i]&(1<<(cur-e.gen)) == 0 {
							t.Fatalf("MaskAllAdd: key %d, added to live generation %d, mask %b (current %d)", k, e.gen, masks[i], cur)
						}
					}
					if masks[i] == 0 {
						added[entry{k, cur}] = true
						calls[cur]++
					}
				}
			},
			"AddTo": func(t *rapid.T) {
				k := keyGen.Draw(t, "key")
				back := rapid.Uint64Range(0, G+2).Draw(t, "back")
				ahead := rapid.Uint64Range(0, 2).Draw(t, "ahead")
				g := cur - min(back, cur)
				if back == 0 && cur <= math.MaxUint64-ahead {
					g = cur + ahead
				}
				ok := f.AddTo(g, key(nsPresent, uint64(k)))
				if ok != modelLive(g) {
					t.Fatalf("AddTo(%d) = %v with current %d, live %v", g, ok, cur, modelLive(g))
				}
				if ok {
					added[entry{k, g}] = true
					calls[g]++
				}
			},
			"Advance": func(t *rapid.T) {
				step := rapid.Uint64Range(0, 2*G+2).Draw(t, "step")
				if cur > math.MaxUint64-step {
					t.Skip("would overflow")
				}
				cur += step
				f.Advance(cur)
			},
			"AdvanceBack": func(t *rapid.T) {
				back := rapid.Uint64Range(1, 3).Draw(t, "back")
				if back > cur {
					t.Skip("below zero")
				}
				f.Advance(cur - back) // ignored
			},
			"Snapshot": func(t *rapid.T) {
				tag := rapid.Uint64().Draw(t, "tag")
				f.SetTag(tag)
				var buf bytes.Buffer
				n, err := f.WriteTo(&buf)
				if err != nil || n != int64(buf.Len()) {
					t.Fatalf("WriteTo = %d, %v; wrote %d", n, err, buf.Len())
				}
				g, err := ReadFrom(&buf, cfg)
				if err != nil {
					t.Fatalf("ReadFrom: %v", err)
				}
				if g.Tag() != tag || buf.Len() != 0 {
					t.Fatalf("ReadFrom: tag %d, %d bytes left", g.Tag(), buf.Len())
				}
				f = g
			},
			"": func(t *rapid.T) {
				if f.Current() != cur {
					t.Fatalf("Current() = %d, model %d", f.Current(), cur)
				}
				for e := range added {
					h := key(nsPresent, uint64(e.key))
					dst = f.Candidates(h, dst[:0])
					if !modelLive(e.gen) {
						if slices.Contains(dst, e.gen) {
							t.Fatalf("key %d: dropped generation %d in Candidates %v (current %d)", e.key, e.gen, dst, cur)
						}
						delete(added, e)
						continue
					}
					if !f.Test(h) {
						t.Fatalf("false negative: key %d added to live generation %d, current %d", e.key, e.gen, cur)
					}
					if !slices.Contains(dst, e.gen) {
						t.Fatalf("key %d added to live generation %d missing from Candidates %v (current %d)", e.key, e.gen, dst, cur)
					}
					for i, g := range dst {
						if !modelLive(g) || (i > 0 && g >= dst[i-1]) {
							t.Fatalf("Candidates %v: not live, distinct and newest first (current %d)", dst, cur)
						}
					}
				}
				for idx := range f.slots {
					sl := &f.slots[idx]
					if n := len(sl.subs); n > cfg.maxSubs() || (n > 1) != (f.grown&(1<<idx) != 0) || &f.rows[0] != &sl.subs[0].words[0] || sl.subs[0].lane != uint64(idx)*f.bw {
						t.Fatalf("slot %d: %d sub-filters (limit %d), grown mask %b, first sub-filter in lane %d of the rows %v", idx, n, cfg.maxSubs(), f.grown, sl.subs[0].lane, &f.rows[0] == &sl.subs[0].words[0])
					}
					for j := range sl.subs {
						if sb := &sl.subs[j]; sb.ones != onesOf(sb) {
							t.Fatalf("slot %d sub-filter %d: %d bits counted, %d set", idx, j, sb.ones, onesOf(sb))
						}
					}
				}
				for _, s := range f.Stats() {
					if !modelLive(s.Gen) || s.Added != calls[s.Gen] {
						t.Fatalf("Stats: generation %d added %d, model live %v added %d", s.Gen, s.Added, modelLive(s.Gen), calls[s.Gen])
					}
					if calls[s.Gen] == 0 && s.FillRatio != 0 {
						t.Fatalf("generation %d: nothing added but fill %.4f: reused bitset not cleared", s.Gen, s.FillRatio)
					}
				}
			},
		})
	})
}

// onesOf counts the bits set in s's blocks, and only there.
func onesOf(s *sub) uint64 {
	var n int
	for _, w := range blocksOf(s) {
		n += bits.OnesCount64(w)
	}
	return uint64(n)
}
