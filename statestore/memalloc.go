package statestore

import (
	"sync"
	"unsafe"

	"github.com/dedupstream/dedupstream/partition"
)

// The indexes of recent keys and the flusher's sort buffers are large
// arrays without pointers whose lifetime the store knows exactly: an index
// is in use from its handover until its keys are in runs and no Reader
// holds it. In the Go heap they counted towards the collector's target
// (GOGC), which then kept half as much again as headroom, and an index
// dropped at a handover stayed resident until the heap reached that
// target. They therefore live in memory of their own (memalloc_linux.go:
// anonymous mappings) that the store hands back to the operating system the
// moment it is done with it (releaseRegion): an index once its keys are in
// runs and no Reader holds it. A store thus keeps one index resident
// between flushes and two only while one is written. The flusher's sort
// buffer (8 bytes per key of an index) stays resident from its first flush
// on: the Budget counts it all the time, and released after every flush it
// was faulted in again by the next, 2 MiB pages cleared and a host fault
// each (0.16 s of the flusher's CPU per 6M records of the sweep; with it
// kept, CPU per record 0.602 against 0.645 us at 100M keys, 0.372 against
// 0.397 at 1M, same 8 seeds, docs/benchmarks.md "Session 18").
//
// Released memory stays mapped and reads as zeros, so a stale read finds an
// empty index instead of faulting; a mapping is unmapped (freeRegion) only
// when nothing can reach it: a grown table's old one under the index's
// lock, the sort buffers by the flusher, an index's regions by a runtime
// cleanup once the index is garbage (memOff).

// memKeyBytes is what memIndexBytes counts per hash: exact.
var _ = [1]struct{}{}[unsafe.Sizeof(partition.Hash{})-memKeyBytes]

// regionOf returns a view of r as a slice of n values of T; r must hold
// them (len(r) >= n*sizeof(T)) and T must hold no pointers.
func regionOf[T any](r []byte, n int) []T {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(r))), n)
}

// memOff is the off-heap memory of one memIndex: its table and its entry
// chunks. A runtime cleanup frees it once the index is unreachable.
type memOff struct {
	slots  []byte
	chunks [][]byte
}

// release returns o's pages to the operating system; o reads as zeros
// afterwards.
func (o *memOff) release() {
	releaseRegion(o.slots)
	for _, c := range o.chunks {
		releaseRegion(c)
	}
}

// free unmaps o; nothing may use it afterwards.
func (o *memOff) free() {
	freeRegion(o.slots)
	for _, c := range o.chunks {
		freeRegion(c)
	}
	o.slots, o.chunks = nil, nil
}

// MemKind names what an off-heap region holds (OffHeap's keys).
type MemKind string

// The kinds of off-heap regions.
const (
	MemIndexTable   MemKind = "index tables"  // the indexes' open-addressing slots
	MemIndexEntries MemKind = "index entries" // the indexes' entry chunks
	MemSortBuffers  MemKind = "sort buffers"  // the flusher's references
	MemRunFilters   MemKind = "run filters"   // the run filters kept in memory
	MemRunFences    MemKind = "run fences"    // the runs' block fences (blocks.go)
)

// regions is every off-heap region of the process that is mapped now, so
// that OffHeap can say what each kind keeps resident. A region is
// registered when mapped and forgotten, under the same lock, before it is
// unmapped: OffHeap never asks the kernel about an unmapped range.
var regions struct {
	sync.Mutex
	m map[*byte]regionInfo
}

type regionInfo struct {
	n    int
	kind MemKind
	raw  []byte // the whole mapping r lies in, for freeRegion
}

func registerRegion(r, raw []byte, kind MemKind) {
	if len(r) == 0 {
		return
	}
	regions.Lock()
	if regions.m == nil {
		regions.m = map[*byte]regionInfo{}
	}
	regions.m[unsafe.SliceData(r)] = regionInfo{n: len(r), kind: kind, raw: raw}
	regions.Unlock()
}

// OffHeapUse is the off-heap memory of one kind: mapped and resident bytes.
type OffHeapUse struct {
	Mapped, Resident int64
}

// OffHeap returns, by kind, the memory the stores of this process hold
// outside the Go heap: what is mapped and what of it is resident (in RAM
// now; released pages are not). On platforms without mappings every region
// counts as resident. It asks the kernel about every region (mincore), a
// few microseconds per MiB: for benchmarks and metrics, not per record.
func OffHeap() map[MemKind]OffHeapUse {
	regions.Lock()
	defer regions.Unlock()
	out := map[MemKind]OffHeapUse{}
	for p, ri := range regions.m {
		u := out[ri.kind]
		u.Mapped += int64(ri.n)
		u.Resident += int64(residentBytes(unsafe.Slice(p, ri.n)))
		out[ri.kind] = u
	}
	return out
}
