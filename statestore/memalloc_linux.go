//go:build linux

package statestore

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// hugePageBytes is the size of a transparent huge page on amd64 and arm64
// (with 4 KiB base pages).
const hugePageBytes = 2 << 20

// hugeRegions switches the huge-page advice off for BenchmarkMemPut's
// comparison.
var hugeRegions = true

// allocRegion returns n bytes of zeroed memory outside the Go heap (an
// anonymous private mapping; pages become resident as they are touched,
// a run filter's all at once), registered as holding kind (OffHeap).
//
// A region of 2 MiB or more that is not a run filter starts at a huge-page
// boundary and is advised MADV_HUGEPAGE: the indexes are released after
// every flush and filled again from zero, and with 4 KiB
// pages every page of them faulted on its first write after each release
// (BenchmarkMemPut "released": about 6 us a fault on this machine, twice
// the cost of inserting into pages kept resident). Their pages are all
// written as the index fills, so a huge page keeps at most the last,
// partly filled 2 MiB of a region resident early. Run filters are sized
// per run and many are far smaller than their last huge page would be.
func allocRegion(n int, kind MemKind) []byte {
	if n == 0 {
		return nil
	}
	huge := hugeRegions && n >= hugePageBytes && kind != MemRunFilters && kind != MemRunFences
	size := n
	if huge {
		size += hugePageBytes // room to start at a boundary; the slack is never touched
	}
	flags := syscall.MAP_ANON | syscall.MAP_PRIVATE
	if kind == MemRunFilters {
		// Every page is written as the run is, each after a read of its
		// word: faulted on that read, a page was the shared zero page and
		// its write then faulted again, flushing its mapping on the other
		// CPUs (an interrupt of the stage for each 4 KiB of a run's filter).
		flags |= syscall.MAP_POPULATE
	}
	raw, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, flags)
	if err != nil {
		// As the Go heap does when the system has no memory left.
		panic(fmt.Sprintf("statestore: map %d bytes for %s: %v", n, kind, err))
	}
	b := raw[:n:n]
	if huge {
		base := uintptr(unsafe.Pointer(unsafe.SliceData(raw)))
		off := int((hugePageBytes - base%hugePageBytes) % hugePageBytes)
		b = raw[off : off+n : off+n]
		_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) // without huge pages: ordinary ones
	}
	registerRegion(b, raw, kind)
	return b
}

// releaseRegion returns r's pages to the operating system; r stays mapped
// and reads as zeros.
func releaseRegion(r []byte) {
	if len(r) > 0 {
		_ = syscall.Madvise(r, syscall.MADV_DONTNEED)
	}
}

// freeRegion unmaps r, a region allocRegion returned.
func freeRegion(r []byte) {
	if len(r) > 0 {
		regions.Lock()
		ri := regions.m[unsafe.SliceData(r)]
		delete(regions.m, unsafe.SliceData(r))
		regions.Unlock()
		_ = syscall.Munmap(ri.raw)
	}
}

// residentBytes returns how many bytes of the mapped r are in RAM
// (mincore); 0 if the kernel does not answer.
func residentBytes(r []byte) int {
	page := os.Getpagesize()
	var vec [4096]byte
	n := 0
	for off := 0; off < len(r); off += len(vec) * page {
		end := min(len(r), off+len(vec)*page)
		pages := (end - off + page - 1) / page
		_, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&r[off])), uintptr(end-off), uintptr(unsafe.Pointer(&vec[0])))
		if errno != 0 {
			return 0
		}
		for _, v := range vec[:pages] {
			n += int(v & 1)
		}
	}
	return n * page
}
