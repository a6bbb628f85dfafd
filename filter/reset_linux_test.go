package filter

import (
	"syscall"
	"testing"
	"unsafe"
)

// residentPages counts the pages of b that are in memory (mincore).
func residentPages(t *testing.T, b []byte) int {
	t.Helper()
	page := syscall.Getpagesize()
	vec := make([]byte, (len(b)+page-1)/page)
	_, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if errno != 0 {
		t.Skipf("mincore: %v", errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestAdvanceLeavesEmptyBitsetsUntouched: a generation that never held a
// key is not written when the window rotates over it, so a young window
// (a new job) does not fault in the pages of sub-filters it never used;
// one that held keys is cleared (TestAdvanceClearsReusedBitsets).
func TestAdvanceLeavesEmptyBitsetsUntouched(t *testing.T) {
	// Sub-filters of 2 MiB and more are mapped outside the Go heap
	// (arena.alloc), so their residency is theirs alone.
	cfg := Config{KeysPerGeneration: 4_000_000, FalsePositiveRate: 0.01, Generations: 4}
	f := mustNew(t, cfg, 10)
	if len(f.mem.maps) != cfg.Generations {
		t.Skipf("bitsets not mapped (%d mappings)", len(f.mem.maps))
	}
	resident := func() int {
		n := 0
		for _, m := range f.mem.maps {
			n += residentPages(t, m.raw)
		}
		return n
	}
	if n := resident(); n != 0 {
		t.Fatalf("a new filter has %d resident pages, want 0", n)
	}
	f.Add(key(nsPresent, 1)) // one page of the newest generation
	one := resident()
	f.Advance(11)
	f.Advance(13)
	if n := resident(); n != one {
		t.Errorf("after rotating over generations that never held a key: %d resident pages, want %d", n, one)
	}
	if !f.Test(key(nsPresent, 1)) {
		t.Error("a key of a live generation is gone")
	}
	f.Advance(20) // every generation dropped, the one with the key cleared
	if f.Test(key(nsPresent, 1)) {
		t.Error("a key of a dropped generation is still found")
	}
}
