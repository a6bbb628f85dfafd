//go:build linux

package statestore

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// allocRegion returns n bytes of zeroed memory outside the Go heap (an
// anonymous private mapping; pages become resident as they are touched),
// registered as holding kind (OffHeap).
func allocRegion(n int, kind MemKind) []byte {
	if n == 0 {
		return nil
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		// As the Go heap does when the system has no memory left.
		panic(fmt.Sprintf("statestore: map %d bytes for %s: %v", n, kind, err))
	}
	registerRegion(b, kind)
	return b
}

// releaseRegion returns r's pages to the operating system; r stays mapped
// and reads as zeros.
func releaseRegion(r []byte) {
	if len(r) > 0 {
		_ = syscall.Madvise(r, syscall.MADV_DONTNEED)
	}
}

// freeRegion unmaps r.
func freeRegion(r []byte) {
	if len(r) > 0 {
		regions.Lock()
		delete(regions.m, unsafe.SliceData(r))
		regions.Unlock()
		_ = syscall.Munmap(r)
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
