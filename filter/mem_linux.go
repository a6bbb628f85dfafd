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
func mapWords(n int) (raw []byte, words []uint64, ok bool) {
	size := (n*8 + hugePageSize - 1) &^ (hugePageSize - 1)
	raw, err := syscall.Mmap(-1, 0, size+hugePageSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, nil, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(raw)))
	off := int((hugePageSize - base%hugePageSize) % hugePageSize)
	_ = syscall.Madvise(raw[off:off+size], syscall.MADV_HUGEPAGE)
	return raw, unsafe.Slice((*uint64)(unsafe.Pointer(&raw[off])), n), true
}

func unmap(raw []byte) { _ = syscall.Munmap(raw) }
