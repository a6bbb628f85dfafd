//go:build linux

package statestore

import (
	"fmt"
	"syscall"
)

// allocRegion returns n bytes of zeroed memory outside the Go heap (an
// anonymous private mapping; pages become resident as they are touched).
func allocRegion(n int) []byte {
	if n == 0 {
		return nil
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		// As the Go heap does when the system has no memory left.
		panic(fmt.Sprintf("statestore: map %d bytes for an index of recent keys: %v", n, err))
	}
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
		_ = syscall.Munmap(r)
	}
}
