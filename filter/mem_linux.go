package filter

import (
	"syscall"
	"unsafe"
)

// mapWords maps n zeroed words at a huge-page boundary and advises the
// kernel to back them with transparent huge pages (MADV_HUGEPAGE, which
// the "madvise" setting of /sys/kernel/mm/transparent_hugepage/enabled
// requires). The mapping is one huge page longer than needed so that the
// words can start at a boundary; the slack is never touched, so it costs
// address space, not memory. ok is false if the mapping failed; the
// caller then uses the Go heap. A failed madvise (huge pages disabled)
// leaves ordinary pages.
//
// Only the whole huge pages of the words are advised (hugeSpan): the last,
// partial one is left to ordinary pages, which hold what the bitset uses
// of it and nothing more. Advised up to the next boundary, a bitset's
// tail was a whole huge page as soon as it was written: at 100M keys the
// fronts' sub-filters kept 12 MiB resident beyond their 205 MiB of bits
// (0.12 bytes per key, docs/benchmarks.md "Memory at 100M, session 9").
// A probe of the tail pays a page-table walk, on a few percent of a
// large bitset's bytes.
func mapWords(n int) (raw []byte, words []uint64, ok bool) {
	size := (n*8 + hugePageSize - 1) &^ (hugePageSize - 1)
	raw, err := syscall.Mmap(-1, 0, size+hugePageSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, nil, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(raw)))
	off := int((hugePageSize - base%hugePageSize) % hugePageSize)
	if h := hugeSpan(n * 8); h > 0 {
		_ = syscall.Madvise(raw[off:off+h], syscall.MADV_HUGEPAGE)
	}
	return raw, unsafe.Slice((*uint64)(unsafe.Pointer(&raw[off])), n), true
}

func unmap(raw []byte) { _ = syscall.Munmap(raw) }
