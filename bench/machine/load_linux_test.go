package machine

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"unsafe"
)

// BenchmarkRandomLoad chases a pointer through every cache line of a set
// of the given size in a random cyclic order: each load's address is the
// previous load's value, so no two overlap and ns/op is one load's latency.
func BenchmarkRandomLoad(b *testing.B) {
	for _, mib := range []int{4, 32, 256, 2048} {
		for _, huge := range []bool{true, false} {
			pages := "4KiB"
			if huge {
				pages = "huge"
			}
			b.Run(fmt.Sprintf("set=%dMiB/pages=%s", mib, pages), func(b *testing.B) {
				words := chain(b, mib<<20, huge)
				var p uint64
				for b.Loop() {
					p = words[p]
				}
				sink = p
			})
		}
	}
}

var sink uint64

// chain maps n bytes at a 2 MiB boundary, advised for huge pages or
// against them, and links its cache lines into one random cycle: the first
// word of each line holds the index of the next line's first word.
func chain(b *testing.B, n int, huge bool) []uint64 {
	const align = 2 << 20
	raw, err := syscall.Mmap(-1, 0, n+align, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = syscall.Munmap(raw) })
	off := (align - int(uintptr(unsafe.Pointer(&raw[0])))%align) % align
	set := raw[off : off+n]
	advice := syscall.MADV_NOHUGEPAGE
	if huge {
		advice = syscall.MADV_HUGEPAGE
	}
	if err := syscall.Madvise(set, advice); err != nil {
		b.Skipf("madvise: %v", err)
	}
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&set[0])), n/8)
	lines := n / 64
	order := rand.Perm(lines)
	for i, l := range order {
		words[l*8] = uint64(order[(i+1)%lines] * 8)
	}
	return words
}
