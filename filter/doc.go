// Package filter is the Bloom front of a stage: a generational Bloom filter
// over the 128-bit hashes of business keys. "Definitely not" lets the stage
// skip the exact store; "maybe" is confirmed there, so a false positive costs
// a store read and never drops a record.
//
// # Generations
//
// Time is cut into generations, gen = t / span. A Filter keeps
// Config.Generations (G) live generations: the newest, Current(), and the
// G-1 before it (none below 0). Each has its own Bloom filter. Add records a
// key in the newest; AddTo records it in any live generation, for rebuilding
// from a scan of the exact store, which uses the same generation numbers as
// buckets. Test probes every live generation; Candidates says which of them
// may hold the key, newest first, so the stage reads only those buckets.
//
// Advance(gen) makes gen the newest generation. Generations that fall out of
// [gen-G+1, gen] are forgotten: their bitsets are cleared and reused for the
// new generations, so the steady state allocates nothing. A key is thus
// remembered for between G-1 and G spans after it was added, exactly as long
// as the store keeps its bucket. Advance never moves backwards: an older gen
// is ignored.
//
// # Sizing
//
// Every sub-filter is a blocked Bloom filter: a key's k bits all fall into
// one block, picked by the high word of its hash. A generation's first
// sub-filter is sized for KeysPerGeneration keys at FalsePositiveRate/G,
// from the exact rate of a blocked filter (the keys per block are Poisson
// distributed) rather than the classic formula. An absent key is a false
// positive if any live generation says maybe, so by the union bound the
// rate of Test with every generation at capacity is at most G * p/G = p.
//
// The first sub-filters of all generations share one array of rows (see
// Probing), and their blocks are the smallest of 128, 256 and 512 bits
// that needs at most 1.2 times the bits per key of 512-bit blocks. Blocks
// fill unevenly, the smaller the more, so for the same rate a blocked
// filter takes more bits than a classic one: at p = 1% and G = 4 (the
// default), 128-bit blocks and 15.2 bits per key (k = 7), against 13.2
// with 512-bit blocks (k = 8) and 12.5 classic (k = 9); at p = 0.1% and
// G = 5, 256-bit blocks (128-bit ones would take 1.4 times the bits). In
// exchange Test reads one cache line for all generations and Add writes
// one, where the classic layout touched up to k lines per generation; on a
// large window every one of them is a cache miss. Grown sub-filters have
// 512-bit blocks, each in a bitset of its own: at their tighter rates small
// blocks would cost far more bits.
//
// # Growth
//
// A generation that receives more keys than it was sized for (a backlog or
// burst whose timestamps fall into one generation) grows instead of
// saturating: when the estimated rate of its newest sub-filter reaches 1.1
// times the rate it was sized for, Add and AddTo start a new sub-filter,
// with twice the capacity of the previous one at a tighter rate: p/G for
// the first, p/G/2^(i+3) for sub-filter i >= 1. Test and Candidates probe
// every sub-filter of a generation. The generation's rate thus stays below
// about 1.2 * p/G * (1 + 1/16 + 1/32 + ...) = 1.35 p/G however many keys it
// gets (measured, TestBacklogInOneGeneration: 40 times its keys, 1.27 p/G;
// without growth nearly every probe is a false positive). The bits set are
// counted as they are set, so the check costs nothing measurable. Growth
// allocates, once per doubling; a generation's sub-filters are dropped
// with it when it leaves the window, and its first one is reused. A
// generation stops growing at MaxSubFilters sub-filters (or at
// MaxBytesPerGeneration for one), after which its last sub-filter fills up.
//
// A generation at exactly KeysPerGeneration keys does not grow (the 1.1
// margin). Stats reports each generation's sub-filters and its rate
// estimated from the bits set, block by block: the job exports both, and
// a generation with 3 sub-filters or more (more than 3 times its keys)
// means dedup.expected_keys is too low.
//
// # Probing
//
// The block is the high word of the key's 128-bit hash (xxh3-128, computed
// once per record) reduced into [0, blocks) by a multiply-shift, and the k
// positions inside it are the top log2(block bits) bits of successive
// products of the low word by an odd constant. The k bits are gathered
// into a pattern of the block's words once per key; a sub-filter holds the
// key if pattern AND NOT block is zero, which needs no data-dependent
// branch. Feeding the 16 hash bytes to bloom's Test and Add instead would
// hash them again with murmur3 and touch k cache lines per generation.
//
// All first sub-filters share their shape, so the pattern and the block
// index are computed once for all generations, and their blocks of one
// index lie side by side: row b of the rows holds block b of the slot of
// every generation (slot i at words b*stride + i*blockWords, stride = G
// blocks). With the default 4 generations of 128-bit blocks a row is one
// 64-byte cache line, so an absent key, which every generation must
// reject, costs one cache miss instead of four. On a 100M-key window
// (BenchmarkFront100M with a prototype of the rows beside the filter as it
// was, in the same run, CPU per probed key, 3 rounds): the rows 44-49 ns,
// four bitsets of 512-bit blocks 186-204 on huge pages and 106-123 in the
// Go heap.
//
// MaskAll, the stage's probe of a chunk of records, prefetches the row of
// the key 16 places ahead while it tests the current one, so that the
// misses of many keys are in flight at once.
// MaskAllAdd, what the stage calls, also adds every key it finds new to
// the newest generation right after probing it, while the block is in the
// cache and with the pattern already computed; an Add after the whole
// chunk was probed found the block evicted again at 100M keys
// (BenchmarkFront100M new-emit against new-fused: 281 against 250 ns of
// CPU per new key, medians of 3 rounds, machine at load ~20).
//
// # Memory
//
// A bitset of 2 MiB or more is, on Linux, an anonymous mapping of its own,
// aligned to 2 MiB and advised MADV_HUGEPAGE up to its last whole huge
// page, so the kernel backs it with transparent huge pages when its setting
// is "madvise" (the Go heap is not advised); the partial tail stays on
// ordinary pages, which keep only what it uses resident. On a large window every probe is also a TLB miss with 4 KiB
// pages (165 MB of bitsets at 100M keys, against the 8 MiB the TLB covers);
// with 2 MiB pages the whole front fits the TLB. Measured on a 100M-key
// window (BenchmarkFront100M, CPU per key, medians of 3 interleaved rounds):
// MaskAll with loads ahead 810 ns in the Go heap, 532 ns on huge pages;
// with prefetches 562 and 261 ns. Smaller bitsets, and all of them on other systems, are
// ordinary slices. A grown sub-filter's mapping is unmapped when its
// generation leaves the window, and the rows when the Filter is garbage
// collected; the mappings
// are outside the Go heap (RSS, not runtime.MemStats). Where the kernel
// has no huge page free it uses 4 KiB pages: /proc/PID/smaps_rollup's
// AnonHugePages shows how much of the process is on huge pages.
//
// The bloom/v3 filters own the bitsets of grown sub-filters; the rows of
// the first sub-filters are the Filter's own. Snapshots write every
// sub-filter in bloom's WriteTo format, a first sub-filter's blocks
// gathered from its lane of the rows. bloom's own Test and Add use another
// layout and are never called on a Filter's sub-filters.
//
// # No false negatives
//
// Add and AddTo set exactly the bits that Test and Candidates read, in the
// newest sub-filter of the generation, and Test and Candidates read every
// sub-filter of every live generation. Bits are cleared only when their
// generation leaves the window, which is also when
// the store drops its bucket. A snapshot restores the bits exactly or fails
// with a typed error. So a key added to a generation that is still live always
// tests positive and is listed in Candidates for that generation.
//
// The filter knows only what it was given. After ReadFrom the stage replays
// with AddTo the store entries committed after Tag() (those in memory and
// in the runs numbered Mark() or later), and after a failed restore it
// rebuilds from a full scan.
//
// A Filter is not safe for concurrent use; it belongs to one stage.
//
// # Snapshot format
//
// WriteTo writes, with integers big-endian:
//
//	offset size
//	 0      8   magic "DSBLOOM\x00"
//	 8      2   format version (4)
//	10      2   flags: bit 0 set if bitset words are little-endian
//	12      4   generations
//	16      8   keys per generation
//	24      8   false-positive rate, IEEE 754 bits
//	32      8   m, bits of a first sub-filter
//	40      8   k, its probes
//	48      8   tag
//	56      8   current generation
//	64      8   mark
//	72      4   CRC-32C of bytes 0-71
//	then for each live generation, newest first:
//	        8   generation
//	        8   Add/AddTo calls
//	        4   sub-filters n, 1 to MaxSubFilters
//	        n x (24+8*ceil(m_i/64))  bloom.BloomFilter.WriteTo format of
//	                         sub-filter i: m_i, k_i, bitset length, words
//	                         in block order (bitset byte order, big-endian
//	                         by default)
//	then    4   CRC-32C (Castagnoli) of everything before it
//
// The sizes of the sub-filters follow from the Config; ReadFrom checks each
// against it before reading its bits, so a damaged count cannot make it
// allocate more than the configuration allows. ReadFrom accepts a snapshot
// only for an identical Config, the same m and k and the same process-wide
// bitset byte order; otherwise it returns a *MismatchError. Formats 1 (one
// classic bitset per generation, before generations grew), 2 (without
// the mark) and 3 (512-bit blocks for every sub-filter) are refused with a
// *MismatchError too: the stage then rebuilds the filter from a scan of
// the store, once, after the upgrade. Bad magic, checksums, sizes or generation
// numbers and truncation give a *CorruptError. ReadConfig checks the same
// header as ReadFrom. SaveFile writes through a temporary file, fsync and
// rename; LoadFile also rejects trailing bytes.
package filter
