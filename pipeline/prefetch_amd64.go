package pipeline

// prefetch asks the CPU to bring the cache line at addr into the caches
// without waiting for it (PREFETCHT0: the instruction retires at once). It
// never faults.
//
//go:noescape
func prefetch(addr uintptr)
