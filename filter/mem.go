package filter

import (
	"sync/atomic"
	"unsafe"
)

// hugePageSize is the size of a transparent huge page on the platforms
// that have them (2 MiB on amd64 and arm64 Linux).
const hugePageSize = 2 << 20

// hugeSpan is how many of a bitset's n bytes, from its start at a
// huge-page boundary, are advised to huge pages: its whole huge pages.
func hugeSpan(n int) int { return n &^ (hugePageSize - 1) }

// mapBitsets selects where bitsets of hugePageSize bytes or more live: in
// their own anonymous mappings backed by transparent huge pages (true, the
// default on Linux), or in the Go heap. Benchmarks switch it to compare
// the two in one run.
var mapBitsets = true

// arena owns the bitsets of one Filter that live outside the Go heap.
//
// A probe on a window of 100M keys reads a random cache line of a bitset
// of about 165 MB per key and generation. With 4 KiB pages that is also a
// miss in the TLB, whose 2048 entries cover 8 MiB, and a page-table walk
// per probe; 2 MiB pages cover the same bitset with about 80 entries. The
// Go heap is not backed by huge pages when the system's setting is
// "madvise" (the common default), so large bitsets are mapped here and
// advised with MADV_HUGEPAGE (mem_linux.go); elsewhere, and for small
// bitsets, they are ordinary slices.
//
// Mapped bitsets are unmapped when their sub-filter is dropped (a grown
// sub-filter whose generation leaves the window) and, for the rest, when
// the Filter becomes unreachable (a cleanup registered by newFilter). The
// Filter's methods that read or write bitsets keep the Filter reachable
// until they return (runtime.KeepAlive), so the memory is never unmapped
// under them. Nothing outside the package sees a bitset.
type arena struct {
	maps  []mapping
	bytes atomic.Int64 // of the mappings, for tests (the cleanup runs on another goroutine)
}

// mapping is one mapped bitset: raw is the whole mapping, words the part
// the bitset uses.
type mapping struct {
	raw   []byte
	words unsafe.Pointer
}

// alloc returns n zeroed words.
func (a *arena) alloc(n int) []uint64 {
	if !mapBitsets || n*8 < hugePageSize {
		return make([]uint64, n)
	}
	raw, words, ok := mapWords(n)
	if !ok {
		return make([]uint64, n)
	}
	a.maps = append(a.maps, mapping{raw: raw, words: unsafe.Pointer(unsafe.SliceData(words))})
	a.bytes.Add(int64(len(raw)))
	return words
}

// free releases words, allocated by alloc, if it is mapped; the caller
// drops every reference to it.
func (a *arena) free(words []uint64) {
	p := unsafe.Pointer(unsafe.SliceData(words))
	for i, m := range a.maps {
		if m.words == p {
			unmap(m.raw)
			a.bytes.Add(-int64(len(m.raw)))
			a.maps = append(a.maps[:i], a.maps[i+1:]...)
			return
		}
	}
}

// owns reports whether words is one of the arena's mapped bitsets.
func (a *arena) owns(words []uint64) bool {
	p := unsafe.Pointer(unsafe.SliceData(words))
	for _, m := range a.maps {
		if m.words == p {
			return true
		}
	}
	return false
}

// release unmaps every bitset of the arena: its Filter is unreachable.
func (a *arena) release() {
	for _, m := range a.maps {
		unmap(m.raw)
		a.bytes.Add(-int64(len(m.raw)))
	}
	a.maps = nil
}

// mapped returns the bytes of the arena's mapped bitsets.
func (a *arena) mapped() int { return int(a.bytes.Load()) }
