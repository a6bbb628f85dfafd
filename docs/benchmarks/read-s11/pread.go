//go:build ignore

// pread.go: CPU per pread of a store-sized block from the page cache, as a
// confirming read at 100M keys does it (random blocks in 2 GiB of 16 MiB
// files, written just before, so cached), by read size and alignment.
// Run: go run docs/benchmarks/read-s11/pread.go [DIR] (DIR: /tmp).
package main

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
)

func threadCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_THREAD, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func main() {
	runtime.LockOSThread() // RUSAGE_THREAD counts this thread only
	dir := "/tmp"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	const files, size, reads = 128, 16 << 20, 200000
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	fs := make([]*os.File, files)
	for i := range fs {
		p := filepath.Join(dir, fmt.Sprintf("pread-bench-%d", i))
		f, err := os.Create(p)
		if err != nil {
			panic(err)
		}
		defer os.Remove(p)
		defer f.Close()
		for w := 0; w < size; w += len(buf) {
			if _, err := f.Write(buf); err != nil {
				panic(err)
			}
		}
		fs[i] = f
	}
	r := rand.New(rand.NewSource(1))
	offs, which := make([]int64, reads), make([]int, reads)
	for i := range offs {
		offs[i], which[i] = r.Int63n(size-8192), r.Intn(files)
	}
	for round := range 3 {
		// 4101: a 4 KiB data block and its 5-byte trailer (always two
		// pages); 4096 page-aligned: one page.
		for _, n := range []int{4101, 2053, 1029, 4096} {
			b := make([]byte, n)
			c := threadCPU()
			for i, o := range offs {
				if n == 4096 {
					o &^= 4095
				}
				if _, err := fs[which[i]].ReadAt(b, o); err != nil {
					panic(err)
				}
			}
			fmt.Printf("round %d: pread of %d bytes: %.0f ns of CPU per read\n", round, n, float64(threadCPU()-c)/reads)
		}
	}
}
