package pipeline

import (
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"syscall"
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

// BenchmarkCollapseFreshTable: a cycle of 50000 keys into a collapse set
// whose memory the operating system has just taken back (a new stage, or
// the collector's scavenger after a larger cycle), so its table's pages
// are all new; ns/op and faults/op per cycle.
func BenchmarkCollapseFreshTable(b *testing.B) {
	const n = 50_000
	hs := make([]partition.Hash, n)
	for i := range hs {
		hs[i] = partition.Hash{Hi: uint64(i) * 0x9E3779B97F4A7C15, Lo: uint64(i)*0xBF58476D1CE4E5B9 + 1}
	}
	var faults int64
	for b.Loop() {
		b.StopTimer()
		debug.FreeOSMemory()
		var ru0 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
		b.StartTimer()
		var c collapseSet
		c.reserve(n)
		for i := range hs {
			if c.get(hs[i]) == nil {
				c.set(hs[i], pending{gen: 1})
			}
		}
		b.StopTimer()
		var ru1 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		faults += ru1.Minflt - ru0.Minflt
		b.StartTimer()
	}
	b.ReportMetric(float64(faults)/float64(b.N), "faults/op")
}

// TestCollapseResizeWritesTable: a resized table is resident once resize
// returns (written, not just mapped), so the probes of the cycle after
// it do not read new pages first and fault each of them twice. Reading
// the whole new table, made from memory just handed back to the
// operating system, faults (almost) no page.
func TestCollapseResizeWritesTable(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("page faults are counted on Linux")
	}
	var c collapseSet
	debug.FreeOSMemory()
	c.resize(1 << 18) // 2 MiB, 512 pages
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	var sum uint64
	for i := 0; i < len(c.slots); i += 512 {
		sum += c.slots[i]
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	if n := ru1.Minflt - ru0.Minflt; n > 64 || sum != 0 {
		t.Fatalf("reading a resized table of %d pages faulted %d times (sum %d)", len(c.slots)*8/4096, n, sum)
	}
}
