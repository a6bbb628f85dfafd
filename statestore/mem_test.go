package statestore

import (
	"strings"
	"testing"

	"github.com/dedupstream/dedupstream/partition"
)

// BenchmarkMemPut inserts 1M fresh keys into a memIndex per round, in
// 10k-key commits: "grow" starts from an empty table as before (every
// doubling rehashes), "reused" reuses a table sized for the keys (as a
// handover does now); "touch" reads each group of 16 keys' slots before
// inserting them, "prefetch" prefetches the slot of the key 16 places
// ahead of each insert, "plain" does neither; "released" reuses an index
// whose pages were handed back, as the store's flushed indexes are, on
// huge pages ("released") or on 4 KiB pages ("released-4k").
func BenchmarkMemPut(b *testing.B) {
	const n = 1 << 20
	hs := make([]entry, n)
	for i := range hs {
		hs[i] = entry{gen: 3, h: keyOf(1, uint64(i))}
	}
	for _, v := range []struct {
		name   string
		reused bool
		mode   int
	}{{"grow/plain", false, memPlain}, {"grow/touch", false, memTouch}, {"grow/prefetch", false, memPrefetch},
		{"reused/plain", true, memPlain}, {"reused/touch", true, memTouch}, {"reused/prefetch", true, memPrefetch},
		{"released/touch", true, memTouch}, {"released/prefetch", true, memPrefetch},
		{"released-4k/prefetch", true, memPrefetch}} {
		b.Run(v.name, func(b *testing.B) {
			defer func(m int) { memPutMode = m }(memPutMode)
			memPutMode = v.mode
			if strings.HasPrefix(v.name, "released-4k/") {
				defer func(h bool) { hugeRegions = h }(hugeRegions)
				hugeRegions = false
			}
			m := newMemIndex(0, n)
			cpu := cpuTime()
			for b.Loop() {
				if v.reused {
					if strings.HasPrefix(v.name, "released") {
						m.release() // as a flushed index is: its pages handed back
					}
					m.reset(0)
				} else {
					m = newMemIndex(0, 0)
				}
				for i := 0; i < n; i += 10000 {
					m.putAll(hs[i:min(n, i+10000)])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
			b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N*n), "cpu-ns/key")
		})
	}
}

// TestMemIndex: last Put of a key wins, every key is found, absent keys are
// not, and the sorted copy holds each key once in order.
func TestMemIndex(t *testing.T) {
	m := newMemIndex(0, 0)
	var es []entry
	for i := uint64(0); i < 5000; i++ {
		es = append(es, entry{gen: i % 3, h: keyOf(1, i%2000), version: i})
	}
	m.putAll(es)
	want := map[[2]uint64]uint64{}
	for _, e := range es {
		want[[2]uint64{e.gen, e.h.Hi}] = e.version
	}
	if m.len() != len(want) {
		t.Fatalf("len %d, want %d", m.len(), len(want))
	}
	for _, e := range es {
		v, ok := m.get(e.gen, e.h)
		if !ok || v != want[[2]uint64{e.gen, e.h.Hi}] {
			t.Fatalf("get %v: %d %t", e, v, ok)
		}
	}
	if _, ok := m.get(7, partition.Hash{Hi: 1}); ok {
		t.Fatal("absent key found")
	}
	s := m.sorted(0, true)
	for i := 1; i < len(s); i++ {
		if compareMem(&s[i-1], &s[i]) >= 0 {
			t.Fatalf("sorted copy out of order at %d", i)
		}
	}
	var n uint64
	for g := uint64(0); g < 3; g++ {
		n += m.keysOf(g)
	}
	if n != uint64(len(want)) {
		t.Fatalf("per-generation counts sum to %d, want %d", n, len(want))
	}
}

// TestSortLoadedKeepsLastLoad: a bulk load may carry one key several times
// (a restore reads a key again after a replay); the last version loaded must
// win at every size, both below and above the small-sort cut-off of sortMem.
func TestSortLoadedKeepsLastLoad(t *testing.T) {
	for _, n := range []int{2, 13, 31, 63, 64, 65, 200, 5000, 3*loadChunkKeys + 5} {
		es := make([]entry, n)
		for i := range es {
			// Few distinct keys, each loaded many times with a rising version.
			k := uint64(i % 5)
			es[i] = entry{gen: 1 + k%2, h: keyOf(7, k), version: uint64(i + 1)}
		}
		last := map[memEntry]uint64{}
		for _, e := range es {
			last[memEntry{gen: e.gen, h: e.h}] = e.version
		}
		lb := &loadBuffer{}
		for len(es) > 0 { // in batches of up to 7, as Loads come
			k := min(len(es), 7)
			lb.add(es[:k])
			es = es[k:]
		}
		got := sortLoaded(lb)
		if len(got) != len(last) {
			t.Fatalf("n=%d: %d keys after sortLoaded, want %d", n, len(got), len(last))
		}
		for i, e := range got {
			if i > 0 && compareMem(&got[i-1], &got[i]) >= 0 {
				t.Fatalf("n=%d: entries %d and %d out of order", n, i-1, i)
			}
			if want := last[memEntry{gen: e.gen, h: e.h}]; e.version != want {
				t.Fatalf("n=%d: gen %d hash %v kept version %d, want the last loaded %d", n, e.gen, e.h, e.version, want)
			}
		}
	}
}

