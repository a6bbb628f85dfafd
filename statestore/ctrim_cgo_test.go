//go:build linux && cgo

package statestore

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/dedupstream/dedupstream/partition"
)

// rssBytes is the process's resident memory (VmRSS).
func rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestTrimReturnsFreedCMemory: the blocks a closed store's cache held are
// C memory that glibc keeps free in its arenas; trimCHeap gives their
// pages back to the operating system (RSS drops by a good part of it: 47-80 %
// measured in session 7; in session 9, at load 30, 29-32 % with glibc's
// default arenas and 19-51 % with two (cArenaMax): pages that also hold
// live chunks stay, and free chunks already trimmed count as free without
// being resident), at most once a second. A trim that does nothing
// returns nothing.
func TestTrimReturnsFreedCMemory(t *testing.T) {
	s := mustOpen(t, "s", Options{FS: vfs.NewMem(), CacheSize: 64 << 20, MemTableSize: 4 << 20})
	keys := fillIndexes(t, s, 1, 0, 8)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFlushed(t, s)
	// Through Pebble's iterators, so that the blocks go through its cache
	// (Gets read run blocks themselves, blocks.go).
	n := 0
	if err := s.ScanGeneration(1, func(partition.Hash, uint64) error { n++; return nil }); err != nil || n != len(keys) {
		t.Fatalf("scan: %d keys of %d, %v", n, len(keys), err)
	}
	mustClose(t, s) // frees the cache's blocks
	_, free, _ := CHeap()
	if free < 8<<20 {
		t.Fatalf("glibc holds %d bytes free after the cache's blocks were freed: nothing for the trim to return, the test checks nothing", free)
	}
	lastTrim.Store(0)
	before := rssBytes(t)
	trimCHeap()
	after := rssBytes(t)
	t.Logf("glibc free %d MiB; RSS %d -> %d MiB", free>>20, before>>20, after>>20)
	if before-after < int64(free)/8 {
		t.Fatalf("RSS %d -> %d after the trim, with %d bytes free in glibc's arenas: want at least an eighth of them back (pages with live chunks stay)", before, after, free)
	}
	// At most once a second: a second call right after does nothing.
	last := lastTrim.Load()
	trimCHeap()
	if lastTrim.Load() != last {
		t.Fatal("trimCHeap ran twice within a second")
	}
}

// TestCArenasCapped proves the constructor capped glibc's arenas before
// anything allocated: C allocations on many threads at once (Pebble's
// block cache allocates on whichever thread reads) make at most cArenaMax
// arenas, where glibc's default makes one per thread up to 8 per core. A
// test run whose environment tunes glibc's malloc itself is skipped.
func TestCArenasCapped(t *testing.T) {
	if strings.Contains(os.Getenv("GLIBC_TUNABLES"), "glibc.malloc.") || os.Getenv("MALLOC_ARENA_MAX") != "" || os.Getenv("MALLOC_MMAP_THRESHOLD_") != "" {
		t.Skip("the environment tunes glibc's malloc: the store leaves it alone")
	}
	if a, m := CMallocSettings(); a != cArenaMax || m != cMmapThreshold {
		t.Fatalf("malloc settings at start-up: arena max %d, mmap threshold %d; want %d, %d", a, m, cArenaMax, cMmapThreshold)
	}
	const threads = 8
	var start, done sync.WaitGroup
	start.Add(threads)
	done.Add(threads)
	release := make(chan struct{})
	for range threads {
		go func() {
			defer done.Done()
			runtime.LockOSThread() // a thread of its own, kept until the goroutine ends
			defer runtime.UnlockOSThread()
			start.Done()
			<-release
			for range 1000 {
				cAllocFree(4 << 10)
			}
		}()
	}
	start.Wait()
	close(release)
	done.Wait()
	n, ok := CArenas()
	if !ok {
		t.Fatal("malloc_info gave no arenas")
	}
	t.Logf("%d arenas after C allocations on %d threads", n, threads)
	if n > cArenaMax {
		t.Fatalf("%d arenas after C allocations on %d threads: want at most %d (M_ARENA_MAX)", n, threads, cArenaMax)
	}
}
