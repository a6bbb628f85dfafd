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
// Every generation is sized by bloom.EstimateParameters for
// KeysPerGeneration keys at FalsePositiveRate/G. An absent key is a false
// positive if any live generation says maybe, so by the union bound the rate
// of Test with every generation at capacity is at most G * p/G = p (about
// 1-(1-p/G)^G, since the generations hold different keys). The price
// is memory: at p = 1% and G = 4 each generation takes 12.5 bits per key
// (9 probes) where one filter for the whole window would take 9.6; at p = 0.1%
// and G = 5, 17.7 bits (13 probes). A generation that receives more keys than
// KeysPerGeneration loses nothing, but its false-positive rate rises; Stats
// and EstimatedFalsePositiveRate report the rate from the bits actually set.
//
// # Probing
//
// The k bit positions come from the key's 128-bit hash (xxh3-128, computed
// once per record) by enhanced double hashing, reduced into [0, m) by a
// multiply-shift, and the bits are read from the bitset words directly.
// Feeding the 16 hash bytes to bloom's Test and Add instead would hash them
// again with murmur3 and take a 64-bit modulo per probe, per generation. In
// BenchmarkProbe that path is 4 to 5 times slower on a window of 4
// generations of 250k keys (Add 46 ns against 208 ns, Test of an absent key
// 85 ns against 448 ns), and still 2.8 times slower at 4 x 2.5M keys, where
// cache misses dominate (386 ns against 1067 ns). Neither path allocates: the
// 16-byte buffer stays on the stack. Because all generations share m and k,
// the positions are computed once per key, and the first two probes of every
// generation are loaded without branching so that their cache misses overlap.
//
// The bloom/v3 filters remain the storage: they size the generations, own
// the bitsets, clear them, count their bits and write them to snapshots.
// Their own Test and Add methods hash differently and are never called on a
// Filter's generations.
//
// # No false negatives
//
// Add and AddTo set exactly the bits that Test and Candidates read. Bits are
// cleared only when their generation leaves the window, which is also when
// the store drops its bucket. A snapshot restores the bits exactly or fails
// with a typed error. So a key added to a generation that is still live always
// tests positive and is listed in Candidates for that generation.
//
// The filter knows only what it was given. After ReadFrom the stage replays
// with AddTo the store entries committed after Tag(), and after a failed
// restore it rebuilds from a full scan.
//
// A Filter is not safe for concurrent use; it belongs to one stage.
//
// # Snapshot format
//
// WriteTo writes, with integers big-endian:
//
//	offset size
//	 0      8   magic "DSBLOOM\x00"
//	 8      2   format version (1)
//	10      2   flags: bit 0 set if bitset words are little-endian
//	12      4   generations
//	16      8   keys per generation
//	24      8   false-positive rate, IEEE 754 bits
//	32      8   m, bits per generation
//	40      8   k, probes
//	48      8   tag
//	56      8   current generation
//	64      4   CRC-32C of bytes 0-63
//	then for each live generation, newest first:
//	        8   generation
//	        8   Add/AddTo calls
//	        24+8*ceil(m/64)  bloom.BloomFilter.WriteTo: m, k, bitset length,
//	                         words (bitset byte order, big-endian by default)
//	then    4   CRC-32C (Castagnoli) of everything before it
//
// ReadFrom accepts a snapshot only for an identical Config, the same m and k
// (bloom's sizing could change between versions) and the same process-wide
// bitset byte order; otherwise it returns a *MismatchError. Bad magic,
// checksums, sizes or generation numbers and truncation give a
// *CorruptError. SaveFile writes through a temporary file, fsync and rename;
// LoadFile also rejects trailing bytes.
package filter