// TestMemSortRefs: the flusher's sorted references name every key of the
// index once, in (generation, hash) order, at sizes below and above the
// counting pass's bucket limit, with many hashes sharing the 32 bits a
// reference carries (so the order falls to the entries) and buffers reused
// from a larger sort.
func TestMemSortRefs(t *testing.T) {
	var refs []uint64
	var counts []int
	for _, n := range []int{0, 1, 7, 1000, 70000, 3000} {
		m := newMemIndex(0, 0)
		es := make([]entry, n)
		for i := range es {
			h := keyOf(3, uint64(i))
			if i%3 == 0 {
				h.Hi = h.Hi&0xFFFFFFFF00000000 | uint64(i%7) // shared top bits
				h.Hi &^= 0x00000FFF00000000
			}
			es[i] = entry{gen: uint64(5 + i%4), h: h, version: uint64(i)}
		}
		m.putAll(es)
		refs, counts = m.sortRefs(refs, counts)
		want := m.sorted(0, true)
		if len(refs) != len(want) {
			t.Fatalf("n=%d: %d references, want %d", n, len(refs), len(want))
		}
		got := make([]memEntry, len(refs))
		m.gatherRefs(got, refs)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("n=%d: reference %d is %+v, want %+v", n, i, got[i], want[i])
			}
		}
	}
}

// TestMemIndexHandoverRoom: an index sized for memKeys keys takes the
// Commit that reaches memKeys without growing its table, even when that
// Commit brings a fifth as many keys again (a growth rehashed the whole
// index and doubled its table for every later reuse).
func TestMemIndexHandoverRoom(t *testing.T) {
	keys := memKeysFor(4<<20, false)
	m := newMemIndex(0, keys)
	slots := len(m.slots)
	var es []entry
	for i := range keys - 1 {
		es = append(es, entry{gen: 1, h: keyOf(5, i)})
	}
	m.putAll(es)
	es = es[:0]
	for i := range keys / 5 {
		es = append(es, entry{gen: 1, h: keyOf(6, i)})
	}
	m.putAll(es)
	if len(m.slots) != slots {
		t.Fatalf("table grew from %d to %d slots with %d keys (sized for %d)", slots, len(m.slots), m.len(), keys)
	}
	if uint64(m.len()) != keys-1+keys/5 {
		t.Fatalf("%d keys, want %d", m.len(), keys-1+keys/5)
	}
}

// BenchmarkFlushSort is a flush's work before the run writer: sortRefs of a
// full index (1M keys of one generation, as the sweep's flushes) and the
// gather of its entries in hash order, with gatherRefs prefetching ahead
// ("prefetch") or not ("plain"). CPU per key.
func BenchmarkFlushSort(b *testing.B) {
	const n = 1 << 20
	es := make([]entry, n)
	for i := range es {
		es[i] = entry{gen: 3, h: keyOf(2, uint64(i))}
	}
	m := newMemIndex(0, n)
	m.putAll(es)
	refs := make([]uint64, n)
	var counts []int
	dst := make([]memEntry, memGatherLen)
	for _, pf := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "prefetch"}[pf]
		b.Run(name, func(b *testing.B) {
			defer func(v bool) { memGatherPrefetch = v }(memGatherPrefetch)
			memGatherPrefetch = pf
			cpu := cpuTime()
			for b.Loop() {
				refs, counts = m.sortRefs(refs, counts)
				for lo := 0; lo < n; lo += memGatherLen {
					m.gatherRefs(dst, refs[lo:lo+memGatherLen])
				}
			}
			if last := dst[len(dst)-1]; !m.has(last) {
				b.Fatalf("gathered entry %v is not in the index", last)
			}
			b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N*n), "cpu-ns/key")
		})
	}
}

// has reports whether m holds e's key.
func (m *memIndex) has(e memEntry) bool {
	_, ok := m.get(e.gen, e.h)
	return ok
}
