package pipeline

import (
	"math/rand/v2"
	"testing"

	"github.com/dedupstream/dedupstream/partition"
)

// TestCollapseSetMatchesMap runs random sets, gets and resets against a Go
// map. Keys come from a small pool, so most sets replace an entry; some
// pairs share Lo (one slot hash) and differ in Hi only, so probing past a
// fingerprint match is exercised. Cycles grow past several table sizes.
func TestCollapseSetMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var c collapseSet
	model := map[partition.Hash]pending{}
	for cycle := range 40 {
		pool := 1 + rng.IntN(20_000)
		ops := rng.IntN(3 * pool)
		for range ops {
			x := rng.Uint64N(uint64(pool))
			h := partition.Hash{Hi: x, Lo: x / 2 * 0x9E3779B97F4A7C15}
			if rng.IntN(2) == 0 {
				p := pending{gen: rng.Uint64N(8), version: rng.Uint64()}
				c.set(h, p)
				model[h] = p
				continue
			}
			got := c.get(h)
			want, ok := model[h]
			if (got != nil) != ok || (ok && *got != want) {
				t.Fatalf("cycle %d: get %v = %v, want %v (present %t)", cycle, h, got, want, ok)
			}
		}
		if c.len() != len(model) {
			t.Fatalf("cycle %d: len %d, want %d", cycle, c.len(), len(model))
		}
		seen := map[partition.Hash]bool{}
		for _, e := range c.entries {
			if seen[e.h] || model[e.h] != e.pending {
				t.Fatalf("cycle %d: entry %v %v: duplicate or stale (model %v)", cycle, e.h, e.pending, model[e.h])
			}
			seen[e.h] = true
		}
		c.reset()
		clear(model)
		if c.len() != 0 || c.get(partition.Hash{Lo: 1}) != nil {
			t.Fatalf("cycle %d: not empty after reset", cycle)
		}
	}
}

// TestCollapseSetReusesMemory: after the first cycles, a cycle of the same
// size allocates nothing.
func TestCollapseSetReusesMemory(t *testing.T) {
	var c collapseSet
	fill := func() {
		for i := range uint64(10_000) {
			c.set(partition.Hash{Hi: i, Lo: i * 0x9E3779B97F4A7C15}, pending{gen: 1})
		}
		c.reset()
	}
	fill()
	if n := testing.AllocsPerRun(3, fill); n != 0 {
		t.Fatalf("a reused cycle allocates %.0f times", n)
	}
}

// TestCollapseSetReserve: after reserve(n), n new keys go in without the
// table or the entries moving (one rehash for a batch, not one per
// doubling), and every key is found, also the ones set before reserve.
func TestCollapseSetReserve(t *testing.T) {
	var c collapseSet
	key := func(i int) partition.Hash { return partition.Hash{Hi: uint64(i), Lo: uint64(i) * 0x9E3779B97F4A7C15} }
	for i := range 700 {
		c.set(key(i), pending{gen: uint64(i)})
	}
	for _, n := range []int{1, 5_000, 40_000} {
		c.reserve(n)
		slots, entries := &c.slots[0], &c.entries[:1][0]
		base := c.len()
		for i := base; i < base+n; i++ {
			c.set(key(i), pending{gen: uint64(i)})
		}
		if &c.slots[0] != slots || &c.entries[0] != entries {
			t.Errorf("reserve(%d) then %d new keys: the table or the entries were reallocated", n, n)
		}
		for i := range c.len() {
			if p := c.get(key(i)); p == nil || p.gen != uint64(i) {
				t.Fatalf("key %d lost after reserve(%d)", i, n)
			}
		}
	}
}
