package prefetch

// Line asks the CPU to bring the cache line holding addr into all levels of
// its caches (PREFETCHT0) without waiting for it. It never faults, whatever
// addr is.
//
//go:noescape
func Line(addr uintptr)
